"""A record against a re-run: every field the board shows under the mark, or derives from.

Two kinds of comparison:

- **its own re-run** (same seed): labels, spec, config and run setup equal; quality with and without
  compression, the curve, raw / wire bytes and messages per direction, per boundary and per step,
  evaluation bytes, the reached-target step and the warnings equal (**exact**: the verifier's own
  machine class, torch build and a clean recorded commit) or each within a trusted spread
  (**spread**, :mod:`.tolerances`); the network model's inputs other than measured times equal.
- **another seed of the row**: the same, seed and cell key aside, always within the trusted spread.

Measured and modeled **times are not compared**: a verified row shows and ranks by its re-run's
times (``verification.reruns``), never the record's, so a recorded time cannot reach the board
under the mark and an honest short cell cannot fail because either machine was busy (a 0.72 s cell
re-ran in 0.017 s and failed "37.9x apart" at load 4-5 under the old ratio rule).
"""

from __future__ import annotations

import json
import math
from typing import Any, Mapping

from .tolerances import BYTES_RTOL, K_SPREAD

__all__ = ["field_diffs", "compare", "compare_all", "IDENTITY_FIELDS"]

IDENTITY_FIELDS = (
    "cell_key",
    "task",
    "tier",
    "seed",
    "compressor",
    "specs",
    "specs_resolved",
    "metric_name",
    "higher_is_better",
    "target",
    "run",
)
TIMING_STRUCTURE = ("schedule", "microbatches", "replicas", "warmup_steps")  # not measured times
# The per-step loads of the timing inputs (``counts``, ``steps``) are not held to equality even in exact
# mode: which step a message's bytes are attributed to follows the run's measured timeline, so two runs
# of one seed on one machine regroup them (the maintainers' shakespeare-topk-seed1: 225 runs of 300
# steps recorded, 256 re-run, equal bytes in total and per direction, equal curve). Only their total
# of steps is compared, as in spread mode: a verified row shows and models the re-run's timing inputs,
# never the record's (leaderboard.submissions.row_verification).
TIMING_BYTES = ("target_step",)
_RERUN_SETS = (
    "plugins",
    "data_dir",
    "time_limit_s",
    "node_rank",
    "rdzv_endpoint",
    "comm_timeout_s",
    "check_consistency",
)


def _setup(record: dict[str, Any], drop_seed: bool = False) -> dict[str, Any]:
    """A record's config without what a re-run sets itself (paths, limits, the data folder)."""
    drop = _RERUN_SETS + (("seed",) if drop_seed else ())
    return {k: v for k, v in (record.get("config") or {}).items() if k not in drop}


def _short(v: Any) -> str:
    s = json.dumps(v, sort_keys=True, default=str)
    return s if len(s) <= 80 else s[:77] + "..."


class _Diffs:
    def __init__(self, exact: bool, tol: float, field_std: Mapping[str, float] | None = None) -> None:
        self.exact, self.tol, self.out = exact, tol, []
        self.field_std = field_std or {}

    def _tol(self, name: str) -> float:
        """The field's trusted seed spread (K sigma of a difference), never tighter than the final metric's."""
        return max(self.tol, K_SPREAD * math.sqrt(2) * self.field_std.get(name, 0.0))

    def same(self, name: str, a: Any, b: Any) -> None:
        if a != b:
            self.out.append(f"{name}: recorded {_short(a)}, re-run {_short(b)}")

    def quality(self, name: str, a: Any, b: Any) -> None:
        if self.exact or a is None or b is None:
            return self.same(name, a, b)
        tol = self._tol(name)
        if not (isinstance(a, (int, float)) and isinstance(b, (int, float))) or not abs(a - b) <= tol:
            self.out.append(f"{name}: recorded {_short(a)}, re-run {_short(b)} (|diff| > {tol:.4g})")

    def count(self, name: str, a: Any, b: Any) -> None:
        if self.exact or not (isinstance(a, (int, float)) and isinstance(b, (int, float))):
            return self.same(name, a, b)
        rtol = BYTES_RTOL  # deterministic counts: no spread widens it
        if not abs(a - b) <= rtol * max(abs(a), abs(b), 1):
            self.out.append(f"{name}: recorded {a}, re-run {b} (more than {rtol:.1%} apart)")

    def counts(self, name: str, a: Any, b: Any) -> None:
        a, b = a if isinstance(a, dict) else {}, b if isinstance(b, dict) else {}
        if set(a) != set(b):
            return self.same(f"{name} keys", sorted(a), sorted(b))
        for k in sorted(a):
            if isinstance(a[k], dict) and isinstance(b[k], dict):
                self.counts(f"{name}.{k}", a[k], b[k])
            elif isinstance(a[k], list) and isinstance(b[k], list) and not self.exact:
                if len(a[k]) != len(b[k]):
                    self.same(f"{name}.{k} length", len(a[k]), len(b[k]))
                else:
                    self.count(f"{name}.{k} total", sum(a[k]), sum(b[k]))
            else:
                self.count(f"{name}.{k}", a[k], b[k])


