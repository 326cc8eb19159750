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

Each loaded record gets, attached by the loader (what the record itself claims is overwritten):

- ``entry``: the folder the record was loaded from (``"local"`` for a store): a record
  belongs to the entry folder it is in, whatever entry it names;
- ``submitter`` and ``entry_info`` (the parsed entry.yaml, plus its ``verification``:
  ``verified`` / ``not verified`` / ``failed``, from ``<entry>/verification.json``);
- ``is_maintainer``: True only for the maintainers' own entries (:data:`MAINTAINER_ENTRIES`),
  the only baselines another entry may be compared with;
- ``bytes_per_step``: recomputed from ``bytes`` and ``run.steps`` (a record whose claim differs
  is rejected by ``validate_record``).

Cost is bounded per entry, not only per file: at most :data:`MAX_ENTRY_BYTES` read,
:data:`MAX_ENTRY_LINES` lines and :data:`MAX_PROBLEMS_PER_ENTRY` problems (then the entry stops
with one line saying so), so a file of junk lines costs little. Record ids are scoped per
entry: a ``record_id`` repeated inside an entry is a problem; one that also appears in another
entry never hides that entry's record (see :func:`load_entries`). An entry whose loading raises
anything at all is skipped with one line; the other entries load.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import re
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable

import yaml

from leaderboard.safe_text import skeleton
from leaderboard.times_file import TIMES_FILE
from suite.results.entries import latest_flags, record_digest, row_id, row_keys
from suite.results.maintainers import MAINTAINER_ENTRIES as _MAINTAINER_LIST
from suite.results.record_json import load_record
from suite.results.records import RecordError, derived_bytes_per_step
from suite.results.signing_key import MANIFEST, SIGNATURE, fingerprint, parse_key

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
    "MAINTAINER_ENTRIES",
    "VERIFICATION_FILE",
    "RERUNS_FILE",
    "verification_status",
    "read_verification",
    "row_verification",
    "Verification",
    "entry_file_hashes",
    "lookalike_of_maintainers",
    "copies_to_drop",
]

MAX_FILE_BYTES = 32 * 2**20  # a results file; a quick-tier record is a few kB
MAX_LINE_BYTES = 2 * 2**20  # one record (curves are at most a few hundred points)
MAX_ENTRY_YAML_BYTES = 64 * 2**10
MAX_FILES_PER_ENTRY = 200
MAX_ENTRIES = 5000
MAX_ENTRY_BYTES = 64 * 2**20  # all results files of one entry together
MAX_ENTRY_LINES = 100_000  # non-blank lines of one entry (a quick-tier record is ~20 kB: 46 lines per MiB)
MAX_BLANK_LINES = 1_000  # blank lines of one entry (a results file has none)
MAX_PROBLEMS_PER_ENTRY = 20  # then the entry stops: a file of junk lines is cheap to reject
MAX_PLUGIN_BYTES = 2**20  # a plugin file; the hash reads at most this much
MAX_YAML_EVENTS = 2_000  # parser events in entry.yaml (six short fields need ~20)
# Entries the maintainers ran themselves: the only baselines other entries are compared with
# (besides their own). The one list (suite/results/maintainers.py) also keys them and must
# match CODEOWNERS; a code change, so a pull request cannot add itself here unseen.
MAINTAINER_ENTRIES = _MAINTAINER_LIST
VERIFICATION_FILE = "verification.json"  # written by `mpcbench verify`, never by a submitter
# an entry's signed state (suite/bench/verify/manifest.py): binds the other files, so it is not one of them
MANIFEST_FILES = (MANIFEST, SIGNATURE)
RERUNS_FILE = "verification.reruns"  # the re-runs' timing (JSON lines), bound by verification.json's hash
VERIFICATION_SCHEMA = "mpcbench.verification/3"
MAX_VERIFICATION_BYTES = 4 * 2**20  # the report: ~1 kB per re-run cell
MAX_RERUNS_BYTES = 32 * 2**20  # the re-runs' timing inputs: ~200 kB per cell
ENTRY_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
HASH = re.compile(r"^[0-9a-f]{16}$")

