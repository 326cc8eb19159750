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
overrides it); deleting it only costs one rebuild.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from leaderboard import submissions
from leaderboard.frame import to_frame
from leaderboard.submissions import Problem
from suite.results.records import RecordError, validate_record

__all__ = ["Index", "load_index", "load_details", "load_records", "default_index_dir", "HEAVY_COLUMNS", "INDEX_VERSION"]

INDEX_VERSION = 2  # bump when the row layout changes: every index is rebuilt
HEAVY_COLUMNS = ("timing_inputs",)  # in the file, but read only for the rows that need it
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
        """``rows`` with the heavy columns (``timing_inputs``) read from the file for their record ids."""
        cols = [c for c in columns if c not in rows]
        if not cols or rows.empty:
            return rows
        ids = list(rows["record_id"].unique())
        table = pq.read_table(self.path, columns=["source", "record_id", *cols], filters=[("record_id", "in", ids)])
        extra = table.to_pandas().drop_duplicates(["source", "record_id"])
        return rows.merge(extra, on=["source", "record_id"], how="left")


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
            out.append((f"entry:{d.resolve()}", "entry", str(d), [_stat(f) for f in files] or [_stat(d)]))
    for s in stores:
        entry = "local" if len(stores) == 1 else f"local:{Path(s).stem}"
        out.append((f"store:{Path(s).resolve()}:{entry}", "store", str(s), [_stat(Path(s)), entry]))
    return out


def _load_source(kind: str, path: str, sig: list[Any]) -> tuple[pd.DataFrame, list[Problem]]:
    if kind == "entry":
        records, problems = submissions.load_entry(path)
    else:
        records, problems = submissions.load_store(path, entry=sig[1])
    frame = to_frame(records, details=False)
    frame["source"] = path
    return frame, problems


def _drop_copies(frame: pd.DataFrame) -> tuple[pd.DataFrame, list[Problem]]:
    """The entry rows of each records folder without copies of another entry's records
    (:func:`leaderboard.submissions.copies_to_drop`)."""
    entries = frame[frame["_key"].str.startswith("entry:")]
    problems: list[Problem] = []
    drop: set[tuple[str, str]] = set()
    maint = entries["maintainers"] if "maintainers" in entries else pd.Series(False, index=entries.index)
    for root, g in entries.groupby(entries["source"].map(lambda s: str(Path(s).parent))):
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


def load_index(
    stores: Iterable[str] = (), records_dirs: Iterable[str] = (), *, index_dir: str | Path | None = None
) -> Index:
    """The index of these sources, brought up to date (see the module docstring). A store's
    copy of a record already committed in an entry is dropped (as :func:`submissions.load_all`)."""
    stores, records_dirs = [str(s) for s in stores], [str(d) for d in records_dirs]
    folder = Path(index_dir) if index_dir else default_index_dir(stores, records_dirs)
    folder.mkdir(parents=True, exist_ok=True)
    path, manifest_path = folder / "index.parquet", folder / "manifest.json"
    try:
        manifest = json.loads(manifest_path.read_text())
        if manifest.get("version") != INDEX_VERSION or not path.exists():
            manifest = {}
    except (OSError, ValueError):
        manifest = {}
    old = manifest.get("sources", {})
    current = _sources(stores, records_dirs)
    changed = [s for s in current if old.get(s[0], {}).get("sig") != json.loads(json.dumps(s[3]))]
    keys = [s[0] for s in current]
    if changed or set(old) != set(keys) or not path.exists():
        keep = [k for k in keys if k in old and k not in {c[0] for c in changed}]
        parts = []
        if keep and path.exists():
            kept = pq.read_table(path, filters=[("_key", "in", keep)]).to_pandas()
            parts.append(kept)
        new_meta = {k: old[k] for k in keep}
        for key, kind, src, sig in changed:
            frame, problems = _load_source(kind, src, sig)
            frame["_key"] = key
            parts.append(frame)
            new_meta[key] = {"sig": sig, "problems": [[p.path, p.reason] for p in problems]}
        parts = [p for p in parts if len(p)]
        table = pd.concat(parts, ignore_index=True) if parts else to_frame([], details=False).assign(source="", _key="")
        for c in table.columns:  # a column all-None in one part and typed in another
            if table[c].dtype == object and table[c].map(lambda v: isinstance(v, float)).all():
                table[c] = table[c].astype(float)
        _write_atomic(path, lambda tmp: pq.write_table(pa.Table.from_pandas(table, preserve_index=False), tmp))
        manifest = {"version": INDEX_VERSION, "sources": {k: new_meta[k] for k in keys}}
        _write_atomic(manifest_path, lambda tmp: Path(tmp).write_text(json.dumps(manifest)))
    schema = pq.read_schema(path)
    light = [c for c in schema.names if c not in HEAVY_COLUMNS]
    frame = pq.read_table(path, columns=light).to_pandas()
    order = {k: i for i, k in enumerate(keys)}
    if len(frame):
        frame = frame.sort_values("_key", key=lambda s: s.map(order), kind="stable").reset_index(drop=True)
        committed = set(frame.loc[frame["_key"].str.startswith("entry:"), "record_id"])
        frame = frame[frame["_key"].str.startswith("entry:") | ~frame["record_id"].isin(committed)]
    problems = [Problem(p, r) for k in keys for p, r in manifest["sources"].get(k, {}).get("problems", [])]
    if len(frame):  # a record_id in several entries stays with the entry that committed it (issue 12, A6)
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
        for line in data.split(b"\n"):
            if len(line) > submissions.MAX_LINE_BYTES or not any(n in line for n in needles):
                continue
            try:
                rec = json.loads(line)
                validate_record(rec)
            except (ValueError, RecordError, RecursionError):
                continue
            if rec.get("record_id") in ids and rec["record_id"] not in found:
                found[rec["record_id"]] = rec
    return found


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


def load_details(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` of the index with the per-record details read back from their source files:
    ``curve`` (list), ``config``, ``provenance`` (dicts) and ``timing_inputs``
    (JSON string). Rows whose record can no longer be found get empty values."""
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
    if "timing_inputs" not in rows:
        timing = [details.get(k, {}).get("timing_inputs") for k in keys]
        rows["timing_inputs"] = [json.dumps(t, separators=(",", ":")) if isinstance(t, dict) else "" for t in timing]
    return rows
