"""The results store: an append-only JSON Lines file, one ``mpcbench.record/1`` per line.

``pandas.read_json(path, lines=True)`` reads it. Every append rewrites the whole file into
a temporary file in the same directory, fsyncs it and ``os.replace``s it over the store,
under an exclusive ``fcntl`` lock on ``<store>.lock``: a process killed at any instant
(SIGKILL included) leaves either the old or the new file, never a torn line, and two
runners appending at once never lose each other's records. The existing bytes are copied
verbatim, so a line this version cannot parse is kept for a human to look at, not dropped.

A rerun skips cells whose ``cell_key`` already has an ``ok`` record (:meth:`done_keys`);
failed and timed-out cells are retried, and the newest record of a key wins in reports.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator

from suite.results.records import RecordError, validate_record

__all__ = ["ResultsStore", "read_jsonl", "dump_record", "DEFAULT_STORE", "StoreError"]

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
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.lock_path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def append(self, record: dict[str, Any]) -> None:
        """Validate ``record`` and append it atomically (see the module docstring)."""
        clean = _finite_or_none(record)
        try:
            validate_record(clean)
        except RecordError as e:
            raise StoreError(f"refusing to store an invalid record ({record.get('cell_id', '?')}): {e}") from None
        line = (dump_record(clean) + "\n").encode("utf-8")
        with self._locked():
            old = self.path.read_bytes() if self.path.exists() else b""
            if old and not old.endswith(b"\n"):
                old += b"\n"  # a foreign writer left no newline: keep its line whole
            fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(old)
                    f.write(line)
                    f.flush()
                    os.fsync(f.fileno())
                if self.path.exists():
                    os.chmod(tmp, self.path.stat().st_mode & 0o777)
                else:
                    os.chmod(tmp, 0o644)
                os.replace(tmp, self.path)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
                raise
            _fsync_dir(self.path.parent)

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


def _fsync_dir(d: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(d, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