# field -> (required, description); the single source for validation and the docs
ENTRY_FIELDS: dict[str, tuple[bool, str]] = {
    "name": (True, "display name of the entry (one line, at most 100 characters)"),
    "submitter": (True, "who submits it: a GitHub handle or an organisation (at most 100 characters)"),
    "date": (True, "submission date, YYYY-MM-DD"),
    "description": (False, "what the compressor does, a paper or repository link (at most 2000 characters)"),
    "plugin": (
        False,
        "the plugin: a .py file inside the entry folder, or an importable module name; "
        "omit for entries that use only built-in compressors",
    ),
    "plugin_hash": (
        False,
        "required with a .py plugin: the first 16 hex digits of sha256 of the plugin "
        "file's text (what compressors.registry.source_hash records for its compressors)",
    ),
    "key": (
        False,
        "the entry's identity: an ssh-ed25519 public key line; once it is on the base branch, every later "
        "commit that touches the entry's folder must be signed with it (git ssh signing)",
    ),
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
    key: str = ""  # canonical "ssh-ed25519 <base64>" (suite.results.signing_key), "" when none

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
    the same value ``compressors.registry.source_hash`` records for a compressor defined in it.
    Files over :data:`MAX_PLUGIN_BYTES` are refused before reading (``ValueError``)."""
    try:
        return _plugin_hash(Path(path))
    except _Skip as e:
        raise ValueError(f"{path}: {e}") from None


def _plugin_hash(path: Path) -> str:
    text = _read_capped(path, MAX_PLUGIN_BYTES).decode("utf-8")
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


class _EntryLoader(yaml.SafeLoader):
    """``safe_load`` that keeps scalars as text: no timestamp or number conversion, so a date like
    2026-13-45 or a 5000-digit integer reaches the field checks as a string and is named there."""


_EntryLoader.yaml_implicit_resolvers = {
    ch: [(tag, rx) for tag, rx in resolvers if tag.rsplit(":", 1)[-1] not in ("timestamp", "int", "float")]
    for ch, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _check_yaml_events(text: str) -> None:
    """Refuse anchors and aliases (``&a`` / ``*a``, and with them ``<<`` merge bombs that grow 10x per
    level) and more than :data:`MAX_YAML_EVENTS` parser events, before anything is constructed:
    the parse is linear in the text, so this bounds the cost of ``safe_load``."""
    for n, event in enumerate(yaml.parse(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))):
        if n > MAX_YAML_EVENTS:
            raise _Skip(f"entry.yaml has more than {MAX_YAML_EVENTS} YAML nodes; it needs six short fields")
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            raise _Skip("entry.yaml must not use YAML anchors or aliases (& / *); write each value out")


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
        _check_yaml_events(text)
        data = yaml.load(text, Loader=_EntryLoader)  # a SafeLoader: tags like !!python/object must not construct
    except yaml.YAMLError as e:
        raise _Skip(f"entry.yaml is not valid (safe) YAML: {_yaml_reason(e)}") from None
    except RecursionError:
        raise _Skip("entry.yaml is nested too deeply") from None
    except ValueError as e:  # a date like 2026-13-45, an integer of 5000 digits
        raise _Skip(f"entry.yaml has a value YAML cannot read: {_one_line(e)}") from None
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
        date = _dt.date.fromisoformat(fields["date"])
    except ValueError:
        raise _Skip(f"entry.yaml field 'date' must be YYYY-MM-DD (a real date), got {fields['date']!r}") from None
    today = _dt.datetime.now(_dt.timezone.utc).date()
    if not _dt.date(2020, 1, 1) <= date <= today + _dt.timedelta(days=1):
        raise _Skip(f"entry.yaml field 'date' {fields['date']} is before 2020 or in the future (today is {today})")
    if "key" in fields:
        try:
            fields["key"] = parse_key(fields["key"])
        except ValueError as e:
            raise _Skip(f"entry.yaml field 'key' {e}") from None
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
        actual = _plugin_hash(entry_dir / info.plugin)
    except UnicodeDecodeError:
        raise _Skip(f"plugin file {info.plugin!r} is not UTF-8 text") from None
    except _Skip as e:
        raise _Skip(f"plugin file {info.plugin!r}: {e}") from None
    if actual != info.plugin_hash:
        raise _Skip(
            f"plugin_hash {info.plugin_hash} does not match {info.plugin} (its hash is {actual}); "
            "results must come from the committed plugin code"
        )


# --------------------------------------------------------------------------- look-alike names
# the names the maintainers' entries and the project go by (an entry may not look like any of them)
_MAINTAINER_LOOKS = ("mpcbench-baselines", "mpcbench-maintainers", "mpcbench built-in compressors", "mpcbench team")
_MAINTAINER_WORDS = ("baseline", "maintainer", "built-in", "official", "team", "project", "admin")


def lookalike_of_maintainers(info: EntryInfo) -> str:
    """One line when an entry's id, name or submitter looks like the maintainers' entry or the project's
    name by the confusables skeleton (:func:`leaderboard.safe_text.skeleton`, UTS #39) ("" if not)."""
    looks = {skeleton(m) for m in (*MAINTAINER_ENTRIES, *_MAINTAINER_LOOKS)}
    mark = skeleton("mpcbench")
    for what, text in (("entry id", info.entry), ("name", info.name), ("submitter", info.submitter)):
        sk = skeleton(text)
        if sk in looks or (mark in sk and any(skeleton(w) in sk for w in _MAINTAINER_WORDS)):
            return (
                f"the {what} {_one_line(text, 80)!r} looks like the maintainers' entry, but this entry is not theirs "
                f"(only {', '.join(sorted(MAINTAINER_ENTRIES))} is)"
            )
    return ""


def _flag_lookalike_entries(records: list[dict[str, Any]], problems: list[Problem]) -> None:
    """Flag (on the page and as a problem line; nothing is dropped) each entry whose id or name has the same
    confusables skeleton as another entry's: ``paper-x`` beside ``pаper-x`` with a Cyrillic a."""
    infos: dict[str, dict[str, Any]] = {}
    for r in records:
        if isinstance(r.get("entry_info"), dict):
            infos.setdefault(str(r.get("entry")), r["entry_info"])
    by_look: dict[str, set[str]] = {}
    for entry, info in infos.items():
        for text in {entry, str(info.get("name") or "")}:
            if sk := skeleton(text):
                by_look.setdefault(sk, set()).add(entry)
    for same in by_look.values():
        if len(same) < 2:
            continue
        for entry in sorted(same):
            if entry in MAINTAINER_ENTRIES or infos[entry].get("lookalike"):
                continue
            others = ", ".join(sorted(same - {entry}))[:200]
            line = f"the entry {_one_line(entry, 80)!r} looks like another entry ({others}): check which one you mean"
            infos[entry]["lookalike"] = line
            problems.append(Problem(entry, f"flagged, not skipped: {line}"))


# --------------------------------------------------------------------------- results files
class _Budget:
    """What one entry (or store) may still cost: bytes read, lines parsed, problems reported."""

    def __init__(self, label: str, problems: list[Problem]) -> None:
        self.label, self.problems = label, problems
        self.bytes, self.lines, self.n_problems = MAX_ENTRY_BYTES, MAX_ENTRY_LINES, 0
        self.blank = MAX_BLANK_LINES
        self.stopped = False

    def problem(self, where: str, reason: str) -> None:
        self.n_problems += 1
        if self.n_problems <= MAX_PROBLEMS_PER_ENTRY:
            self.problems.append(Problem(where, reason))
        else:
            self.stop(
                f"more than {MAX_PROBLEMS_PER_ENTRY} bad lines or files: stopped reading here; "
                "fix the ones listed (mpcbench validate <entry>) and the rest is read again"
            )

    def stop(self, reason: str) -> None:
        if not self.stopped:
            self.stopped = True
            self.problems.append(Problem(self.label, reason))


def _lines(path: Path, budget: _Budget):
    """(line number, bytes) of the non-blank lines of a results file, within the budget.

    Read line by line (a 32 MiB file of 1-byte lines is never split into 16 million objects at once)."""
    if path.is_symlink():
        raise _Skip("symlinks are not allowed; commit the file itself")
    if not path.is_file():
        raise _Skip("not a regular file")
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise _Skip(f"file is {size} bytes, over the {MAX_FILE_BYTES}-byte limit")
    if size > budget.bytes:
        budget.stop(f"the entry's results files are over {MAX_ENTRY_BYTES} bytes together; the rest is not read")
        return
    with path.open("rb") as f:
        lineno = 0
        while not budget.stopped:
            line = f.readline(MAX_LINE_BYTES + 1)
            if not line:
                return
            budget.bytes -= len(line)
            if budget.bytes < 0:
                budget.stop(
                    f"the entry's results files are over {MAX_ENTRY_BYTES} bytes together; the rest is not read"
                )
                return
            lineno += 1
            if len(line) > MAX_LINE_BYTES:
                while line and not line.endswith(b"\n"):  # skip the rest of the over-long line
                    line = f.readline(MAX_LINE_BYTES + 1)
                    budget.bytes -= len(line)
                yield lineno, None
                continue
            if not line.strip():
                budget.blank -= 1
                if budget.blank < 0:  # 64 MiB of newlines cost seconds to read one by one
                    budget.stop(f"the entry has more than {MAX_BLANK_LINES} blank lines; the rest is not read")
                    return
                continue
            budget.lines -= 1
            if budget.lines < 0:
                budget.stop(f"the entry has more than {MAX_ENTRY_LINES} lines; the rest is not read")
                return
            yield lineno, line


def _parse_record(line: bytes) -> dict[str, Any]:
    """One validated record; raises ``_Skip`` with the one-line reason."""
    try:
        rec = load_record(line)  # validate_record(json.loads(...)), with orjson where installed
    except UnicodeDecodeError:
        raise _Skip("not UTF-8 text") from None
    except json.JSONDecodeError as e:
        raise _Skip(f"invalid JSON: {e.msg} (column {e.colno})") from None
    except RecordError as e:
        raise _Skip(f"invalid record: {_one_line(e)}") from None
    except (ValueError, RecursionError) as e:  # e.g. a 10,000-digit integer, nesting bombs
        raise _Skip(f"invalid JSON: {_one_line(e) or type(e).__name__}") from None
    rec["bytes_per_step"] = derived_bytes_per_step(rec) if rec["status"] == "ok" else rec.get("bytes_per_step")
    return rec


def _load_jsonl(
    path: Path,
    attach: dict[str, Any],
    budget: _Budget,
    seen: dict[str, str],
    label: str,
    known: frozenset[str] = frozenset(),
    plugin_hash: str = "",
    key_fingerprint: str = "",
) -> list[dict[str, Any]]:
    """Valid records of one JSON Lines file; every bad line becomes a Problem (within ``budget``).

    ``seen``: record ids loaded so far in this entry (a repeat is a problem); ``known``: ids
    already loaded from elsewhere that are dropped silently (a local store's copy of committed
    records). ``plugin_hash``: the entry's plugin file hash; a record whose run loaded plugin
    files (``provenance.plugin_hashes["plugin:<path>"]``) must have loaded this one.
    ``key_fingerprint``: of the key entry.yaml names; every record must have been made for this key
    (``provenance.signing_key``, ``MPCBENCH_SIGNING_KEY``): none made for another, none unstamped.
    """
    out: list[dict[str, Any]] = []
    try:
        for lineno, line in _lines(path, budget):
            where = f"{label}:{lineno}"
            if line is None:
                budget.problem(where, f"record is over the {MAX_LINE_BYTES}-byte limit")
                continue
            try:
                rec = _parse_record(line)
            except _Skip as e:
                budget.problem(where, str(e))
                continue
            loaded = {k: v for k, v in rec["provenance"].get("plugin_hashes", {}).items() if k.startswith("plugin:")}
            if plugin_hash and loaded and plugin_hash not in loaded.values():
                budget.problem(
                    where,
                    f"record was run with other plugin code ({', '.join(f'{k}={v}' for k, v in loaded.items())}); "
                    f"entry.yaml says plugin_hash {plugin_hash}",
                )
                continue
            made_for = rec["provenance"].get("signing_key")
            if key_fingerprint and not made_for:  # a copy of an unkeyed run's record would load anywhere
                budget.problem(
                    where,
                    f"record carries no key stamp; entry.yaml names {key_fingerprint}: a keyed entry's records are run "
                    "with MPCBENCH_SIGNING_KEY set to its key",
                )
                continue
            if key_fingerprint and made_for and made_for != key_fingerprint:
                budget.problem(
                    where,
                    f"record was made for key {_one_line(made_for, 80)}, entry.yaml names {key_fingerprint}: records "
                    "keep the key they were run for (re-run the cells with MPCBENCH_SIGNING_KEY set to this entry's key)",
                )
                continue
            rid = rec["record_id"]
            if rid in known:
                continue
            if rid in seen:
                budget.problem(where, f"duplicate record_id {rid!r} (first seen in {seen[rid]})")
                continue
            seen[rid] = where
            rec.update(attach)  # the folder is authoritative, not what the record claims
            rec["record_sha256"] = record_digest(line)  # what a verification binds (its stored line)
            out.append(rec)
    except _Skip as e:
        budget.problem(label, str(e))
    except OSError as e:
        budget.problem(label, f"cannot read: {_one_line(e)}")
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
    oversized file is one problem. Records get ``entry`` / ``submitter`` attached (and
    ``is_maintainer`` False). Records whose ``record_id`` is in ``skip_ids`` are dropped
    silently (already loaded from a committed entry); a record id repeated inside the store
    is a problem.
    """
    path = Path(path)
    problems: list[Problem] = []
    if not path.exists():
        return [], [Problem(str(path), "no such results file")]
    attach = {
        "entry": entry,
        "submitter": submitter,
        "is_maintainer": False,
        "entry_info": {"entry": entry, "name": entry, "verification": "not verified"},
    }
    try:
        records = _load_jsonl(path, attach, _Budget(str(path), problems), {}, str(path), frozenset(skip_ids))
    except Exception as e:  # noqa: BLE001 - whatever a hostile file triggers, it is one line
        return [], [Problem(str(path), f"store skipped: {type(e).__name__}: {_one_line(e)}")]
    return records, problems


def entry_file_hashes(entry_dir: str | Path) -> dict[str, str]:
    """sha256 of every file of an entry folder except the verification's own two files, the signed
    manifest's (which binds these) and the derived ``times.json``: what a verification binds (an added, removed or changed file of any
    kind unbinds it) and what a manifest's digest covers."""
    entry_dir = Path(entry_dir)
    out: dict[str, str] = {}
    for p in sorted(entry_dir.iterdir()):
        # times.json is derived (leaderboard.times_file): read for a maintainers' entry only while it equals
        # the time model's recomputation (a test holds every stored time to it), so it binds nothing
        if p.name in (VERIFICATION_FILE, RERUNS_FILE, *MANIFEST_FILES, TIMES_FILE):
            continue
        if len(out) >= MAX_FILES_PER_ENTRY + 10:
            out["(more files)"] = "too many files to bind"
            break
        if p.is_symlink() or not p.is_file():
            out[p.name] = "not a regular file"
            continue
        h = hashlib.sha256()
        with p.open("rb") as f:
            for chunk in iter(lambda: f.read(2**20), b""):
                h.update(chunk)
        out[p.name] = h.hexdigest()
    return out


@dataclass
class Verification:
    """An entry's ``verification.json`` as far as it holds (:func:`read_verification`): per row id
    the verdict (``status``, the ``records`` it compared by sha256, the ``reruns``), and the re-runs'
    times and machine by record id."""

    status: str = "not verified"  # of the report as a whole: verified / partly verified / failed / not verified
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)
    reruns: dict[str, dict[str, Any]] = field(default_factory=dict)


