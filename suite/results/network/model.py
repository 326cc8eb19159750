"""Modeled times of a stored run over a network profile: what records and the leaderboard show.

Every step of the run is simulated (:mod:`.simulation`) over its stored inputs
(:mod:`.timing_inputs`); equal consecutive steps are simulated once. Pure Python.
"""

from __future__ import annotations

from typing import Any, Mapping

from .profiles import IDEAL, PROFILES, NetworkProfile
from .simulation import step_time
from .timing_inputs import StepLoad, TimingInputs

__all__ = ["MODEL_VERSION", "MAX_MODEL_COST", "model_cost", "run_step_times", "model_run", "model_record"]

# Which model computed a record's ``modeled`` times (stored next to them as ``model_version``);
# bump it when the same inputs give other times. 1: closed form; 2: the simulation with one
# link per pair of ranks; 3: ranks' NICs shared by their concurrent messages and reductions.
# The leaderboard re-models records of an older model, so one board never mixes two models.
MODEL_VERSION = 3


# The most simulation work (:func:`model_cost`) one stored run may ask of a reader: the committed
# baselines need at most ~41,000 (256 distinct steps x 32 actions x 5 profiles, ~0.8 s here at load
# 1); untrusted inputs above this are not modeled at all (a record of 10 such runs cost 117 s).
MAX_MODEL_COST = 400_000


def model_cost(inputs: TimingInputs, n_profiles: int) -> int:
    """An upper bound of the simulation work of :func:`model_run` over ``n_profiles`` profiles
    (+1: the ideal network): distinct step loads x actions of the schedule x networks."""
    actions = sum(len(rank) for rank in inputs.schedule)
    return len(set(inputs.steps)) * max(1, actions) * (n_profiles + 1)


def run_step_times(inputs: TimingInputs, net: NetworkProfile, statistic: str = "robust") -> list[float]:
    """Modeled seconds of one step of each run of equal steps (``inputs.runs()``), over ``net``."""
    if statistic not in ("robust", "mean"):
        raise ValueError(f"statistic {statistic!r}: valid values are robust, mean")
    stages = inputs.mean_stages if statistic == "mean" and inputs.mean_stages else inputs.stages
    cache: dict[StepLoad, float] = {}
    out = []
    for load, _ in inputs.runs():
        if load not in cache:
            cache[load] = step_time(inputs.schedule, stages, load, inputs.replicas, net, inputs.protocol)
        out.append(cache[load])
    return out


def model_run(
    inputs: TimingInputs,
    profiles: Mapping[str, NetworkProfile] | None = None,
    reached_target_step: float | None = None,
    statistic: str = "robust",
) -> dict[str, dict[str, float | None]]:
    """Per profile: ``step_s`` (mean modeled step after the uncompressed warm-up),
    ``total_s`` (all steps), ``time_to_target_s`` (the steps before the target was first met,
    ``reached_target_step`` or else ``inputs.target_step``; None if never) and
    ``comm_s_per_step`` (step_s minus the same on an ideal network). ``statistic``:
    ``robust`` (low-quantile action costs) or ``mean``."""
    profiles = PROFILES if profiles is None else profiles
    reached = inputs.target_step if reached_target_step is None else reached_target_step
    runs = inputs.runs()
    total_steps = sum(c for _, c in runs)
    warm = inputs.warmup_steps if inputs.warmup_steps < total_steps else 0
    ideal = run_step_times(inputs, IDEAL, statistic)
    out: dict[str, dict[str, float | None]] = {}
    for name, net in profiles.items():
        steady_s = steady_comm = 0.0
        done = total = 0.0
        ttt = None
        for (_load, count), t, t0 in zip(runs, run_step_times(inputs, net, statistic), ideal):
            # steps [done, done + count) of this run; the warm-up ones don't count for step_s
            steady = max(0, min(count, done + count - warm))
            steady_s += steady * t
            steady_comm += steady * (t - t0)
            if reached is not None and ttt is None and done + count >= reached:
                ttt = total + (reached - done) * t
            total += count * t
            done += count
        n = max(1, total_steps - warm)
        out[name] = {
            "step_s": steady_s / n,
            "total_s": total,
            "time_to_target_s": ttt,
            "comm_s_per_step": steady_comm / n,
        }
    return out


def model_record(
    inputs: TimingInputs | Mapping[str, Any], profile: NetworkProfile, statistic: str = "robust"
) -> dict[str, float | None]:
    """Modeled times of one stored run (``record["timing_inputs"]`` or a TimingInputs) over
    ``profile``: ``step_s``, ``total_s``, ``time_to_target_s``, ``comm_s_per_step``. Pure:
    the same inputs and profile always give the same numbers."""
    if not isinstance(inputs, TimingInputs):
        inputs = TimingInputs.from_dict(inputs)
    return model_run(inputs, {profile.name: profile}, statistic=statistic)[profile.name]
