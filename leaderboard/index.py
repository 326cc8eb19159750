"""The compact index: one Parquet row per record, so the page and the report stay fast as the board grows.

A record is about 20 KB of JSON (curves, per-step bytes, timing inputs); the ranking and the
plots need about a hundred scalars of it. :func:`load_index` keeps those scalars (the rows of
:func:`leaderboard.frame.to_frame` with ``details=False``) in ``index.parquet`` next to a
``manifest.json`` that remembers, per *source* (one entry folder of ``records/`` or one
results store), the files' sizes and modification times and the problems found loading it.
When records change, only the sources whose files changed are loaded again (through
:mod:`leaderboard.submissions`, with all its checks); the others' rows are kept. Curves and
other per-record details are read back from the source files only for the rows on screen
(:func:`load_details`).

    index = load_index(stores=["results/store.jsonl"], records_dirs=["records"])
    frame = index.frame                       # light columns only (no timing_inputs)
    shown = load_details(frame[some_rows])    # + curve, config, provenance, timing_inputs

The index lives in ``~/.cache/mpcbench/leaderboard/<hash of the sources>/`` (``index_dir``
overrides it); deleting it only costs one rebuild. The heavy column (``timing_inputs``, a
JSON string of several KB per record, read only for re-modeling at a link) is kept apart in
``heavy.parquet`` there and written source by source as it is built, so building the index of
100,000 records never holds all of them in memory (:meth:`Index.heavy` reads it back).

**Building it in parallel.** Sources to load are shared out to worker processes (fresh
interpreters, :func:`_load_sources`) when there is enough to load (:data:`PARALLEL_MIN_BYTES`
of record files) and more than one CPU; results come back in the sources' order, so the rows
and problems are those of the serial build. ``MPCBENCH_INDEX_WORKERS`` sets the number of
processes (``1``: serial).

**No derived file is committed.** The index is only ever a local cache, keyed by its inputs: the
SHA-256 of every file of every entry folder (a store: its size and modification time), the
index layout, the network model version and a hash of the code that turns records into rows
(``_ROW_CODE``). A records folder carries no rows, so a pull request cannot change the board by
editing a derived file; a stray ``records/leaderboard-index.*`` is ignored (docs/reliability.md,
"Derived artifacts"). The cold cost this moves to the first open is bounded: records written by an
older network model are re-modeled within a budget per source (``leaderboard.frame.RemodelBudget``).
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from leaderboard import submissions
from leaderboard.frame import canonical_inputs, to_frame
from leaderboard.submissions import Problem
from suite import settings
from suite.results.record_json import load_record
from suite.results.records import RecordError

__all__ = [
    "Index",
    "load_index",
    "load_details",
    "load_records",
    "default_index_dir",
    "HEAVY_COLUMNS",
    "INDEX_VERSION",
]

INDEX_VERSION = 3  # bump when the row layout changes: every index is rebuilt (3: heavy.parquet apart)
HEAVY_COLUMNS = ("timing_inputs",)  # kept in HEAVY_FILE, read only for the rows that need it
HEAVY_FILE = "heavy.parquet"
_HEAVY_SCHEMA = pa.schema([("_key", pa.string()), ("source", pa.string()), ("record_id", pa.string())])
_HEAVY_SCHEMA = _HEAVY_SCHEMA.append(pa.field(HEAVY_COLUMNS[0], pa.string()))
PARALLEL_MIN_BYTES = 16 * 2**20  # record files to load before worker processes pay off (~800 records)
MAX_WORKERS = 16
_DETAIL_FIELDS = ("curve", "config", "provenance")


@dataclass
class Index:
    """The loaded index: ``frame`` (one row per record, light columns; ``source`` names the
    entry folder or store each row came from), ``problems`` (skipped files and records),
    ``path`` of the Parquet file and ``rebuilt``: the sources loaded again this time."""

    frame: pd.DataFrame
    problems: list[Problem]
    path: Path
    rebuilt: list[str] = field(default_factory=list)

    def heavy(self, rows: pd.DataFrame, columns: Iterable[str] = HEAVY_COLUMNS) -> pd.DataFrame:
        """``rows`` with the heavy columns (``timing_inputs``) read from :data:`HEAVY_FILE` for
        their record ids (``""`` where a row has none)."""
        cols = [c for c in columns if c not in rows]
        if not cols or rows.empty:
            return rows
        ids = list(rows["record_id"].unique())
        path = self.path.with_name(HEAVY_FILE)
        if path.exists():
            table = pq.read_table(path, columns=["source", "record_id", *cols], filters=[("record_id", "in", ids)])
            extra = table.to_pandas().drop_duplicates(["source", "record_id"])
        else:
            extra = pd.DataFrame(columns=["source", "record_id", *cols])
        out = rows.merge(extra, on=["source", "record_id"], how="left")
        for c in cols:  # stored as a JSON text (orjson's where it was cheaper), given as json's
            out[c] = [canonical_inputs(t) if isinstance(t, str) else "" for t in out[c]]
        return out


def default_index_dir(stores: list[str], records_dirs: list[str]) -> Path:
    """``~/.cache/mpcbench/leaderboard/<16 hex of the absolute source paths>``."""
    key = json.dumps([[str(Path(p).resolve()) for p in stores], [str(Path(p).resolve()) for p in records_dirs]])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "mpcbench" / "leaderboard" / hashlib.sha256(key.encode()).hexdigest()[:16]


def _stat(p: Path) -> list[Any]:
    try:
        s = p.lstat()
        return [p.name, s.st_mtime_ns, s.st_size]
    except OSError:
        return [p.name, None, None]


def _content(p: Path) -> list[Any]:
    """[name, None, size, sha256] of an entry folder's file: the cache is keyed by what the files
    hold, not by when they were written (a file over the loader's cap: its size and mtime only)."""
    if p.is_symlink() or not p.is_file() or p.stat().st_size > submissions.MAX_FILE_BYTES:
        return _stat(p)
    h = hashlib.sha256()
    try:
        with p.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except OSError:
        return _stat(p)
    return [p.name, None, p.stat().st_size, h.hexdigest()]


def _sources(stores: list[str], records_dirs: list[str]) -> list[tuple[str, str, str, list[Any]]]:
    """(key, kind, path, signature) of every source: entry folders first (they carry the
    attribution), then stores; the signature changes whenever a file in it changes."""
    out = []
    for root in map(Path, records_dirs):
        if not root.is_dir():
            continue
        dirs = sorted(p for p in root.iterdir() if not p.name.startswith(".") and (p.is_dir() or p.is_symlink()))
        for d in dirs[: submissions.MAX_ENTRIES]:
            files = sorted(d.iterdir()) if d.is_dir() and not d.is_symlink() else []
            out.append((f"entry:{d.resolve()}", "entry", str(d), [_content(f) for f in files] or [_stat(d)]))
    for s in stores:
        entry = "local" if len(stores) == 1 else f"local:{Path(s).stem}"
        out.append((f"store:{Path(s).resolve()}:{entry}", "store", str(s), [_stat(Path(s)), entry]))
    return out


def _load_source(kind: str, path: str, sig: list[Any]) -> tuple[pd.DataFrame, list[Problem]]:
    # the cyclic garbage collector off while a source loads: its records (~2,000 objects each, no
    # cycles) would otherwise be traversed again and again by full collections (25% of the time)
    enabled = gc.isenabled()
    gc.disable()
    try:
        if kind == "entry":
            records, problems = submissions.load_entry(path)
        else:
            records, problems = submissions.load_store(path, entry=sig[1])
        frame = to_frame(records, details=False)
    finally:
        if enabled:
            gc.enable()
    frame["source"] = path
    return frame, problems


def _workers(todo: list[tuple[str, str, list[Any]]]) -> int:
    """Processes to load ``todo`` with: ``MPCBENCH_INDEX_WORKERS`` if set, else one per usable CPU
    (at most one per source and :data:`MAX_WORKERS`) once its files pass :data:`PARALLEL_MIN_BYTES`."""
    asked = settings.index_workers()
    if asked is not None:
        return max(1, min(asked, len(todo), MAX_WORKERS))
    cpus = settings.usable_cpus()
    size = sum(_task_bytes(t) for t in todo)
    return max(1, min(cpus, len(todo), MAX_WORKERS)) if size >= PARALLEL_MIN_BYTES else 1


_WORKER = (
    "import pickle, sys; path, tasks = pickle.load(sys.stdin.buffer); sys.path[:0] = path; "
    "from leaderboard.index import _serve; _serve(tasks)"
)


def _serve(tasks: list[tuple[str, str, list[Any]]]) -> None:
    """A worker process: :func:`_load_source` of each task, in order, pickled to stdout
    (``None`` where it raised: the parent then loads that source itself and meets the error there)."""
    import pickle
    import sys

    # the results go to a private copy of the stdout pipe; file descriptor 1 and sys.stdout point at
    # stderr, so that nothing else written here (a print, a C library) can corrupt the stream
    sys.stdout.flush()
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    os.environ["MPCBENCH_INDEX_WORKERS"] = "1"  # one of several workers already: it re-models its records itself
    for task in tasks:
        try:
            got: Any = _load_source(*task)
        except Exception:  # noqa: BLE001 - the parent repeats it and raises it where the serial build would
            got = None
        pickle.dump(got, out, protocol=pickle.HIGHEST_PROTOCOL)
        out.flush()


def _load_sources(todo: list[tuple[str, str, list[Any]]]) -> Iterator[tuple[pd.DataFrame, list[Problem]]]:
    """:func:`_load_source` of each of ``todo``, in its order: in worker processes when it pays
    (:func:`_workers`), else here; the same results either way.

    Workers are fresh interpreters (``sys.executable -c``: no fork of a threaded server, no
    re-import of the caller's main module), each given its share of the sources up front
    (balanced by bytes, each share in order); this process reads the results in the sources'
    order, one at a time, so a worker waits (its pipe full) rather than piling results up here.
    A worker that cannot start or dies leaves the rest to this process."""
    import pickle
    import subprocess
    import sys

    workers = _workers(todo)
    procs: list[subprocess.Popen] = []
    if workers > 1 and sys.executable:
        shares: list[list[tuple[str, str, list[Any]]]] = [[] for _ in range(workers)]
        load = [0] * workers
        owner = []
        for task in todo:
            w = load.index(min(load))
            shares[w].append(task)
            owner.append(w)
            load[w] += max(_task_bytes(task), 1)
        try:
            for share in shares:
                p = subprocess.Popen([sys.executable, "-c", _WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
                procs.append(p)
                assert p.stdin is not None
                pickle.dump(([x for x in sys.path if x], share), p.stdin, protocol=pickle.HIGHEST_PROTOCOL)
                p.stdin.close()
        except OSError:  # no processes here (a sandbox, a limit): this process loads everything
            _stop(procs)
            procs = []
    try:
        for i, task in enumerate(todo):
            got = None
            if procs:
                try:
                    got = pickle.load(procs[owner[i]].stdout)  # type: ignore[arg-type]
                except Exception:  # noqa: BLE001 - a worker died (killed, out of memory): the rest is done here
                    _stop(procs)
                    procs = []
            yield got if got is not None else _load_source(*task)
    finally:
        _stop(procs)


def _task_bytes(task: tuple[str, str, list[Any]]) -> int:
    """Bytes of a source's files, from its signature (an entry: [[name, mtime, size], ...]; a store: [[...], entry])."""
    kind, _path, sig = task
    stats = sig if kind == "entry" else sig[:1]
    return sum(s[2] or 0 for s in stats if isinstance(s, list) and len(s) >= 3 and isinstance(s[2], int))


def _stop(procs: list) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()
        if p.stdout is not None:
            p.stdout.close()


class _HeavyWriter:
    """:data:`HEAVY_FILE` written part by part (the rows' heavy columns, never all in memory)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        os.close(fd)
        self.tmp = tmp
        self.writer = pq.ParquetWriter(tmp, _HEAVY_SCHEMA)

    def add(self, frame: pd.DataFrame) -> None:
        if len(frame) and HEAVY_COLUMNS[0] in frame:
            cols = frame[list(_HEAVY_SCHEMA.names)]  # every value a str (to_frame: "" where none)
            self.writer.write_table(pa.Table.from_pandas(cols, schema=_HEAVY_SCHEMA, preserve_index=False))

    def copy(self, old: Path, keys: list[str]) -> None:
        """The rows of ``old`` (a previous :data:`HEAVY_FILE`) whose source is one of ``keys``, batch by batch."""
        if not keys or not old.exists():
            return
        try:
            data = pads.dataset(old, format="parquet", schema=_HEAVY_SCHEMA)
            for batch in data.to_batches(filter=pads.field("_key").isin(keys)):
                self.writer.write_table(pa.Table.from_batches([batch], schema=_HEAVY_SCHEMA))
        except (OSError, pa.ArrowException):  # an unreadable old file: those rows re-model from nothing
            pass

    def close(self) -> None:
        self.writer.close()
        os.replace(self.tmp, self.path)

    def abort(self) -> None:
        self.writer.close()
        if os.path.exists(self.tmp):
            os.unlink(self.tmp)


def _drop_copies(frame: pd.DataFrame) -> tuple[pd.DataFrame, list[Problem]]:
    """The entry rows of each records folder without copies of another entry's records
    (:func:`leaderboard.submissions.copies_to_drop`)."""
    entries = frame[frame["_key"].str.startswith("entry:")]
    problems: list[Problem] = []
    drop: set[tuple[str, str]] = set()
    maint = entries["maintainers"] if "maintainers" in entries else pd.Series(False, index=entries.index)
    parent = {s: str(Path(s).parent) for s in entries["source"].unique()}  # once per source, not per row
    for root, g in entries.groupby(entries["source"].map(parent)):
        rows = zip(g["record_id"], g["entry"], maint.loc[g.index].astype(bool), [""] * len(g))
        d, probs = submissions.copies_to_drop(root, rows)
        drop |= d
        problems += probs
    if not drop:
        return frame, problems
    keep = [
        (e, r) not in drop or not k.startswith("entry:")
        for e, r, k in zip(frame["entry"], frame["record_id"], frame["_key"])
    ]
    return frame[keep], problems


def _write_atomic(path: Path, write) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


# the code that turns record files into index rows: a cache built by other code is rebuilt
_ROW_CODE = ("leaderboard/frame.py", "leaderboard/submissions.py", "leaderboard/networks.py", "suite/results")


def _code_hash() -> str:
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for rel in _ROW_CODE:
        p = root / rel
        # the calibration files are the time model's data: new numbers, new rows
        for f in sorted([*p.rglob("*.py"), *p.rglob("calibration/*.json")]) if p.is_dir() else [p]:
            h.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes().replace(b"\r\n", b"\n"))
    return h.hexdigest()[:16]


def _versions() -> dict[str, Any]:
    from suite.results.network import MODEL_VERSION
    from suite.results.time_model import TIME_MODEL_VERSION

    return {"version": INDEX_VERSION, "model_version": [MODEL_VERSION, TIME_MODEL_VERSION], "code": _code_hash()}


def _typed(table: pd.DataFrame) -> pd.DataFrame:
    for c in table.columns:  # a column all-None in one part and typed in another
        if table[c].dtype == object and table[c].map(lambda v: isinstance(v, float)).all():
            table[c] = table[c].astype(float)
    return table


def load_index(
    stores: Iterable[str] = (),
    records_dirs: Iterable[str] = (),
    *,
    index_dir: str | Path | None = None,
) -> Index:
    """The index of these sources, brought up to date (see the module docstring). A store's
    copy of a record already committed in an entry is dropped (as :func:`submissions.load_all`)."""
    stores, records_dirs = [str(s) for s in stores], [str(d) for d in records_dirs]
    folder = Path(index_dir) if index_dir else default_index_dir(stores, records_dirs)
    folder.mkdir(parents=True, exist_ok=True)
    path, manifest_path = folder / "index.parquet", folder / "manifest.json"
    try:
        manifest = json.loads(manifest_path.read_text())
        # a cached index built by other row-building code (a new column, another network model) is
        # rebuilt whole: its rows would lack what this code reads
        if manifest.get("versions") != _versions() or not path.exists():
            manifest = {}
    except (OSError, ValueError):
        manifest = {}
    old = manifest.get("sources", {})
    current = _sources(stores, records_dirs)
    changed = [s for s in current if old.get(s[0], {}).get("sig") != json.loads(json.dumps(s[3]))]
    keys = [s[0] for s in current]
    built: pa.Table | None = None
    if changed or set(old) != set(keys) or not path.exists():
        keep = [k for k in keys if k in old and k not in {c[0] for c in changed}]
        parts = []
        if keep and path.exists():
            kept = pq.read_table(path, filters=[("_key", "in", keep)]).to_pandas()
            parts.append(kept)
        new_meta = {k: old[k] for k in keep}
        loaded = _load_sources([c[1:] for c in changed])
        heavy = _HeavyWriter(folder / HEAVY_FILE)
        try:
            heavy.copy(folder / HEAVY_FILE, keep)
            for key, _kind, _src, sig in changed:
                frame, problems = next(loaded)
                frame["_key"] = key
                heavy.add(frame)  # written now; the rows kept in memory are the light ones
                parts.append(frame.drop(columns=[c for c in HEAVY_COLUMNS if c in frame]))
                new_meta[key] = {"sig": sig, "problems": [[p.path, p.reason] for p in problems]}
        except BaseException:
            heavy.abort()
            raise
        heavy.close()
        parts = [p for p in parts if len(p)]
        table = pd.concat(parts, ignore_index=True) if parts else to_frame([], details=False).assign(source="", _key="")
        del parts
        built = pa.Table.from_pandas(_typed(table), preserve_index=False)
        del table
        _write_atomic(path, lambda tmp: pq.write_table(built, tmp))
        manifest = {"versions": _versions(), "sources": {k: new_meta[k] for k in keys}}
        _write_atomic(manifest_path, lambda tmp: Path(tmp).write_text(json.dumps(manifest)))
    if built is not None:  # what was just written, not read back (the same frame: tested)
        frame = built.to_pandas()
        del built
    else:
        schema = pq.read_schema(path)
        light = [c for c in schema.names if c not in HEAVY_COLUMNS]
        frame = pq.read_table(path, columns=light).to_pandas()
    order = {k: i for i, k in enumerate(keys)}
    if len(frame):
        frame = frame.sort_values("_key", key=lambda s: s.map(order), kind="stable").reset_index(drop=True)
        committed = set(frame.loc[frame["_key"].str.startswith("entry:"), "record_id"])
        frame = frame[frame["_key"].str.startswith("entry:") | ~frame["record_id"].isin(committed)]
    problems = [Problem(p, r) for k in keys for p, r in manifest["sources"].get(k, {}).get("problems", [])]
    # a record_id in several entries stays with the entry that committed it: a copy cannot take over its row
    if len(frame):
        frame, copy_problems = _drop_copies(frame)
        problems += copy_problems
    frame = frame.drop(columns=["_key"], errors="ignore").reset_index(drop=True)
    return Index(frame, problems, path, [c[2] for c in changed])


def _scan(files: list[Path], ids: set[str]) -> dict[str, dict[str, Any]]:
    """The records with these ids from JSON Lines files (validated again: files may change)."""
    found: dict[str, dict[str, Any]] = {}
    needles = [i.encode() for i in ids]
    for f in files:
        try:
            data = submissions._read_capped(f, submissions.MAX_FILE_BYTES)  # noqa: SLF001 - the loader's own cap
        except Exception:  # noqa: BLE001 - a file that went bad (or over the cap) is simply not shown
            continue
        if not any(n in data for n in needles):
            continue
        for line in _lines_with(data, needles):
            if len(line) > submissions.MAX_LINE_BYTES:
                continue
            try:
                rec = load_record(line)
            except (ValueError, RecordError, RecursionError):
                continue
            if rec.get("record_id") in ids and rec["record_id"] not in found:
                found[rec["record_id"]] = rec
    return found


def _lines_with(data: bytes, needles: list[bytes]) -> Iterator[bytes]:
    """The lines of ``data`` (split at ``\\n``) that contain one of ``needles``, in order: found by
    one regular-expression scan (a 32 MiB file holds ~1,700 records; a page shows a few)."""
    if not needles or any(not n or b"\n" in n for n in needles):  # what one scan cannot find line by line
        yield from (line for line in data.split(b"\n") if any(n in line for n in needles))
        return
    pattern = re.compile(b"|".join(re.escape(n) for n in sorted(set(needles), key=len, reverse=True)))
    pos = 0  # the end of the last line given: a line with several matches is given once
    for m in pattern.finditer(data):
        if m.start() < pos:
            continue
        start = data.rfind(b"\n", 0, m.start()) + 1
        end = data.find(b"\n", m.end())
        end = len(data) if end < 0 else end
        yield data[start:end]
        pos = end


def load_records(rows: pd.DataFrame) -> list[dict[str, Any]]:
    """The full records of these index rows, read back from their source files (validated
    again), in the rows' order; rows whose record is gone are left out. For the few rows a
    view needs whole (e.g. the report's runs over links), never for the whole board."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for source, g in rows.groupby("source", sort=False):
        p = Path(source)
        files = sorted(f for f in p.iterdir() if f.suffix == ".jsonl") if p.is_dir() else [p]
        for rid, rec in _scan(files, set(g["record_id"])).items():
            found[(source, rid)] = rec
    return [found[k] for k in zip(rows["source"], rows["record_id"]) if k in found]


def load_details(rows: pd.DataFrame, projection: Any = None) -> pd.DataFrame:
    """``rows`` of the index with the per-record details read back from their source files:
    ``curve`` (list), ``config``, ``provenance`` (dicts) and ``timing_inputs``
    (JSON string). Rows whose record can no longer be found get empty values.

    ``projection`` (a :class:`suite.results.projection.Projection`): ``timing_inputs`` are the
    projected ones (:func:`suite.results.time_model.priced_timing`), ``""`` where a row cannot be
    projected, with the reason in ``projection_note``."""
    rows = rows.copy()
    details: dict[tuple[str, str], dict[str, Any]] = {}
    for source, g in rows.groupby("source", sort=False):
        p = Path(source)
        files = sorted(f for f in p.iterdir() if f.suffix == ".jsonl") if p.is_dir() else [p]
        for rid, rec in _scan(files, set(g["record_id"])).items():
            details[(source, rid)] = rec
    keys = list(zip(rows["source"], rows["record_id"]))
    for name in _DETAIL_FIELDS:
        empty: Any = [] if name == "curve" else {}
        vals = [details.get(k, {}).get(name) for k in keys]
        rows[name] = [v if isinstance(v, type(empty)) else type(empty)() for v in vals]
    if projection is not None:
        from leaderboard.frame import board_target_step, priced_inputs
        from suite.results.projection import NotProjectable

        texts, notes = [], []
        for k in keys:
            r = details.get(k)
            try:
                got = priced_inputs(r, board_target_step(r), projection) if r else None
                note = "" if got else "no timing inputs"
            except NotProjectable as e:
                got, note = None, str(e)
            texts.append(json.dumps(got[0], separators=(",", ":")) if got else "")
            notes.append(note)
        rows["timing_inputs"] = texts
        rows["projection_note"] = notes
    elif "timing_inputs" not in rows:  # the frame's column: the inputs as the time model prices them
        from leaderboard.frame import board_target_step, priced_inputs

        priced = [priced_inputs(r, board_target_step(r)) if (r := details.get(k)) else None for k in keys]
        rows["timing_inputs"] = [json.dumps(p[0], separators=(",", ":")) if p else "" for p in priced]
    return rows