def read_verification(entry_dir: str | Path) -> Verification:
    """The verdicts of ``<entry>/verification.json`` that still hold, or none.

    It counts only when it is a report of ``mpcbench verify`` (schema ``mpcbench.verification/3``, a
    seed, rows whose status follows from their cells: verified = every comparison of the row agreed
    and at least one cell of it re-ran), the entry's files other than records (entry.yaml, the
    plugin) are the ones it bound, and ``verification.reruns`` is the file it hashed. Records are bound
    per row (:func:`row_verification`). That the report came from the maintainers' check and was not
    typed in is enforced where the board is hosted (CODEOWNERS; the CI check re-runs it with its seed)."""
    entry_dir = Path(entry_dir)
    path = entry_dir / VERIFICATION_FILE
    none = Verification()
    if not path.exists():
        return none
    try:
        data = json.loads(_read_capped(path, MAX_VERIFICATION_BYTES))
        status, files, cells, seed, rows = data["status"], data["files"], data["cells"], data["seed"], data["rows"]
        if data.get("schema") != VERIFICATION_SCHEMA or not isinstance(status, str):
            return none
        if not isinstance(files, dict) or not isinstance(cells, list) or not isinstance(rows, list):
            return none
        if not isinstance(seed, int) or isinstance(seed, bool):
            return none
        bound = {k: v for k, v in entry_file_hashes(entry_dir).items() if not k.endswith(".jsonl")}
        if bound != files:
            return none  # entry.yaml or the plugin changed after verification (or a file was added)
        by_row: dict[str, list[dict[str, Any]]] = {}
        for c in cells:
            if isinstance(c, dict) and isinstance(c.get("row_id"), str):
                by_row.setdefault(c["row_id"], []).append(c)
        verdicts: dict[str, dict[str, Any]] = {}
        for r in rows:
            rid, st, recs, reruns = r["row_id"], r["status"], r["records"], r["reruns"]
            if not (isinstance(rid, str) and isinstance(recs, dict) and isinstance(reruns, list)):
                return none
            cs = by_row.get(rid, [])
            agreed = bool(cs) and all(c.get("status") in ("match", "within spread") for c in cs)
            rerun_ok = {
                c.get("record_id")
                for c in cs
                if c.get("kind") == "re-run" and c.get("status") in ("match", "within spread")
            }
            compared = {c.get("record_id") for c in cs}
            if st == "verified" and not (agreed and rerun_ok and set(reruns) == rerun_ok and set(recs) <= compared):
                return none  # a verdict that does not follow from its cells was not written by verify
            bad = [c for c in cs if c.get("status") in ("mismatch", "rerun failed")]
            reason = _one_line(f"{bad[0].get('status')}: {bad[0].get('detail')}", 200) if bad else ""
            verdicts[rid] = {"status": st, "records": recs, "reruns": reruns, "reason": reason}
        reruns_by_id: dict[str, dict[str, Any]] = {}
        rpath = entry_dir / RERUNS_FILE
        raw = _read_capped(rpath, MAX_RERUNS_BYTES) if rpath.exists() else b""
        if hashlib.sha256(raw).hexdigest() != data.get("reruns_sha256"):
            return none
        for line in raw.splitlines():
            r = json.loads(line)
            if isinstance(r, dict) and isinstance(r.get("record_id"), str):
                reruns_by_id[r["record_id"]] = r
        for v in verdicts.values():
            if v["status"] == "verified" and not all(x in reruns_by_id for x in v["reruns"]):
                v["status"] = "not verified"
        return Verification(status, verdicts, reruns_by_id)
    except Exception:  # noqa: BLE001 - a broken or forged file verifies nothing
        return none