def _warnings(r: dict[str, Any]) -> list[str]:
    w = r.get("warnings")
    # what each warning says, without its numbers (byte counts in parentheses follow the seed)
    return sorted(" ".join(str(x).split()).split(" (")[0] for x in (w if isinstance(w, list) else [w] if w else []))


def field_diffs(
    old: dict[str, Any],
    new: dict[str, Any],
    *,
    exact: bool,
    tol: float = 0.0,
    field_std: Mapping[str, float] | None = None,
    same_seed: bool = True,
) -> list[str]:
    """Every difference between a record and a re-run in the fields the board shows or derives from
    (a field of a type the comparison cannot read is itself a difference, never an exception).
    ``field_std``: the trusted seed spread of each quality field by its name (:mod:`.tolerances`); a
    field without one is held to ``tol``; byte counts always to :data:`BYTES_RTOL`.
    ``same_seed``: the re-run is of this record's own cell (else of another seed of its row)."""
    try:
        return _field_diffs(old, new, _Diffs(exact and same_seed, tol, field_std), same_seed)
    except Exception as e:  # noqa: BLE001 - the record is untrusted: an unreadable field is a mismatch
        return [f"a field cannot be compared ({type(e).__name__})"]


def _field_diffs(old: dict[str, Any], new: dict[str, Any], d: _Diffs, same_seed: bool) -> list[str]:
    exact = d.exact
    for k in IDENTITY_FIELDS:
        if k in ("seed", "cell_key") and not same_seed:
            continue
        if k == "cell_key" and (old.get("config") or {}).get("plugins"):
            # the key hashes the plugin's path, and the re-run loads a checked copy of the pinned file:
            # compare the configs without where the plugin lies (its content is pinned by hash)
            d.same("config (without plugin paths)", _setup(old), _setup(new))
            continue
        d.same(k, old.get(k), new.get(k))
    if not same_seed:
        d.same("config (without the seed)", _setup(old, True), _setup(new, True))
    d.same("warnings", _warnings(old), _warnings(new))
    for k in ("final_metric", "final_metric_uncompressed"):
        d.quality(k, old.get(k), new.get(k))
    oc = [p for p in old.get("curve") or [] if isinstance(p, dict)]
    nc = [p for p in new.get("curve") or [] if isinstance(p, dict)]
    d.same("curve steps", [p.get("step") for p in oc], [p.get("step") for p in nc])
    if len(oc) == len(nc):
        for a, b in zip(oc, nc):
            for k in ("metric", "metric_uncompressed", "train_loss"):
                d.quality(f"curve[step {a.get('step')}].{k}", a.get(k), b.get(k))
    ra, rb = old.get("reached_target_step"), new.get("reached_target_step")
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (ra, rb))
    target = old.get("target")
    if not exact and (ra is None) != (rb is None) and isinstance(target, (int, float)):
        # a run ending near its target may reach it in one run only: equal when the run that did not
        # reach it ended within the final metric's spread of the target
        last = new.get("final_metric") if rb is None else old.get("final_metric")
        if not (isinstance(last, (int, float)) and abs(last - target) <= d._tol("final_metric")):
            d.same("reached_target_step", ra, rb)
    elif exact or not numbers:
        d.same("reached_target_step", ra, rb)
    else:  # the crossing may move by one evaluation, or by the trusted spread of the crossing step
        steps = [p.get("step") for p in oc if isinstance(p.get("step"), int)]
        interval = min((b - a for a, b in zip(steps, steps[1:]) if b > a), default=0)
        allowed = max(interval, K_SPREAD * math.sqrt(2) * d.field_std.get("reached_target_step", 0.0))
        if abs(ra - rb) > allowed:
            d.same("reached_target_step", ra, rb)
        # the interpolated step the board's time-to-target is modeled at: held to the same allowance
        ta, tb = (
            (old.get("timing_inputs") or {}).get("target_step"),
            (new.get("timing_inputs") or {}).get("target_step"),
        )
        if isinstance(ta, (int, float)) and isinstance(tb, (int, float)):
            if abs(ta - tb) > allowed:
                d.same("timing_inputs.target_step", ta, tb)
        elif (ta is None) != (tb is None):
            d.same("timing_inputs.target_step (reached or not)", ta is None, tb is None)
    for k in ("bytes", "bytes_per_boundary", "eval_bytes", "wire_bytes_by_step"):
        d.counts(k, old.get(k), new.get(k))
    d.count("compressor_state_bytes", old.get("compressor_state_bytes"), new.get("compressor_state_bytes"))
    to, tn = old.get("timing_inputs") or {}, new.get("timing_inputs") or {}
    for k in TIMING_STRUCTURE:
        d.same(f"timing_inputs.{k}", to.get(k), tn.get(k))
    ca, cb = to.get("counts"), tn.get("counts")
    if isinstance(ca, list) and isinstance(cb, list):
        d.same("timing_inputs.counts total (steps)", sum(ca), sum(cb))
    elif exact:
        d.same("timing_inputs.counts", ca, cb)
    if exact:
        for k in TIMING_BYTES:
            d.same(f"timing_inputs.{k}", to.get(k), tn.get(k))
    return d.out


