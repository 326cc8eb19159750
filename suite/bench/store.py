"""The results store: an append-only JSON Lines file, one ``mpcbench.record/1`` per line.

``pandas.read_json(path, lines=True)`` reads it. An append writes one line to the end of the
file (``O_APPEND``) and fsyncs it, under an exclusive ``fcntl`` lock on ``<store>.lock``, so two
runners appending at once never lose each other's records, and nothing already stored is ever
rewritten: an append needs free space for its own line only. A process killed mid-write can
leave a torn last line; readers skip it (one problem line) and the next append starts a new
line after it, so the damage is that one record. When the disk is full or the location is not
writable, the append removes its partial line again and raises :class:`StoreError` with one
line saying so and that the records finished before are safe. Lines this version cannot parse
are kept for a human to look at, never dropped.

A rerun skips cells whose ``cell_key`` already has an ``ok`` record (:meth:`done_keys`);
failed and timed-out cells are retried, and the newest record of a key wins in reports.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator

from suite.bench.private_dir import is_private_dir, private_dir
from suite.results.records import RecordError, validate_record

__all__ = [
    "ResultsStore",
    "read_jsonl",
    "dump_record",
    "portable_path",
    "portable_paths",
    "DEFAULT_STORE",
    "StoreError",
]

DEFAULT_STORE = Path("results") / "store.jsonl"


class StoreError(RuntimeError):
    """The store cannot be written (not a file, no permission, record invalid)."""


def _finite_or_none(obj: Any) -> Any:
    """Replace NaN/Inf by None: strict JSON has no NaN, and pandas must read every line."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite_or_none(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite_or_none(v) for v in obj]
    return obj


def dump_record(record: dict[str, Any]) -> str:
    """One record as one line of strict JSON (no NaN, no newline inside)."""
    return json.dumps(_finite_or_none(record), sort_keys=False, allow_nan=False, separators=(",", ":"))


def read_jsonl(path: str | os.PathLike) -> tuple[list[dict[str, Any]], list[str]]:
    """Read a results file: (valid records, problems), a problem being ``"line N: reason"``.

    A missing file is an empty store. Blank lines are ignored.
    """
    p = Path(path)
    if not p.exists():
        return [], []
    if not p.is_file():
        return [], [f"{p}: not a file"]
    records: list[dict[str, Any]] = []
    problems: list[str] = []
    with p.open("rb") as f:
        for n, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                problems.append(f"line {n}: not UTF-8 ({e.reason} at byte {e.start})")
                continue
            try:
                obj = json.loads(line, parse_constant=_reject_constant)
            except (ValueError, RecursionError) as e:
                problems.append(f"line {n}: not valid JSON ({_one_line(e)})")
                continue
            try:
                records.append(validate_record(obj))
            except RecordError as e:
                problems.append(f"line {n}: {e}")
    return records, problems


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())[:300]


REPO_ROOT = Path(__file__).resolve().parents[2]


def portable_path(path: str, base: Path) -> str:
    """``path`` without this machine's folders: relative to ``base`` when inside it (an entry
    folder's ``plugin.py`` stays ``plugin.py``), else to the mpcbench checkout, else the file
    name alone (its content hash in the record identifies it). Module names pass unchanged."""
    if not path.startswith("/"):
        return path
    p = Path(path).resolve()
    for root in (base.resolve(), REPO_ROOT):
        if root in p.parents:
            return p.relative_to(root).as_posix()
    return p.name


def portable_paths(record: dict[str, Any], base: Path) -> dict[str, Any]:
    """A copy of ``record`` whose plugin files (``config.plugins``, ``provenance.plugin_hashes``
    keys, ``provenance.argv``) and ``log`` are :func:`portable_path` s: a record says what ran, not
    where the submitter keeps it."""
    out = dict(record)
    config, prov = dict(out.get("config") or {}), dict(out.get("provenance") or {})
    plugins = [p for p in config.get("plugins") or () if isinstance(p, str)]
    if plugins:
        config["plugins"] = [portable_path(p, base) for p in plugins]
        out["config"] = config
    if isinstance(prov.get("plugin_hashes"), dict):
        prov["plugin_hashes"] = {
            (f"plugin:{portable_path(k[len('plugin:') :], base)}" if k.startswith("plugin:") else k): v
            for k, v in prov["plugin_hashes"].items()
        }
    if isinstance(prov.get("argv"), str):
        argv = prov["argv"]
        for p in plugins:
            argv = argv.replace(p, portable_path(p, base))
        prov["argv"] = argv.replace(str(REPO_ROOT) + "/", "")
    if prov:
        out["provenance"] = prov
    if isinstance(out.get("log"), str):
        out["log"] = portable_path(out["log"], base)
    return out