# a re-run's measured times, kept in the verification file as a cross-check of the record's raw times
# (the board's times never come from them: the time model prices every row from its own bytes)
RERUN_FIELDS = ("time", "wall_s", "modeled", "model_version", "timing_inputs")
NOT_RERUN = "not verified"


def row_verification(records: list[dict[str, Any]], verification: Verification) -> None:
    """Mark each record with its row's verdict, in place (``verification``, ``verified_cells``).

    A row (:mod:`suite.results.entries`) is **verified** only while the report verified it and its
    latest ``ok`` records are exactly the ones the report compared, with the same contents. Then every
    record of the row gets the machine, load and plugin hash the verifier read as ``rerun_provenance``
    (the board's ``verified_on``). Its times stay its own: the re-run checks the record, it does not
    replace it, and the time model (:mod:`suite.results.time_model`) prices every row, verified or
    not, from its counted bytes and the calibration, so a re-verification moves no time and no
    score. Its ``provenance`` stays as recorded:
    the row's key is the machine class the record was made on, so a row verified on another machine
    class is neither merged with that class's rows nor lets one seed supersede another there.
    Any other row reads "not verified" (records added or changed since, or never re-run), or "failed"
    with the first failed comparison's reason as its note (such a row never ranks: :mod:`leaderboard.rules`)."""
    keys = row_keys(records)
    latest = latest_flags(records, keys)
    members: dict[str, list[int]] = {}
    ids = [row_id(k) for k in keys]
    for i, (rid, last) in enumerate(zip(ids, latest)):
        members.setdefault(rid, [])
        if last and records[i].get("status") == "ok":
            members[rid].append(i)
    for rid, idx in members.items():
        verdict = verification.rows.get(rid)
        bound = {records[i]["record_id"]: records[i].get("record_sha256") for i in idx}
        status, note = NOT_RERUN, "not re-run"
        if verdict is not None:
            if verdict["records"] != bound:
                status, note = NOT_RERUN, "records changed since its verification"
            elif verdict["status"] == "failed":  # never ranked (leaderboard.rules): listed apart with the reason
                status, note = "failed", verdict.get("reason") or "a comparison of the row failed"
            elif verdict["status"] == "verified":
                status = verdict["status"]
                seeds = sorted(int(records[i]["seed"]) for i in idx if records[i]["record_id"] in verdict["reruns"])
                note = f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))} re-run, {len(idx)} compared"
            else:
                status, note = NOT_RERUN, "the re-run could not be made"
        first = verification.reruns.get(sorted(verdict["reruns"])[0]) if status == "verified" and verdict else None
        for i, k in enumerate(ids):
            if k != rid:
                continue
            r = records[i]
            r["verification"], r["verified_cells"] = status, note
            if status == "verified" and first is not None:
                rerun = verification.reruns.get(r["record_id"], first)
                # the machine, load and plugin hash of the re-run, apart from the record's own provenance,
                # which keeps the machine class the record was made on (the row's key)
                seen = rerun.get("verifier") or {}
                machine = dict(seen.get("machine") or {})
                load = seen.get("load_per_core") or []
                cores = machine.get("cpu_affinity") or machine.get("cpu_count") or 1
                r["rerun_provenance"] = {
                    "machine": machine,
                    "load": {"load_avg": [max(load) * cores] * 3} if load else {},
                    "plugin_hashes": {"plugin": rerun.get("plugin_hash")} if rerun.get("plugin_hash") else {},
                }
                r["verified_under_load"] = bool(seen.get("contended"))


