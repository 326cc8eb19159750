"""The network model's tensor-parallel term (issue 25): every F / B action of a stage waits
for its TP all-reduces over the intra-host link, in closed form for one stage."""

from __future__ import annotations

import math

import pytest

from suite.results.network import (
    INTRA_HOST,
    PROFILES,
    ActionCost,
    StageCost,
    StepLoad,
    TimingInputs,
    TPLoad,
    simulate_step,
    with_intra,
)


@pytest.mark.parametrize("intra", ["nvlink", "pcie", "ideal"])
def test_tp_allreduces_add_their_intra_host_time_to_each_action(intra):
    net = with_intra(PROFILES["1Gbps"], intra)
    stage = StageCost({"F": ActionCost(compute_s=0.01), "B": ActionCost(compute_s=0.02)})
    tp = TPLoad(fwd_bytes=4e6, bwd_bytes=8e6, fwd_messages=4, bwd_messages=6)
    schedule = [["0F0", "0F1", "0B0", "0B1"]]
    base = simulate_step(schedule, [stage], StepLoad(()), net)[0]
    with_tp = simulate_step(schedule, [stage], StepLoad((), (), (tp,)), net)[0]
    link = INTRA_HOST[intra]
    per_step = 2 * (link.serialize_s(4e6) + 4 * link.latency_s) + 2 * (link.serialize_s(8e6) + 6 * link.latency_s)
    assert math.isclose(with_tp - base, per_step, rel_tol=1e-9, abs_tol=1e-15)
    assert base == pytest.approx(0.06)


def test_tp_loads_round_trip_and_old_inputs_read_without_them():
    stage = StageCost({"F": ActionCost(compute_s=0.01)})
    ti = TimingInputs([["0F0"]], [stage], [StepLoad((), (), (TPLoad(1.0, 2.0, 3.0, 4.0),))], 1, 1)
    assert TimingInputs.from_dict(ti.to_dict()).steps[0].tp == (TPLoad(1.0, 2.0, 3.0, 4.0),)
    d = ti.to_dict()
    del d["steps"][0]["tp"]  # a record from before tensor parallelism
    assert TimingInputs.from_dict(d).steps[0].tp == ()
    assert PROFILES["1Gbps"].intra.name == "nvlink"
    with pytest.raises(KeyError, match="valid: nvlink, pcie, ideal"):
        with_intra(PROFILES["1Gbps"], "infiniband")
