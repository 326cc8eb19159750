"""Bandwidth for 50/90/99 % compute utilization (suite.results.network.utilization): closed forms."""

from __future__ import annotations

import pytest

from suite.results.network import ActionCost, DPLoad, LinkLoad, StageCost, StepLoad, TimingInputs
from suite.results.network.utilization import bandwidth_for, bandwidths_for_utilization, condensed, utilization

COMPUTE_S = 0.3  # F 0.1 + B 0.2 on one stage
N = 1e6  # bytes each replica all-reduces on a synchronizing step


def _dp_run(h: int, replicas: int = 2) -> TimingInputs:
    """One stage, ``replicas`` replicas, an all-reduce of N bytes every ``h`` steps (h = 1: every step)."""
    stage = StageCost({"F": ActionCost(0, 0.1, 0), "B": ActionCost(0, 0.2, 0)})
    quiet = StepLoad((), (DPLoad(),))
    sync = StepLoad((), (DPLoad(allreduce_bytes=N, allreduce_ops=1),))
    steps, counts = ([sync], [1]) if h == 1 else ([quiet, sync], [h - 1, 1])
    return TimingInputs([["0F0", "0B0"]], [stage], steps, microbatches=1, replicas=replicas, counts=counts)


@pytest.mark.parametrize("h", [1, 10])
@pytest.mark.parametrize("u", [0.5, 0.9, 0.99])
def test_ring_all_reduce_every_h_steps_closed_form(h, u):
    # ring over 2 replicas: 2 (d-1)/d * 8N / B exposed once per h steps, after h steps of compute
    want = 8 * N * u / (h * COMPUTE_S * (1 - u))
    got = bandwidth_for(_dp_run(h), u)
    assert got == pytest.approx(want, rel=1e-6)
    assert utilization(_dp_run(h), want) == pytest.approx(u, rel=1e-6)


def test_no_traffic_needs_no_link_and_one_replica_sends_nothing():
    assert bandwidths_for_utilization(_dp_run(1, replicas=1)) == {"inter": {"50": 0.0, "90": 0.0, "99": 0.0}}


def test_pipeline_links_count_and_condensing_keeps_the_sync_steps_apart():
    stage = StageCost({"F": ActionCost(0, 0.1, 0), "B": ActionCost(0, 0.1, 0)})
    loads = [StepLoad((LinkLoad(1000.0 + i, 1000.0 - i),), (DPLoad(), DPLoad())) for i in range(5)]
    loads.append(StepLoad((LinkLoad(1000.0, 1000.0),), (DPLoad(allreduce_bytes=N, allreduce_ops=1), DPLoad())))
    ti = TimingInputs([["0F0", "0B0"], ["1F0", "1B0"]], [stage, stage], loads, microbatches=1, replicas=2)
    c = condensed(ti)
    assert c.counts == [5, 1] and c.steps[0].links[0].fwd_bytes == pytest.approx(1002.0)
    b = bandwidths_for_utilization(ti)["inter"]
    assert 0 < b["50"] < b["90"] < b["99"]