def verification_status(entry_dir: str | Path) -> str:
    """The report's overall status (``verified`` / ``partly verified`` / ``failed`` / ``not verified``);
    the board marks rows, not entries (:func:`row_verification`)."""
    return read_verification(entry_dir).status


def load_entry(
    entry_dir: str | Path,
    *,
    _seen: dict[str, str] | None = None,
    maintainers: Iterable[str] = MAINTAINER_ENTRIES,
    as_recorded: bool = False,
) -> tuple[list[dict[str, Any]], list[Problem]]:
    """Records of one submission folder ``records/<entry>/`` (what ``mpcbench validate`` checks).

    ``as_recorded``: the records as stored, without a verification's verdicts, re-run times and
    re-run machine (:func:`row_verification`): what the verifier compares. (Both read the same row
    keys: a verification never changes a record's provenance.)

    The entry is skipped as a whole (one problem) when ``entry.yaml`` is missing or invalid
    or the plugin does not match its hash; otherwise each ``*.jsonl`` file is loaded and
    each bad line is skipped with a reason, within the entry's budget (module docstring).
    Whatever goes wrong inside, the result is one problem line, never an exception.
    """
    entry_dir = Path(entry_dir)
    try:
        return _load_entry(entry_dir, {} if _seen is None else _seen, frozenset(maintainers), as_recorded)
    except Exception as e:  # noqa: BLE001 - MemoryError, RecursionError, anything: only this entry is lost
        return [], [Problem(str(entry_dir), f"entry skipped: {type(e).__name__}: {_one_line(e) or 'no message'}")]


