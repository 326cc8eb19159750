"""How far a re-run may be from a record: spreads no entry can widen.

Same machine class and torch build, same seed: bit for bit (:mod:`.report`, ``_exact``). Otherwise a
quality field is held to the **maintainers' measured spread of the task and tier**
(``suite/results/tier_spread.json`` of the judging tree, ``leaderboard.statistics.MEASURED_SPREAD``),
per field widened only by the maintainers' own multi-seed run of the same setup (read from the judging
tree's ``records/mpcbench-baselines``, :mod:`.trusted`), and **capped** at :data:`CAP_FACTOR` times the
tier's spread: a bimodal setup of the maintainers does not open a window a forger can use. Byte counts
are deterministic and held to :data:`BYTES_RTOL` (1 %), never wider. Nothing here is a function of the
entry's records or of the entry's behaviour at any seed: the old fallback (the spread of seeds the
verifier ran of the entry's own plugin) let a plugin that recognised the verifier's seeds (~1e9; recorded
seeds are 0-2) answer them with noise and widen its own tolerance until a forged seed passed.

The verifier still runs a setup at a seed of its own (:func:`self_seeds`), as a **held-out check**, not
as a tolerance (:mod:`.row_reference`): drawn from the same range and form as recorded seeds (0-99),
unpredictably (from the verification's ``secrets`` seed); a plugin that tells it from a recorded one and
misbehaves there only fails its own row.

No measured spread for the task and tier: a comparison that is not exact cannot be made ("cannot verify").
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from suite.results import COMMITTED_RECORDS
from suite.results.entries import rows_of
from suite.results.records import MAX_SEED

from .errors import VerifyError

__all__ = [
    "Reference",
    "reference_for",
    "maintainers_reference",
    "self_seeds",
    "tier_spread",
    "numeric_fields",
    "K_SPREAD",
    "CAP_FACTOR",
    "SEED_RANGE",
    "BYTES_RTOL",
    "MAINTAINERS_DIR",
    "SELF_SEEDS",
]

K_SPREAD = 3.0  # within 3 standard deviations of a difference of two seeds
SELF_SEEDS = 1  # the verifier's held-out seeds of a row compared across seeds (a check, never a tolerance)
SEED_RANGE = 100  # recorded seeds are small integers: the verifier's look the same (0-99)
CAP_FACTOR = 2.0  # no spread wider than twice the maintainers' measured spread of the task and tier
BYTES_RTOL = 0.01  # byte counts are deterministic: within 1 %, never wider
MAINTAINERS_DIR = COMMITTED_RECORDS / "mpcbench-baselines"  # of the tree this code runs from (the judge's)
CURVE_FIELDS = ("metric", "metric_uncompressed", "train_loss")
BYTE_FIELDS = ("bytes", "bytes_per_boundary", "eval_bytes", "wire_bytes_by_step")


@dataclass(frozen=True)
class Reference:
    """A trusted seed spread: of the final metric, per field by name (byte counts relative), and whence."""

    final_std: float
    field_std: dict[str, float] = field(default_factory=dict)
    source: str = ""


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def numeric_fields(record: dict[str, Any]) -> tuple[dict[str, float], dict[str, float]]:
    """(quality fields, byte counts) of a record by the names the comparison reports them under."""
    quality: dict[str, float] = {}
    counts: dict[str, float] = {}
    # the reached-target step varies across seeds as much as quality does (the maintainers' sst2 seeds:
    # 28 and 45 steps): it needs its own spread when another seed of the row is compared
    for k in ("final_metric", "final_metric_uncompressed", "reached_target_step"):
        if _num(record.get(k)):
            quality[k] = float(record[k])
    for p in record.get("curve") or []:
        if isinstance(p, dict):
            for k in CURVE_FIELDS:
                if _num(p.get(k)):
                    quality[f"curve[step {p.get('step')}].{k}"] = float(p[k])

    def walk(name: str, x: Any) -> None:
        for k, v in x.items() if isinstance(x, dict) else ():
            if isinstance(v, dict):
                walk(f"{name}.{k}", v)
            elif isinstance(v, list) and all(_num(e) for e in v):
                counts[f"{name}.{k} total"] = float(sum(v))
            elif _num(v):
                counts[f"{name}.{k}"] = float(v)

    for k in BYTE_FIELDS:
        walk(k, record.get(k))
    if _num(record.get("compressor_state_bytes")):
        counts["compressor_state_bytes"] = float(record["compressor_state_bytes"])
    return quality, counts


def _std(xs: list[float]) -> float:
    m = sum(xs) / len(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def _field_stds(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Per field, the sample std over the records' seeds (byte counts relative to their mean)."""
    fields = [numeric_fields(r) for r in rows]
    if len(fields) < 2:
        return {}
    out: dict[str, float] = {}
    for part, relative in ((0, False), (1, True)):
        for name in set.intersection(*(set(f[part]) for f in fields)):
            xs = [f[part][name] for f in fields]
            sd, mean = _std(xs), sum(xs) / len(xs)
            out[name] = sd / abs(mean) if relative and mean else sd if not relative else 0.0
    return out


