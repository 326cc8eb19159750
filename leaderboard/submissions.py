"""Loading results for the leaderboard: committed submissions (``records/``) and plain stores.

Everything here treats files as hostile: they come from strangers' pull requests. A bad
file or record is skipped with a one-line :class:`Problem` (shown on the page and by
``mpcbench validate``) and everything else still loads. Nothing is ever executed or
constructed from a file: YAML goes through ``yaml.safe_load`` only (a ``!!python/...`` tag
is an error), JSON through ``json.loads``, every record through
:func:`suite.results.records.validate_record`, and sizes are capped before parsing.

The submission layout (documented in ``records/README.md`` and ``docs/leaderboard.md``)::

    records/
      <entry>/                 entry id: [A-Za-z0-9][A-Za-z0-9._-]{0,63}
        entry.yaml             ENTRY_FIELDS below
        <anything>.jsonl       one or more results files (mpcbench.record/1, one per line)
        <plugin>.py            the compressor plugin, if not a built-in

Public API (stable; ``mpcbench validate`` / ``mpcbench report`` call it):

    records, problems = load_entries("records")           # every entry folder
    records, problems = load_entry("records/my-entry")    # one entry folder
    records, problems = load_store("results/store.jsonl") # a plain results store
    records, problems = load_all(stores=[...], records_dirs=[...])

Each loaded record gets ``entry`` (the folder name, or ``"local"`` for a store),
``submitter`` and ``entry_info`` (the parsed entry.yaml) attached.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable

import yaml

from suite.results.records import RecordError, validate_record

__all__ = [
    "Problem",
    "EntryInfo",
    "ENTRY_FIELDS",
    "MAX_FILE_BYTES",
    "MAX_LINE_BYTES",
    "MAX_ENTRY_YAML_BYTES",
    "load_entries",
    "load_entry",
    "load_store",
    "load_all",
    "read_entry_info",
    "plugin_file_hash",
]

MAX_FILE_BYTES = 32 * 2**20  # a results file; a quick-tier record is a few kB
MAX_LINE_BYTES = 2 * 2**20  # one record (curves are at most a few hundred points)
MAX_ENTRY_YAML_BYTES = 64 * 2**10
MAX_FILES_PER_ENTRY = 200
MAX_ENTRIES = 5000
ENTRY_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
HASH = re.compile(r"^[0-9a-f]{16}$")

# field -> (required, description); the single source for validation and the docs
ENTRY_FIELDS: dict[str, tuple[bool, str]] = {
    "name": (True, "display name of the entry (one line, at most 100 characters)"),
    "submitter": (True, "who submits it: a GitHub handle or an organisation (at most 100 characters)"),
    "date": (True, "submission date, YYYY-MM-DD"),
    "description": (False, "what the compressor does, a paper or repository link (at most 2000 characters)"),
    "plugin": (False, "the plugin: a .py file inside the entry folder, or an importable module name; "
                      "omit for entries that use only built-in compressors"),  # fmt: skip
    "plugin_hash": (False, "required with a .py plugin: the first 16 hex digits of sha256 of the plugin "
                           "file's text (what compressors.registry.source_hash records for its compressors)"),  # fmt: skip
}


@dataclass(frozen=True)
class Problem:
    """A file or record that was skipped, and why (one line)."""

    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


@dataclass(frozen=True)
class EntryInfo:
    """The parsed ``entry.yaml`` of one submission (see :data:`ENTRY_FIELDS`)."""

    entry: str  # the folder name: the entry's id
    name: str
    submitter: str
    date: str
    description: str = ""
    plugin: str = ""
    plugin_hash: str = ""

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


class _Skip(Exception):
    """Internal: the current file or entry is skipped with this one-line reason."""


def _one_line(text: object, limit: int = 300) -> str:
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[: limit - 3] + "..."


def _read_capped(path: Path, cap: int) -> bytes:
    """The bytes of a regular file no larger than ``cap`` (symlinks, devices, huge files refused)."""
    if path.is_symlink():
        raise _Skip("symlinks are not allowed; commit the file itself")
    if not path.is_file():
        raise _Skip("not a regular file")
    size = path.stat().st_size
    if size > cap:
        raise _Skip(f"file is {size} bytes, over the {cap}-byte limit")
    with path.open("rb") as f:
        data = f.read(cap + 1)
    if len(data) > cap:  # grew while reading
        raise _Skip(f"file is over the {cap}-byte limit")
    return data


def plugin_file_hash(path: str | Path) -> str:
    """sha256 (first 16 hex) of a plugin file's text with newlines normalized to ``\\n``:
    the same value ``compressors.registry.source_hash`` records for a compressor defined in it."""
    text = Path(path).read_bytes().decode("utf-8")
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# --------------------------------------------------------------------------- entry.yaml
def _yaml_reason(e: yaml.YAMLError) -> str:
    """``could not determine a constructor for the tag '...' (line 1, column 7)``."""
    problem, mark = getattr(e, "problem", None), getattr(e, "problem_mark", None)
    if not problem:
        return _one_line(e)
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    return _one_line(f"{problem}{where}")


def read_entry_info(entry_dir: str | Path) -> EntryInfo:
    """Parse and check ``<entry_dir>/entry.yaml``; raise ``ValueError`` with a one-line reason."""
    entry_dir = Path(entry_dir)
    try:
        return _read_entry_info(entry_dir)
    except _Skip as e:
        raise ValueError(str(e)) from None


def _read_entry_info(entry_dir: Path) -> EntryInfo:
    if not ENTRY_ID.match(entry_dir.name):
        raise _Skip(
            f"entry folder name {entry_dir.name!r} is not a valid entry id: use letters, digits, '.', '_', '-' "
            "(at most 64, starting with a letter or digit)"
        )
    path = entry_dir / "entry.yaml"
    if not path.exists():
        raise _Skip("missing entry.yaml (fields: " + ", ".join(ENTRY_FIELDS) + ")")
    try:
        raw = _read_capped(path, MAX_ENTRY_YAML_BYTES)
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _Skip("entry.yaml is not UTF-8 text") from None
    except _Skip as e:
        raise _Skip(f"entry.yaml: {e}") from None
    try:
        data = yaml.safe_load(text)  # never yaml.load: tags like !!python/object must not construct
    except yaml.YAMLError as e:
        raise _Skip(f"entry.yaml is not valid (safe) YAML: {_yaml_reason(e)}") from None
    except RecursionError:
        raise _Skip("entry.yaml is nested too deeply") from None
    if not isinstance(data, dict):
        raise _Skip(f"entry.yaml must be a mapping of fields, got {type(data).__name__}")
    unknown = sorted(str(k) for k in data if k not in ENTRY_FIELDS)
    if unknown:
        raise _Skip(f"entry.yaml has unknown field(s) {unknown}; valid fields: {', '.join(ENTRY_FIELDS)}")
    fields: dict[str, str] = {}
    for key, (required, _) in ENTRY_FIELDS.items():
        v = data.get(key)
        if v is None:
            if required:
                raise _Skip(f"entry.yaml is missing required field {key!r}")
            continue
        if key == "date" and isinstance(v, (_dt.date, _dt.datetime)):
            v = v.isoformat()[:10]  # YAML reads an unquoted 2026-01-31 as a date
        if not isinstance(v, str):
            raise _Skip(f"entry.yaml field {key!r} must be a string, got {type(v).__name__}")
        limit = 2000 if key == "description" else 100 if key in ("name", "submitter") else 200
        if len(v) > limit:
            raise _Skip(f"entry.yaml field {key!r} is longer than {limit} characters")
        if key != "description" and ("\n" in v or not v.strip()):
            raise _Skip(f"entry.yaml field {key!r} must be one non-empty line")
        fields[key] = v.strip() if key != "description" else v
    try:
        _dt.date.fromisoformat(fields["date"])
    except ValueError:
        raise _Skip(f"entry.yaml field 'date' must be YYYY-MM-DD, got {fields['date']!r}") from None
    info = EntryInfo(entry=entry_dir.name, **fields)
    _check_plugin(entry_dir, info)
    return info


def _check_plugin(entry_dir: Path, info: EntryInfo) -> None:
    """A ``.py`` plugin must sit inside the entry folder and match ``plugin_hash``."""
    if info.plugin_hash and not HASH.match(info.plugin_hash):
        raise _Skip(f"entry.yaml field 'plugin_hash' must be 16 lowercase hex digits, got {info.plugin_hash!r}")
    if not info.plugin.endswith(".py"):
        if info.plugin and not re.match(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$", info.plugin):
            raise _Skip(f"entry.yaml field 'plugin' must be a .py file or a module name, got {info.plugin!r}")
        return
    root = entry_dir.resolve()
    path = (entry_dir / info.plugin).resolve()
    if root not in path.parents:
        raise _Skip(f"plugin file {info.plugin!r} must be inside the entry folder")
    if not path.is_file() or (entry_dir / info.plugin).is_symlink():
        raise _Skip(f"plugin file {info.plugin!r} does not exist (or is not a regular file)")
    if not info.plugin_hash:
        raise _Skip("entry.yaml needs 'plugin_hash' for a .py plugin")
    try:
        actual = plugin_file_hash(path)
    except UnicodeDecodeError:
        raise _Skip(f"plugin file {info.plugin!r} is not UTF-8 text") from None
    if actual != info.plugin_hash:
        raise _Skip(
            f"plugin_hash {info.plugin_hash} does not match {info.plugin} (its hash is {actual}); "
            "results must come from the committed plugin code"
        )


# --------------------------------------------------------------------------- results files
def _load_jsonl(
    path: Path,
    attach: dict[str, Any],
    problems: list[Problem],
    seen: dict[str, str],
    label: str,
    known: frozenset[str] = frozenset(),
    plugin_hash: str = "",
) -> list[dict[str, Any]]:
    """Valid records of one JSON Lines file; every bad line becomes a Problem.

    ``seen``: record ids loaded so far (a repeat is a problem); ``known``: ids already
    loaded from elsewhere that are dropped silently (a local store's copy of committed records).
    ``plugin_hash``: the entry's plugin file hash; a record whose run loaded plugin files
    (``provenance.plugin_hashes["plugin:<path>"]``) must have loaded this one.
    """
    try:
        data = _read_capped(path, MAX_FILE_BYTES)
    except _Skip as e:
        problems.append(Problem(label, str(e)))
        return []
    except OSError as e:
        problems.append(Problem(label, f"cannot read: {_one_line(e)}"))
        return []
    out = []
    for lineno, line in enumerate(data.split(b"\n"), 1):
        if not line.strip():
            continue
        where = f"{label}:{lineno}"
        if len(line) > MAX_LINE_BYTES:
            problems.append(Problem(where, f"record is {len(line)} bytes, over the {MAX_LINE_BYTES}-byte limit"))
            continue
        try:
            rec = json.loads(line.decode("utf-8"))
            validate_record(rec)
        except UnicodeDecodeError:
            problems.append(Problem(where, "not UTF-8 text"))
            continue
        except json.JSONDecodeError as e:
            problems.append(Problem(where, f"invalid JSON: {e.msg} (column {e.colno})"))
            continue
        except RecordError as e:
            problems.append(Problem(where, f"invalid record: {_one_line(e)}"))
            continue
        except (ValueError, RecursionError) as e:  # e.g. a 10,000-digit integer, nesting bombs
            problems.append(Problem(where, f"invalid JSON: {_one_line(e) or type(e).__name__}"))
            continue
        loaded = {k: v for k, v in rec["provenance"].get("plugin_hashes", {}).items() if k.startswith("plugin:")}
        if plugin_hash and loaded and plugin_hash not in loaded.values():
            problems.append(
                Problem(where, f"record was run with other plugin code ({', '.join(f'{k}={v}' for k, v in loaded.items())}); "
                               f"entry.yaml says plugin_hash {plugin_hash}")
            )  # fmt: skip
            continue
        rid = rec["record_id"]
        if rid in known:
            continue
        if rid in seen:
            problems.append(Problem(where, f"duplicate record_id {rid!r} (first seen in {seen[rid]})"))
            continue
        seen[rid] = where
        rec.update(attach)  # the folder is authoritative, not what the record claims
        out.append(rec)
    return out


def load_store(
    path: str | Path,
    *,
    entry: str = "local",
    submitter: str = "local",
    skip_ids: Iterable[str] = (),
) -> tuple[list[dict[str, Any]], list[Problem]]:
    """Records of a plain results store (JSON Lines, e.g. ``results/store.jsonl``).

    Returns ``(records, problems)``; bad lines are skipped with a reason, a missing or
    oversized file is one problem. Records get ``entry`` / ``submitter`` attached.
    Records whose ``record_id`` is in ``skip_ids`` are dropped silently (already loaded
    from a committed entry); a record id repeated inside the store is a problem.
    """
    path = Path(path)
    problems: list[Problem] = []
    if not path.exists():
        return [], [Problem(str(path), "no such results file")]
    attach = {"entry": entry, "submitter": submitter, "entry_info": {"entry": entry, "name": entry}}
    records = _load_jsonl(path, attach, problems, {}, str(path), frozenset(skip_ids))
    return records, problems


def load_entry(
    entry_dir: str | Path, *, _seen: dict[str, str] | None = None
) -> tuple[list[dict[str, Any]], list[Problem]]:
    """Records of one submission folder ``records/<entry>/`` (what ``mpcbench validate`` checks).

    The entry is skipped as a whole (one problem) when ``entry.yaml`` is missing or invalid
    or the plugin does not match its hash; otherwise each ``*.jsonl`` file is loaded and
    each bad line is skipped with a reason.
    """
    entry_dir = Path(entry_dir)
    seen = {} if _seen is None else _seen
    label = str(entry_dir)
    if entry_dir.is_symlink() or not entry_dir.is_dir():
        return [], [Problem(label, "an entry must be a folder (not a symlink) holding entry.yaml and *.jsonl files")]
    try:
        info = _read_entry_info(entry_dir)
    except _Skip as e:
        return [], [Problem(label, f"entry skipped: {e}")]
    except OSError as e:
        return [], [Problem(label, f"entry skipped: cannot read: {_one_line(e)}")]
    files = sorted(p for p in entry_dir.iterdir() if p.suffix == ".jsonl")
    if not files:
        return [], [Problem(label, "entry has no *.jsonl results file")]
    problems: list[Problem] = []
    if len(files) > MAX_FILES_PER_ENTRY:
        problems.append(Problem(label, f"more than {MAX_FILES_PER_ENTRY} results files; only the first are read"))
        files = files[:MAX_FILES_PER_ENTRY]
    attach = {"entry": info.entry, "submitter": info.submitter, "entry_info": info.to_dict()}
    records: list[dict[str, Any]] = []
    for f in files:
        records += _load_jsonl(f, attach, problems, seen, str(f), plugin_hash=info.plugin_hash if info.plugin.endswith(".py") else "")
    return records, problems


def load_entries(
    records_dir: str | Path, *, _seen: dict[str, str] | None = None
) -> tuple[list[dict[str, Any]], list[Problem]]:
    """Records of every entry folder under ``records_dir`` (e.g. the committed ``records/``).

    Returns ``(records, problems)``. A missing ``records_dir`` gives no records and no
    problems (an empty leaderboard); loose files next to the entry folders (README.md) and
    hidden folders are ignored. A ``record_id`` seen twice is kept only the first time.
    """
    root = Path(records_dir)
    if not root.exists():
        return [], []
    if not root.is_dir():
        return [], [Problem(str(root), "records path is not a folder")]
    records: list[dict[str, Any]] = []
    problems: list[Problem] = []
    seen = {} if _seen is None else _seen
    dirs = sorted(p for p in root.iterdir() if not p.name.startswith(".") and (p.is_dir() or p.is_symlink()))
    if len(dirs) > MAX_ENTRIES:
        problems.append(Problem(str(root), f"more than {MAX_ENTRIES} entries; only the first are read"))
        dirs = dirs[:MAX_ENTRIES]
    for d in dirs:
        recs, probs = load_entry(d, _seen=seen)
        records += recs
        problems += probs
    return records, problems


def load_all(
    stores: Iterable[str | Path] = (), records_dirs: Iterable[str | Path] = ()
) -> tuple[list[dict[str, Any]], list[Problem]]:
    """Records of records folders and plain stores together.

    Committed entries load first; a store's copy of a record already loaded from an entry is
    dropped silently (the lead commits baselines from the local store). With more than one
    store, each store's entry is ``local:<file stem>`` so they stay apart.
    """
    stores, records_dirs = list(stores), list(records_dirs)
    records: list[dict[str, Any]] = []
    problems: list[Problem] = []
    seen: dict[str, str] = {}
    for d in records_dirs:  # committed entries first: they carry the attribution
        recs, probs = load_entries(d, _seen=seen)
        records += recs
        problems += probs
    for s in stores:
        entry = "local" if len(stores) == 1 else f"local:{Path(s).stem}"
        recs, probs = load_store(s, entry=entry, skip_ids={r["record_id"] for r in records})
        records += recs
        problems += probs
    return records, problems
