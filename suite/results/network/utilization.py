"""What link a run needs: the bandwidth at which compute utilization reaches 50, 90 and 99 %.

Compute utilization over a link of bandwidth ``B`` is ``compute / (compute + exposed
communication)``: the modeled training time on an ideal network divided by the modeled time
over ``B`` (every step, so an outer loop's all-reduce every ``h`` steps counts once per ``h``
steps; communication the schedule hides behind compute is not exposed). It rises with ``B``,
so the bandwidth for a target is found by bisection in log space over the same simulation as
every modeled time (:func:`~.model.run_step_times`).

Two links are asked about separately, each with the other ideal and no latency (what bandwidth
alone buys):

- ``inter``: the link between hosts, carrying pipeline and data-parallel traffic;
- ``intra``: the link inside a host, carrying tensor-parallel traffic (tp > 1 only).

A run with no traffic on a link needs none (``0.0``); a target the run cannot reach at any
bandwidth up to ``MAX_BPS`` is ``None``. Pure Python.
"""

from __future__ import annotations

import math
from dataclasses import astuple, replace
from typing import Any, Mapping

from .model import run_step_times
from .profiles import INTRA_HOST, IntraHostLink, NetworkProfile
from .timing_inputs import StepLoad, TimingInputs, mean_load

__all__ = ["UTILIZATION_TARGETS", "MIN_BPS", "MAX_BPS", "utilization", "bandwidth_for", "bandwidths_for_utilization"]

UTILIZATION_TARGETS = (0.5, 0.9, 0.99)
MIN_BPS, MAX_BPS = 1e3, 1e14  # 1 kbit/s .. 100 Tbit/s
_STEPS = 40  # bisection steps in log10 space: (14 - 3) / 2**40, far below any figure shown


def _net(kind: str, bps: float) -> NetworkProfile:
    if kind == "inter":
        return NetworkProfile(f"{bps:.3g}bps", bps, 0.0, INTRA_HOST["ideal"])
    return NetworkProfile("ideal", math.inf, 0.0, IntraHostLink(f"{bps:.3g}bps", bps, 0.0))


def _total(inputs: TimingInputs, net: NetworkProfile, statistic: str) -> float:
    return sum(t * n for t, (_, n) in zip(run_step_times(inputs, net, statistic), inputs.runs()))


def condensed(inputs: TimingInputs) -> TimingInputs:
    """The same run with its steps grouped by which traffic they carry (e.g. an outer loop's
    synchronizing steps and the others), each group at its mean load: variable-size payloads
    (up to 256 distinct loads) cost a few simulations per bandwidth instead of hundreds, and only
    their step-to-step size variation is smoothed, as ``encode_steps`` does for long runs."""
    groups: dict[tuple[bool, ...], list[StepLoad]] = {}
    for load, n in inputs.runs():
        parts: list[Any] = [*load.links, *load.dp, *load.tp]
        sig = tuple(bool(v) for part in parts for v in astuple(part))
        groups.setdefault(sig, []).extend([load] * n)
    loads = [mean_load(g) for g in groups.values()]
    return replace(inputs, steps=loads, counts=[len(g) for g in groups.values()], warmup_steps=0)


def utilization(inputs: TimingInputs, bps: float, kind: str = "inter", statistic: str = "robust") -> float:
    """Compute utilization of the run over a ``kind`` link of ``bps`` bits per second."""
    ideal = _total(inputs, _net(kind, math.inf), statistic)
    total = _total(inputs, _net(kind, bps), statistic)
    return 1.0 if total <= 0 else min(1.0, ideal / total)


def _carries_traffic(inputs: TimingInputs, kind: str) -> bool:
    for load, _ in inputs.runs():
        if kind == "inter" and (
            any(l.fwd_bytes or l.bwd_bytes for l in load.links)
            or (inputs.replicas > 1 and any(d.allreduce_bytes or d.allgather_bytes for d in load.dp))
        ):
            return True
        if kind == "intra" and any(t.fwd_bytes or t.bwd_bytes for t in load.tp):
            return True
    return False


def bandwidth_for(inputs: TimingInputs, target: float, kind: str = "inter", statistic: str = "robust") -> float | None:
    """The least bandwidth (bit/s) of a ``kind`` link at which utilization reaches ``target``."""
    if not 0 < target < 1:
        raise ValueError(f"utilization target {target!r} must be in (0, 1)")
    if not _carries_traffic(inputs, kind):
        return 0.0
    ideal = _total(inputs, _net(kind, math.inf), statistic)

    def reached(bps: float) -> bool:
        return ideal >= target * _total(inputs, _net(kind, bps), statistic)

    if not reached(MAX_BPS):
        return None
    lo, hi = math.log10(MIN_BPS), math.log10(MAX_BPS)
    if reached(MIN_BPS):
        return MIN_BPS
    for _ in range(_STEPS):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if reached(10**mid) else (mid, hi)
    return 10**hi


def bandwidths_for_utilization(
    inputs: TimingInputs | Mapping, targets: tuple[float, ...] = UTILIZATION_TARGETS, statistic: str = "robust"
) -> dict[str, dict[str, float | None]]:
    """``{"inter": {"50": bps, "90": bps, "99": bps}, "intra": {...}}`` (``intra`` only with tensor
    parallel traffic); keys are the targets in percent."""
    if not isinstance(inputs, TimingInputs):
        inputs = TimingInputs.from_dict(inputs)
    inputs = condensed(inputs)
    kinds = ["inter"] + (["intra"] if _carries_traffic(inputs, "intra") else [])
    return {k: {f"{round(t * 100):d}": bandwidth_for(inputs, t, k, statistic) for t in targets} for k in kinds}
