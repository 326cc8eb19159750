"""How far a re-run may be from a record: spreads from references the submitter cannot touch.

A tolerance is never taken from the entry's own records (a decoy row with wild seeds, or a one-seed
row, used to widen it). The references, in order:

1. the maintainers' own multi-seed runs of the same setup (task, tier, specs and run setup), read
   from the judging tree (the base branch's ``records/mpcbench-baselines``, :mod:`.trusted`);
2. else **seeds the verifier runs itself** (:func:`self_run_reference`): the row's setup re-run at
   :data:`SELF_SEEDS` more seeds drawn from the verification's seed (:func:`self_seeds`; a fresh
   ``secrets`` seed per verification, so the submitter cannot know them when recording), in the same
   sandbox. The estimator is the sample std over the verifier's own runs of the setup (the row's
   re-run plus the self-run seeds), per field; for the final metric never below the tier's measured
   seed spread (``suite/results/tier_spread.json`` of the judging tree), and where the tier has none,
   the sample std times :func:`upper_std_factor` (its one-sided 95 % upper confidence bound: three
   runs give a std that is below the true one by half or more in one case of five, so the bare
   sample std would fail honest rows).

The old fallback, the largest spread among the maintainers' rows of the task, is gone: bimodal
sparsifier rows made it 1.0 nat on shakespeare and 0.94 on wikitext2, wider than most differences
between compressors, so a forged seed of a row passed it.

No reference (no maintainers' run of the setup and the self-run seeds could not be run): the
comparison across machines or seeds cannot be made ("cannot verify").
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
    "self_run_reference",
    "upper_std_factor",
    "numeric_fields",
    "K_SPREAD",
    "BYTES_RTOL",
    "MAINTAINERS_DIR",
    "SELF_SEEDS",
]

K_SPREAD = 3.0  # within 3 standard deviations of a difference of two seeds
SELF_SEEDS = 2  # the verifier's own extra seeds of a setup without the maintainers' multi-seed run
BYTES_RTOL = 0.01  # data-dependent payload sizes follow the values: never tighter than 1 %
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


def maintainers_reference(record: dict[str, Any], maintainers_dir: str | None = None) -> Reference | None:
    """The maintainers' multi-seed run of this record's setup as a reference, or None."""
    same = _maintainers(str(maintainers_dir or MAINTAINERS_DIR)).get(_setup(record))
    if not same:
        return None
    stds = _field_stds(same)
    return Reference(stds.get("final_metric", 0.0), stds, f"the maintainers' {len(same)} seeds of this setup")


def reference_for(record: dict[str, Any], maintainers_dir: str | None = None) -> Reference:
    """The maintainers' reference of this setup (:func:`maintainers_reference`), or VerifyError
    saying that only seeds the verifier runs itself can give one."""
    ref = maintainers_reference(record, maintainers_dir)
    if ref is None:
        raise VerifyError(
            f"no trusted seed spread for {record.get('task')} / {record.get('tier')} (the maintainers have no "
            "multi-seed run of this setup, and no seeds of the verifier's own were run)"
        )
    return ref


def self_seeds(verification_seed: int, row: str, taken: set[int], n: int = 0) -> list[int]:
    """``n`` (default :data:`SELF_SEEDS`) training seeds for the verifier's own runs of row ``row``:
    drawn from the verification's seed and the row, none of the row's recorded seeds (``taken``)."""
    out: list[int] = []
    i = 0
    while len(out) < (n or SELF_SEEDS):
        digest = hashlib.sha256(f"{verification_seed}:{row}:self-seed:{i}".encode()).digest()
        s = int.from_bytes(digest[:8], "big") % MAX_SEED
        if s not in taken and s not in out:
            out.append(s)
        i += 1
    return out


# one-sided 95 % quantiles of chi-square with k degrees of freedom (lower tail): the sample std of
# k + 1 runs is below sigma * sqrt(q / k) in 5 % of cases
_CHI2_LOWER_05 = {1: 0.00393, 2: 0.1026, 3: 0.3518, 4: 0.7107, 5: 1.1455, 6: 1.6354, 7: 2.1673, 8: 2.7326}


def upper_std_factor(n: int) -> float:
    """The factor that makes the sample std of ``n`` runs a 95 % upper bound of the true std."""
    k = max(1, n - 1)
    return math.sqrt(k / _CHI2_LOWER_05.get(k, max(0.5, k - 1.645 * math.sqrt(2 * k))))


def _task_ceiling(record: dict[str, Any], maintainers_dir: str | None) -> float | None:
    """The largest final-metric spread among the maintainers' multi-seed setups of the record's task and tier."""
    task = (record.get("task"), record.get("tier"))
    stds = [
        _field_stds(v).get("final_metric", 0.0)
        for v in _maintainers(str(maintainers_dir or MAINTAINERS_DIR)).values()
        if (v[0].get("task"), v[0].get("tier")) == task
    ]
    return max(stds) if stds else None


def self_run_reference(
    record: dict[str, Any], runs: list[dict[str, Any]], maintainers_dir: str | None = None
) -> Reference:
    """The spread of the verifier's own runs of ``record``'s setup (module docstring), or VerifyError.

    A plugin can tell a seed it was not recorded at and answer it with noise, to widen the spread
    its recorded seeds are held to: a spread wider than any of the maintainers' setups of the task
    (when they have one) is not used ("cannot verify")."""
    from leaderboard.statistics import MEASURED_SPREAD

    ok = [r for r in runs if r.get("status") == "ok"]
    seeds = sorted(int(r["seed"]) for r in ok if isinstance(r.get("seed"), int))
    what = f"{record.get('task')} / {record.get('tier')}"
    if len(set(seeds)) < 2:
        raise VerifyError(f"no trusted seed spread for {what}: fewer than two of the verifier's own seeds ended ok")
    stds = _field_stds(ok)
    sample = stds.get("final_metric", 0.0)
    ceiling = _task_ceiling(record, maintainers_dir)
    if ceiling is not None and sample > ceiling:
        raise VerifyError(
            f"the verifier's own seeds of this setup spread {sample:.4g}, more than any of the maintainers' setups "
            f"of {what} ({ceiling:.4g}): too noisy to hold a record to"
        )
    measured = MEASURED_SPREAD.get((record.get("task"), record.get("tier")))
    if measured is not None and measured.seed_std > 0:
        final, floor = max(sample, measured.seed_std), f"at least the tier's measured {measured.seed_std:.4g}"
    else:
        final, floor = sample * upper_std_factor(len(ok)), f"x{upper_std_factor(len(ok)):.2f}, its 95 % upper bound"
    names = ", ".join(map(str, seeds))
    return Reference(final, stds, f"the verifier's own seeds {names} of this setup (std {sample:.4g}, {floor})")