def _setup(r: dict[str, Any]) -> str:
    return json.dumps([r.get("task"), r.get("tier"), r.get("specs"), r.get("run")], sort_keys=True, default=str)


@lru_cache(maxsize=4)
def _maintainers(folder: str) -> dict[str, list[dict[str, Any]]]:
    """The maintainers' latest ok records by setup, of setups they ran at two seeds or more."""
    from leaderboard.submissions import load_entry

    records, _ = load_entry(folder, as_recorded=True)
    by_setup: dict[str, list[dict[str, Any]]] = {}
    for idx in rows_of(records, ok_only=True).values():
        for i in idx:
            by_setup.setdefault(_setup(records[i]), []).append(records[i])
    return {k: v for k, v in by_setup.items() if len({r["seed"] for r in v}) >= 2}


def tier_spread(record: dict[str, Any]) -> float | None:
    """The maintainers' measured seed spread of the record's task and tier (metric units), or None."""
    from leaderboard.statistics import MEASURED_SPREAD

    measured = MEASURED_SPREAD.get((record.get("task"), record.get("tier")))
    return measured.seed_std if measured is not None and measured.seed_std > 0 else None


_METRIC_FIELDS = ("final_metric", "final_metric_uncompressed")


def _metric_unit(name: str) -> bool:
    return name in _METRIC_FIELDS or name.endswith((".metric", ".metric_uncompressed"))


def maintainers_reference(record: dict[str, Any], maintainers_dir: str | None = None) -> Reference | None:
    """The maintainers' multi-seed run of this record's setup as a reference (capped like any), or None."""
    same = _maintainers(str(maintainers_dir or MAINTAINERS_DIR)).get(_setup(record))
    tier = tier_spread(record)
    if not same or tier is None:
        return None
    cap = CAP_FACTOR * tier
    stds = {k: min(v, cap) if _metric_unit(k) else v for k, v in _field_stds(same).items()}
    stds = {k: v for k, v in stds.items() if k in _quality_names(same[0])}  # bytes: 1 %, never a spread
    final = min(max(stds.get("final_metric", 0.0), tier), cap)
    return Reference(final, stds, f"the maintainers' {len(same)} seeds of this setup (capped at {cap:.4g})")


def _quality_names(record: dict[str, Any]) -> set[str]:
    return set(numeric_fields(record)[0])


def reference_for(record: dict[str, Any], maintainers_dir: str | None = None) -> Reference:
    """The spread a comparison that is not exact is held to (module docstring), or VerifyError."""
    ref = maintainers_reference(record, maintainers_dir)
    if ref is not None:
        return ref
    tier = tier_spread(record)
    if tier is None:
        raise VerifyError(
            f"no trusted seed spread for {record.get('task')} / {record.get('tier')} (the maintainers measured "
            "none for this task and tier): only a re-run on the recorded machine class can verify it"
        )
    return Reference(tier, {}, f"the maintainers' measured spread of {record.get('task')} / {record.get('tier')}")


def self_seeds(verification_seed: int, row: str, taken: set[int], n: int = 0) -> list[int]:
    """``n`` (default :data:`SELF_SEEDS`) training seeds for the verifier's held-out runs of row ``row``:
    drawn from the verification's seed and the row, in the range recorded seeds come from
    (0 .. :data:`SEED_RANGE` - 1, or up to the row's largest recorded seed), none of the row's (``taken``)."""
    top = max([SEED_RANGE - 1, *(t for t in taken if 0 <= t < MAX_SEED)])
    out: list[int] = []
    i = 0
    while len(out) < (n or SELF_SEEDS) and i < 100_000:
        digest = hashlib.sha256(f"{verification_seed}:{row}:self-seed:{i}".encode()).digest()
        s = int.from_bytes(digest[:8], "big") % (top + 1)
        if s not in taken and s not in out:
            out.append(s)
        i += 1
    return out
