"""How far a re-run may be from a record: spreads from references the submitter cannot touch.

A tolerance is never taken from the entry's own records (a decoy row with wild seeds, or a one-seed
row, used to widen it). The references, in order:

1. the maintainers' own multi-seed runs of the same setup (task, tier, specs and run setup), read
   from the judging tree (the base branch's ``records/mpcbench-baselines``, :mod:`.trusted`);
2. else the maintainers' multi-seed rows of the same task and tier: per field the largest spread
   among them (a setup they did not run disturbs training at most about as much as theirs);
3. else the tier's measured seed spread (``suite/results/tier_spread.json`` of the judging tree),
   for every quality field.

No reference: the comparison across machines or seeds cannot be made ("cannot verify").
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from suite.results import COMMITTED_RECORDS
from suite.results.entries import rows_of

from .errors import VerifyError

__all__ = ["Reference", "reference_for", "numeric_fields", "K_SPREAD", "BYTES_RTOL", "MAINTAINERS_DIR"]

K_SPREAD = 3.0  # within 3 standard deviations of a difference of two seeds
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
def _maintainers(
    folder: str,
) -> tuple[dict[str, list[dict[str, Any]]], dict[tuple[str, str], list[list[dict[str, Any]]]]]:
    """The maintainers' latest ok records by setup (>= 2 seeds), and their multi-seed rows by (task, tier)."""
    from leaderboard.submissions import load_entry

    records, _ = load_entry(folder)
    by_setup: dict[str, list[dict[str, Any]]] = {}
    for idx in rows_of(records, ok_only=True).values():
        for i in idx:
            by_setup.setdefault(_setup(records[i]), []).append(records[i])
    by_setup = {k: v for k, v in by_setup.items() if len({r["seed"] for r in v}) >= 2}
    by_task: dict[tuple[str, str], list[list[dict[str, Any]]]] = {}
    for v in by_setup.values():
        by_task.setdefault((v[0]["task"], v[0]["tier"]), []).append(v)
    return by_setup, by_task


def reference_for(record: dict[str, Any], maintainers_dir: str | None = None) -> Reference:
    """The trusted spread to hold a record of this setup to (module docstring), or VerifyError."""
    from leaderboard.statistics import MEASURED_SPREAD

    folder = str(maintainers_dir or MAINTAINERS_DIR)
    by_setup, by_task = _maintainers(folder)
    same = by_setup.get(_setup(record))
    if same:
        stds = _field_stds(same)
        return Reference(stds.get("final_metric", 0.0), stds, f"the maintainers' {len(same)} seeds of this setup")
    task_rows = by_task.get((record.get("task"), record.get("tier")), [])
    measured = MEASURED_SPREAD.get((record.get("task"), record.get("tier")))
    tier_std = measured.seed_std if measured is not None else 0.0
    if task_rows:
        largest: dict[str, float] = {}
        for rows in task_rows:
            for name, sd in _field_stds(rows).items():
                largest[name] = max(largest.get(name, 0.0), sd)
        final = max(largest.get("final_metric", 0.0), tier_std)
        return Reference(
            final,
            largest,
            f"the largest spread of the maintainers' {len(task_rows)} multi-seed rows of this task and tier",
        )
    if measured is not None:
        return Reference(tier_std, {}, f"the measured seed spread of {record.get('task')} / {record.get('tier')}")
    raise VerifyError(
        f"no trusted seed spread for {record.get('task')} / {record.get('tier')} (no maintainers' multi-seed run, "
        "no measured tier spread): it cannot be compared across seeds or machines"
    )
