"""What an entry and a row of the leaderboard are: the one home both the verifier and the board use.

A **row** is what the board shows on one line: the records of one entry, task, tier, compressor,
run setup and machine class (:class:`RowKey`, :func:`row_key`). Within a row every seed is one
record: the **latest record rule** (:func:`latest_flags`) keeps, per (entry, ``cell_key``) and per
(row, seed), the record written last (``created``, then load order); older ones are superseded
and neither shown nor counted. ``mpcbench verify`` samples rows by this key and compares every
latest record of a row with the row's re-run; the board groups, ranks and marks rows by the
same key (``leaderboard.statistics.GROUP`` is :data:`ROW_FIELDS`), so the verifier's unit is the
board's row.

Torch-free and pandas-free: ``suite.bench`` (the verifier) and ``leaderboard`` (the board) both
import it, and neither needs the other to know what a row is.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import astuple, dataclass
from typing import Any, Mapping, Sequence

__all__ = [
    "ROW_FIELDS",
    "RowKey",
    "row_key",
    "row_keys",
    "row_id",
    "latest_flags",
    "rows_of",
    "setup_label",
    "machine_label",
    "record_digest",
]

ROW_FIELDS = ("task", "tier", "entry", "compressor", "setup", "machine")


@dataclass(frozen=True, order=True)
class RowKey:
    """One displayed row: entry, task, tier, compressor (as recorded), run setup and machine class."""

    task: str
    tier: str
    entry: str
    compressor: str
    setup: str
    machine: str

    def to_list(self) -> list[str]:
        return list(astuple(self))

    @classmethod
    def from_list(cls, values: Sequence[Any]) -> RowKey:
        if len(values) != len(ROW_FIELDS) or not all(isinstance(v, str) for v in values):
            raise ValueError(f"a row key is {len(ROW_FIELDS)} strings ({', '.join(ROW_FIELDS)})")
        return cls(*values)


def row_id(key: RowKey) -> str:
    """A short stable id of a row (16 hex digits of the key's JSON), for reports and links."""
    return hashlib.sha256(json.dumps(key.to_list()).encode()).hexdigest()[:16]


def record_digest(line: bytes) -> str:
    """sha256 of a record's stored line (trailing whitespace dropped): what a verification binds."""
    return hashlib.sha256(line.rstrip()).hexdigest()


# --------------------------------------------------------------------------- labels (untrusted text, bounded)
def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _str(v: Any) -> str:
    return v if isinstance(v, str) else ""


def _pos_int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def _word(v: Any) -> str:
    """A record's short setting (schedule, device) on one line and bounded: record text is untrusted."""
    return " ".join(_str(v).split())[:40]


def setup_label(record: Mapping[str, Any]) -> str:
    """The run setup of a record besides its compressor, as a short stable string, e.g.
    ``"4 stages, 1f1b, M=4, cpu"`` (+ ``", dp=2"``, ``", tp=2"``, ``", sync outer(h=10)"``, ``", model d256"``,
    ``", 200 steps"``, ``", warm-up 10"``
    when set).

    The launch mode (one process or torchrun) is not part of the setup: both run the same stage,
    boundary and accounting code and give the same losses and bytes (tested:
    tests/suite/pipeline/test_pipeline_distributed.py), and a row's times come from the time
    model (:mod:`suite.results.time_model`), not from the process layout a cell happened to use;
    so a plugin run with the defaults (torchrun) ranks in the built-ins' table.

    Stages, schedule, micro-batches, device and dp come from the record's ``run`` (what
    actually ran, defaults resolved), else from its ``config`` (a failed record has no ``run``;
    :func:`row_keys` then borrows the resolved setup of an ok record with the same config).
    ``steps`` is the config's step override (the tier's own count is implied by the tier) and
    the warm-up is ``compress_warmup_steps``. Missing fields are left out, so an old or minimal
    record still gets a (shorter) label; ``""`` when nothing is known.
    """
    run, cfg = _dict(record.get("run")), _dict(record.get("config"))
    stages = _pos_int(run.get("n_stages")) or _pos_int(cfg.get("stages"))
    micro = _pos_int(run.get("microbatches")) or _pos_int(cfg.get("microbatches"))
    dp = _pos_int(run.get("dp")) or _pos_int(cfg.get("dp"))
    steps, warmup = _pos_int(cfg.get("steps")), _pos_int(cfg.get("compress_warmup_steps"))
    parts = [f"{stages} stage{'' if stages == 1 else 's'}" if stages else ""]
    parts.append(_word(run.get("schedule")) or _word(cfg.get("schedule")))
    parts.append(f"M={micro}" if micro else "")
    parts.append(_word(run.get("device")) or _word(cfg.get("device")))
    parts.append(f"dp={dp}" if dp and dp != 1 else "")  # dp=1 is the default: not worth a word
    tp = _pos_int(cfg.get("tp"))
    parts.append(f"tp={tp}" if tp and tp != 1 else "")  # tensor-parallel ranks per stage
    sync = _word(cfg.get("sync"))
    parts.append(f"sync {sync}" if sync and sync != "step" else "")  # DiLoCo-style outer loop
    size = _word(cfg.get("model_size"))
    parts.append(f"model {size}" if size else "")  # a named model size (the scale ladder): another model
    parts.append(f"{steps} steps" if steps else "")
    parts.append(f"warm-up {warmup}" if warmup else "")
    parts.append(_optimizer_words(cfg.get("optimizer"), cfg.get("lr")))  # the optimizer and rate when not the task's
    hosts, link = _pos_int(cfg.get("nnodes")), _word(cfg.get("link"))
    parts.append(f"{hosts} hosts" if hosts and hosts > 1 else "")
    parts.append(f"link {link}" if link else "")  # an emulated link is another experiment
    return ", ".join(p for p in parts if p)


def _optimizer_words(optimizer: Any, lr: Any) -> str:
    """``sgd(momentum=0.9, clip=1)`` at lr 0.3 -> ``"sgd momentum 0.9 clip 1 lr 0.3"``: one part of
    the label without its separator (", "); "" for the task's own optimizer at the tier's rate."""
    words = " ".join(re.sub(r"[(),=]", " ", optimizer).split()) if isinstance(optimizer, str) else ""
    rate = f"lr {lr:g}" if isinstance(lr, (int, float)) and not isinstance(lr, bool) else ""
    return " ".join(w for w in (words, rate) if w)


_SETUP_CONFIG_KEYS = (
    "stages",
    "dp",
    "tp",
    "schedule",
    "microbatches",
    "compress_warmup_steps",
    "device",
    "steps",
    "nnodes",
    "link",
    "sync",
    "optimizer",
    "lr",
    "model_size",
)


def setup_signature(record: Mapping[str, Any]) -> str:
    """The record's requested setup as written in its config (defaults unresolved)."""
    cfg = _dict(record.get("config"))
    return repr([cfg.get(k) for k in _SETUP_CONFIG_KEYS])


def machine_label(provenance: Mapping[str, Any]) -> str:
    """The machine class of a record: the GPU model when a GPU ran it, else the CPU model and
    how many cores the run could use, e.g. ``"Intel(R) Xeon(R) Processor @ 2.50GHz, 2 cores"``.
    Two records of one setup on different machine classes are different experiments."""
    machine = _dict(provenance.get("machine"))
    gpu = " ".join(_str(machine.get("gpu")).split())[:80]
    if gpu:
        return gpu
    cpu = " ".join(_str(machine.get("cpu")).split())[:80]
    cores = _pos_int(machine.get("cpu_affinity")) or _pos_int(machine.get("cpu_count"))
    return cpu + (f", {cores} core{'' if cores == 1 else 's'}" if cores else "")


# --------------------------------------------------------------------------- rows
def _own_key(record: Mapping[str, Any], setup: str) -> RowKey:
    return RowKey(
        _str(record.get("task")),
        _str(record.get("tier")),
        _str(record.get("entry")) or "local",
        _str(record.get("compressor")),
        setup,
        machine_label(_dict(record.get("provenance"))),
    )


def row_key(record: Mapping[str, Any]) -> RowKey:
    """The row of one record on its own (a failed record without ``run`` keeps its config's setup;
    :func:`row_keys` resolves it against the other records)."""
    return _own_key(record, setup_label(record))


def row_keys(records: Sequence[Mapping[str, Any]]) -> list[RowKey]:
    """The row of each record. A record without ``run`` (a failed cell) takes the resolved setup
    that most ``ok`` records of the same task, tier and requested config have (ties: the first in
    sorted order), so it counts in the same row (``stages: null`` means the task's default, which
    only a record that ran knows)."""
    setups = [setup_label(r) for r in records]
    votes: dict[tuple[str, str, str], dict[str, int]] = {}
    for r, s in zip(records, setups):
        if _dict(r.get("run")):
            k = (_str(r.get("task")), _str(r.get("tier")), setup_signature(r))
            votes.setdefault(k, {}).setdefault(s, 0)
            votes[k][s] += 1
    out = []
    for r, s in zip(records, setups):
        if not _dict(r.get("run")):
            v = votes.get((_str(r.get("task")), _str(r.get("tier")), setup_signature(r)))
            if v:
                s = min(v, key=lambda x: (-v[x], x))
        out.append(_own_key(r, s))
    return out


def _seed(record: Mapping[str, Any]) -> int:
    s = record.get("seed")
    return s if isinstance(s, int) and not isinstance(s, bool) else -1


def latest_flags(records: Sequence[Mapping[str, Any]], keys: Sequence[RowKey] | None = None) -> list[bool]:
    """Whether each record is the latest of its cell and of its (row, seed): a rerun of the same
    cell, or another record of the same seed in the same row, supersedes the older one (ordered by
    ``created``, then by load order), so one seed is never counted twice."""
    keys = row_keys(records) if keys is None else keys
    order = sorted(range(len(records)), key=lambda i: (_str(records[i].get("created")), i))
    by_cell: dict[tuple[str, str], int] = {}
    by_seed: dict[tuple[RowKey, int], int] = {}
    for i in order:
        r = records[i]
        by_cell[(keys[i].entry, _str(r.get("cell_key")))] = i
        by_seed[(keys[i], _seed(r))] = i
    last_cell, last_seed = set(by_cell.values()), set(by_seed.values())
    return [i in last_cell and i in last_seed for i in range(len(records))]


def rows_of(records: Sequence[Mapping[str, Any]], *, ok_only: bool = False) -> dict[RowKey, list[int]]:
    """Row -> the indexes of its latest records (:func:`latest_flags`), in ``records`` order;
    ``ok_only``: only records whose status is ``ok`` (what a re-run can be compared with)."""
    keys = row_keys(records)
    latest = latest_flags(records, keys)
    out: dict[RowKey, list[int]] = {}
    for i, (k, last) in enumerate(zip(keys, latest)):
        if last and (not ok_only or records[i].get("status") == "ok"):
            out.setdefault(k, []).append(i)
    return out


def finite(v: Any) -> bool:
    """A plain finite number (not a bool)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
