"""Measured next to modeled: what a run over a real (or emulated) link took, and what the network model predicts.

The one place the runtime asks the network model about a specific link (:func:`predict`), so a
new model (``suite.results.network``) is picked up here without touching the launchers.
``attach_link_times`` stores in ``result.network``:

- ``measured``: ``step_s`` (mean wall-clock per measured step, slowest rank), ``comm_s`` (the
  critical stage's time in or waiting on the transport) and ``compute_s`` over the link;
- ``modeled``: the model's ``step_s`` / ``comm_s_per_step`` / ``time_to_target_s`` from this run's
  own measured compute and wire bytes, for the link as emulated (its rate, **no latency**,
  since the emulation adds none) under ``as_emulated``, and for the named profile (its
  latency included) under ``profile`` when the link is a profile name.
"""

from __future__ import annotations

from typing import Any

from suite.results.network.model import model_run
from suite.results.network.profiles import INTRA_HOST, NetworkProfile
from suite.results.network.timing_inputs import TimingInputs

from .result import RunResult

__all__ = ["predict", "attach_link_times"]


def predict(
    timing_inputs: dict[str, Any], profiles: dict[str, NetworkProfile], reached_target_step: int | None
) -> dict[str, Any]:
    """The network model's per-profile prediction for a stored run (``RunResult.timing_inputs``)."""
    return model_run(TimingInputs.from_dict(timing_inputs), profiles, reached_target_step=reached_target_step)


def attach_link_times(result: RunResult, link_name: str, rate_bps: float, profile_latency_s: float = 0.0) -> RunResult:
    """Fill ``result.network['measured']`` and ``['modeled']`` (see the module docstring)."""
    t = result.time
    measured: dict[str, float | None] = {
        "step_s": t.step_s,
        "comm_s": t.comm_s,
        "compute_s": t.compute_s,
        "total_train_s": t.total_train_s,
    }
    if result.reached_target_step is not None:
        # measured training wall-clock until the evaluation that first met the target
        measured["time_to_target_s"] = next(
            (p.wall_s for p in result.curve if p.step == result.reached_target_step), None
        )
    # emulated hosts: the ranks of one host share a namespace, so their (tensor-parallel) traffic
    # goes over loopback, which the model takes as an ideal intra-host link
    loopback = INTRA_HOST["ideal"]
    profiles = {"as_emulated": NetworkProfile(link_name, rate_bps, 0.0, loopback)}
    if profile_latency_s:
        profiles["profile"] = NetworkProfile(link_name, rate_bps, profile_latency_s, loopback)
    modeled = predict(result.timing_inputs, profiles, result.reached_target_step) if result.timing_inputs else {}
    result.network["measured"] = measured
    result.network["modeled"] = modeled
    return result