def _load_entry(
    entry_dir: Path, seen: dict[str, str], maintainers: frozenset[str], as_recorded: bool = False
) -> tuple[list[dict[str, Any]], list[Problem]]:
    label = str(entry_dir)
    if entry_dir.is_symlink() or not entry_dir.is_dir():
        return [], [Problem(label, "an entry must be a folder (not a symlink) holding entry.yaml and *.jsonl files")]
    try:
        info = _read_entry_info(entry_dir)
    except _Skip as e:
        return [], [Problem(label, f"entry skipped: {e}")]
    except OSError as e:
        return [], [Problem(label, f"entry skipped: cannot read: {_one_line(e)}")]
    files = []
    for p in entry_dir.iterdir():
        if p.suffix == ".jsonl":
            files.append(p)
            if len(files) > MAX_FILES_PER_ENTRY:
                break
    files.sort()
    if not files:
        return [], [Problem(label, "entry has no *.jsonl results file")]
    problems: list[Problem] = []
    if len(files) > MAX_FILES_PER_ENTRY:
        problems.append(Problem(label, f"more than {MAX_FILES_PER_ENTRY} results files; only the first are read"))
        files = files[:MAX_FILES_PER_ENTRY]
    verification = read_verification(entry_dir)
    entry_info = {**info.to_dict(), "verification": verification.status}
    if info.entry not in maintainers and (like := lookalike_of_maintainers(info)):
        entry_info["lookalike"] = like
        problems.append(Problem(label, f"flagged, not skipped: {like}"))
    attach = {
        "entry": info.entry,
        "submitter": info.submitter,
        "entry_info": entry_info,
        "is_maintainer": info.entry in maintainers,
    }
    budget = _Budget(label, problems)
    records: list[dict[str, Any]] = []
    plugin_hash = info.plugin_hash if info.plugin.endswith(".py") else ""
    key = fingerprint(info.key) if info.key else ""
    for f in files:
        if budget.stopped:
            break
        records += _load_jsonl(f, attach, budget, seen, str(f), plugin_hash=plugin_hash, key_fingerprint=key)
    if not as_recorded:
        row_verification(records, verification)  # per displayed row; a verification never changes times
        if info.entry in maintainers:  # their modeled times, computed once (leaderboard.times_file)
            _attach_retimed(entry_dir, records)
    return records, problems