def compare_all(
    old: dict[str, Any],
    new: dict[str, Any],
    *,
    exact: bool,
    std: float = math.nan,
    why: str = "",
    field_std: Mapping[str, float] | None = None,
    same_seed: bool = True,
) -> tuple[str, str, list[str]]:
    """(status, one-line detail, every difference) of a re-run against a record."""
    if new.get("status") != "ok":
        return "rerun failed", "the re-run did not end ok", []
    exact = exact and same_seed
    tol = 0.0 if exact else K_SPREAD * math.sqrt(2) * std
    if not exact and not math.isfinite(tol):
        return "cannot verify", f"no trusted spread to compare with ({why})", []
    diffs = field_diffs(old, new, exact=exact, tol=tol, field_std=field_std, same_seed=same_seed)
    name = old.get("metric_name", "metric")
    if diffs:
        more = f" (+{len(diffs) - 1} more)" if len(diffs) > 1 else ""
        return "mismatch", diffs[0] + more + ("" if exact else f" ({why})"), diffs[:50]
    if exact:
        return "match", f"identical {name} {new.get('final_metric')!r}, bytes, curve, warnings and labels", []
    whose = "its own re-run" if same_seed else f"the re-run of seed {new.get('seed')}"
    return (
        "within spread",
        f"{name} recorded {old.get('final_metric')}, {whose} {new.get('final_metric')}: within {tol:.4f}; "
        f"bytes within {BYTES_RTOL:.0%}; curve within each point's spread ({why})",
        [],
    )


def compare(
    old: dict[str, Any], new: dict[str, Any], *, exact: bool, std: float = math.nan, why: str = "", **kw: Any
) -> tuple[str, str]:
    """(status, one-line detail) of :func:`compare_all`."""
    status, detail, _ = compare_all(old, new, exact=exact, std=std, why=why, **kw)
    return status, detail