class ResultsStore:
    """An append-only results file. Cheap to construct; every call rereads the file."""

    def __init__(self, path: str | os.PathLike = DEFAULT_STORE) -> None:
        self.path = Path(path)
        if self.path.exists() and not self.path.is_file():
            raise StoreError(f"results store {self.path} exists and is not a file; pass --results FILE.jsonl")

    @property
    def lock_path(self) -> Path:
        return self.path.with_name(self.path.name + ".lock")

    @property
    def log_dir(self) -> Path:
        """Where per-cell logs (tracebacks, child output) go: ``<store>.logs/`` next to the store."""
        return self.path.with_name(self.path.stem + ".logs")

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            lock = open(self.lock_path, "a")
        except OSError as e:
            raise StoreError(self._unwritable(e)) from None
        with lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _unwritable(self, e: OSError, what: str = "") -> str:
        """One line for an OSError while writing: disk full, read-only or forbidden location, other."""
        where = f"results store {self.path}"
        safe = "the records finished before are safe in it" if self.path.exists() else "nothing was stored"
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            return (
                f"disk full: could not append {what or 'a record'} to {where}; {safe}: free space and rerun to resume"
            )
        if e.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            reason = "read-only file system" if e.errno == errno.EROFS else "permission denied"
            return f"{where} is not writable ({reason}); pass --results PATH in a writable folder"
        return f"cannot write {where}: {e.strerror or e} (errno {e.errno}); {safe}"

    def check_writable(self) -> None:
        """Raise :class:`StoreError` (one line) now, before any cell runs, if the store cannot be written."""
        with self._locked():
            try:
                if self.path.exists():
                    os.close(os.open(self.path, os.O_WRONLY | os.O_APPEND))
                else:  # do not create the store itself: a run that stores nothing leaves none
                    fd, probe = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".probe", dir=self.path.parent)
                    os.close(fd)
                    os.unlink(probe)
            except OSError as e:
                raise StoreError(self._unwritable(e)) from None

    def append(self, record: dict[str, Any]) -> None:
        """Validate ``record`` and append it as one line (see the module docstring), its paths made
        portable (:func:`portable_paths`, relative to the store's folder)."""
        clean = _finite_or_none(portable_paths(record, self.path.parent))
        try:
            validate_record(clean)
        except RecordError as e:
            raise StoreError(f"refusing to store an invalid record ({record.get('cell_id', '?')}): {e}") from None
        line = (dump_record(clean) + "\n").encode("utf-8")
        what = f"the record of {record.get('cell_id', '?')}"
        with self._locked():
            created = not self.path.exists()
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
            except OSError as e:
                raise StoreError(self._unwritable(e, what)) from None
            try:
                size = os.fstat(fd).st_size
                if size and os.pread(fd, 1, size - 1) != b"\n":
                    line = b"\n" + line  # a torn or foreign last line stays whole; ours starts fresh
                try:
                    _write_all(fd, line)
                    os.fsync(fd)
                except OSError as e:
                    with contextlib.suppress(OSError):
                        os.ftruncate(fd, size)  # drop our partial line: the store is as before
                        os.fsync(fd)
                    raise StoreError(self._unwritable(e, what) + self._spool(clean)) from None
            finally:
                os.close(fd)
            if created:
                _fsync_dir(self.path.parent)

    # ------------------------------------------------------------------ the spool
    def spool_dirs(self) -> list[Path]:
        """Where a record that could not be appended is kept: beside the store, else in the temp folder
        (often another file system); the next run or ``mpcbench validate`` adds it (:meth:`recover`)."""
        key = hashlib.sha256(str(self.path.resolve()).encode()).hexdigest()[:16]
        return [self.path.with_name(self.path.name + ".spool"), Path(tempfile.gettempdir()) / "mpcbench-spool" / key]

    def _spool(self, record: dict[str, Any]) -> str:
        """Keep ``record`` in the first spool folder that takes it; the clause for the error line."""
        data = (dump_record(record) + "\n").encode("utf-8")
        for d in self.spool_dirs():
            try:
                private_dir(d)  # never a folder another user made in advance (shared temp space)
                path = d / f"{record.get('record_id', 'record')}.jsonl"
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
                try:
                    _write_all(fd, data)
                    os.fsync(fd)
                finally:
                    os.close(fd)
                return f"; the record is kept in {path}: the next run or `mpcbench validate` adds it to the store"
            except OSError:
                with contextlib.suppress(OSError, UnboundLocalError):
                    path.unlink()
                continue
        return "; it could not be kept anywhere (no spool folder is writable)"

    def recover(self) -> list[str]:
        """Append the spooled records (those not yet in the store) and remove their spool files; one
        line per record added. A spool file that still cannot be appended stays for the next time."""
        done: list[str] = []
        # only folders this user alone controls: records planted in a shared one are not added
        files = [f for d in self.spool_dirs() if not is_private_dir(d) for f in sorted(d.glob("*.jsonl"))]
        if not files:
            return done
        have = {r.get("record_id") for r in self.records()}
        for f in files:
            records, _ = read_jsonl(f)
            try:
                for r in records:
                    if r.get("record_id") not in have:
                        self.append(r)
                        have.add(r.get("record_id"))
                        done.append(f"recovered the record of {r.get('cell_id', '?')} from {f}")
                f.unlink()
            except StoreError:
                break  # still no room: keep the rest
        for d in self.spool_dirs():
            with contextlib.suppress(OSError):
                d.rmdir()
        return done

    def records(self) -> list[dict[str, Any]]:
        """Every valid record, oldest first (invalid lines are skipped; see :meth:`problems`)."""
        return read_jsonl(self.path)[0]

    def problems(self) -> list[str]:
        return read_jsonl(self.path)[1]

    def done_keys(self) -> set[str]:
        """Cell keys with at least one ``ok`` record: a rerun skips these."""
        return {r["cell_key"] for r in self.records() if r["status"] == "ok"}

    def __len__(self) -> int:
        return len(self.records())


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _fsync_dir(d: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(d, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