def _attach_retimed(entry_dir: Path, records: list[dict[str, Any]]) -> None:
    from leaderboard.frame import BOARD_HARDWARE
    from leaderboard.times_file import read_times

    stored = read_times(entry_dir, BOARD_HARDWARE)
    if not stored:
        return
    by_sha: dict[str, dict[str, Any]] = {}
    for (sha, step), modeled in stored.items():
        by_sha.setdefault(sha, {})[step] = modeled
    for r in records:
        hit = by_sha.get(r.get("record_sha256") or "")
        if hit:
            r["retimed"] = hit


_RECORD_ID = re.compile(rb'"record_id"\s*:\s*"([^"\\]{1,200})"')
GIT_HISTORY_DEADLINE_S = 60.0


def _base_ref(top: Path) -> str | None:
    """The base branch whose first-parent history is the publication order: ``main`` (else
    ``origin/main``, ``master``, ``HEAD``)."""
    for ref in ("main", "origin/main", "master", "HEAD"):
        r = subprocess.run(
            ["git", "-C", str(top), "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
        if r.returncode == 0:
            return ref
    return None


def _publication_order(root: Path, wanted: dict[str, set[str]]) -> dict[tuple[str, str], int]:
    """(entry, record_id) -> the index, along the base branch's first-parent history (its merge
    order), of the first commit whose change added that record to that entry's folder. ``wanted``:
    entry -> the record ids asked about. Records not on the base branch are missing (they come last).
    Author and committer dates play no part: a submitter sets them freely."""
    out: dict[tuple[str, str], int] = {}
    try:
        top = Path(
            subprocess.run(
                ["git", "-C", str(root), "rev-parse", "--show-toplevel"],
                capture_output=True,
                text=True,
                timeout=20,
                check=True,
            ).stdout.strip()
        )
        base = _base_ref(top)
        rel = root.resolve().relative_to(top.resolve())
    except (OSError, ValueError, subprocess.SubprocessError):
        return out
    if base is None:
        return out
    depth = len(rel.parts)
    cmd = ["git", "-C", str(top), "log", "--first-parent", "--diff-merges=first-parent", "--reverse"]
    cmd += ["--format=commit %H", "-p", "--unified=0", "--no-color", "--no-renames", "--no-ext-diff", base, "--"]
    cmd += [str(rel / e) if depth else e for e in sorted(wanted)]
    deadline = time.monotonic() + GIT_HISTORY_DEADLINE_S
    index, entry = 0, None
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL) as proc:
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                if time.monotonic() > deadline:
                    break
                if line.startswith(b"commit "):
                    index += 1
                elif line.startswith(b"+++ "):
                    parts = line[4:].strip().decode(errors="replace").split("/")
                    parts = parts[1:] if parts and parts[0] == "b" else parts
                    entry = parts[depth] if len(parts) > depth + 1 else None
                elif line.startswith(b"+") and entry in wanted:
                    m = _RECORD_ID.search(line)
                    if m:
                        rid = m.group(1).decode(errors="replace")
                        if rid in wanted[entry]:
                            out.setdefault((entry, rid), index)
        finally:
            proc.kill()
    return out


def copies_to_drop(
    root: str | Path, rows: Iterable[tuple[str, str, bool, str]]
) -> tuple[set[tuple[str, str]], list[Problem]]:
    """Which (entry, record_id) pairs are copies of another entry's record, and one problem per copying entry.

    ``rows``: (record_id, entry, is_maintainer, entry date) of every loaded record under ``root``. A
    ``record_id`` in several entries is one run claimed twice: it stays with the maintainers' entry,
    else the entry whose folder received it first along the base branch's first-parent history (the
    merge order, :func:`_publication_order`; never commit dates, which a submitter sets), else the
    earlier entry.yaml date; never by folder name (an entry called ``0-attacker`` gains nothing by
    sorting first)."""
    root = Path(root)
    owners: dict[str, set[str]] = {}
    info: dict[str, tuple[bool, str]] = {}
    for rid, entry, maint, date in rows:
        owners.setdefault(rid, set()).add(entry)
        info[entry] = (bool(maint), date or "")
    wanted: dict[str, set[str]] = {}
    for rid, es in owners.items():
        if len(es) > 1:
            for e in es:
                wanted.setdefault(e, set()).add(rid)
    if not wanted:
        return set(), []
    order = _publication_order(root, wanted)

    def seniority(entry: str, rid: str) -> tuple:
        maint, date = info[entry]
        return (not maint, order.get((entry, rid), math.inf), date, entry)

    drop: set[tuple[str, str]] = set()
    by_pair: dict[tuple[str, str], list[str]] = {}
    for rid, es in owners.items():
        if len(es) > 1:
            owner = min(es, key=lambda e: seniority(e, rid))
            for e in sorted(es - {owner}):
                drop.add((e, rid))
                by_pair.setdefault((e, owner), []).append(rid)
    problems = [
        Problem(
            str(root / entry),
            f"duplicate record_id: {len(ids)} record(s) copied from entry {owner!r} (e.g. {sorted(ids)[0]!r}) "
            "were dropped: a record belongs to the entry the base branch received it in first",
        )
        for (entry, owner), ids in sorted(by_pair.items())
    ]
    return drop, problems


def _resolve_copies(root: Path, records: list[dict[str, Any]], problems: list[Problem]) -> list[dict[str, Any]]:
    """``records`` without the copies of other entries' records (:func:`copies_to_drop`)."""
    rows = [(r["record_id"], r["entry"], r["is_maintainer"], r["entry_info"].get("date", "")) for r in records]
    drop, probs = copies_to_drop(root, rows)
    problems += probs
    return [r for r in records if (r["entry"], r["record_id"]) not in drop]


def load_entries(
    records_dir: str | Path, *, _seen: dict[str, str] | None = None, maintainers: Iterable[str] = MAINTAINER_ENTRIES
) -> tuple[list[dict[str, Any]], list[Problem]]:
    """Records of every entry folder under ``records_dir`` (e.g. the committed ``records/``).

    Returns ``(records, problems)``. A missing ``records_dir`` gives no records and no
    problems (an empty leaderboard); loose files next to the entry folders (README.md) and
    hidden folders are ignored. Record ids are scoped per entry; a ``record_id`` that several
    entries hold stays with the entry that committed it first (:func:`_resolve_copies`).
    ``_seen`` collects every loaded id (``load_all`` uses it to drop a store's copies).
    """
    root = Path(records_dir)
    if not root.exists():
        return [], []
    if not root.is_dir():
        return [], [Problem(str(root), "records path is not a folder")]
    records: list[dict[str, Any]] = []
    problems: list[Problem] = []
    dirs = []
    for p in root.iterdir():
        if not p.name.startswith(".") and (p.is_dir() or p.is_symlink()):
            dirs.append(p)
            if len(dirs) > MAX_ENTRIES:
                break
    dirs.sort()
    if len(dirs) > MAX_ENTRIES:
        problems.append(Problem(str(root), f"more than {MAX_ENTRIES} entries; only the first are read"))
        dirs = dirs[:MAX_ENTRIES]
    for d in dirs:
        recs, probs = load_entry(d, maintainers=maintainers)  # ids scoped per entry
        records += recs
        problems += probs
    try:
        records = _resolve_copies(root, records, problems)
    except Exception as e:  # noqa: BLE001 - keep everything rather than lose the page
        problems.append(Problem(str(root), f"record ownership not checked: {type(e).__name__}: {_one_line(e)}"))
    _flag_lookalike_entries(records, problems)
    if _seen is not None:
        for r in records:
            _seen.setdefault(r["record_id"], r["entry"])
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
