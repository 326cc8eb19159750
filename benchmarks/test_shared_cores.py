"""``shared_cores`` (the network model on one machine's shared cores) in closed form. Not a
speed benchmark: ``pytest benchmarks/test_shared_cores.py`` checks the tool the network check uses."""

from __future__ import annotations

import pytest
from shared_cores import step_s, step_time

from suite.results.network import IDEAL, PROTOCOLS, ActionCost, LinkLoad, StageCost, StepLoad, TimingInputs, model_run

PROTO = PROTOCOLS["length_prefix"]


def test_busy_processes_share_the_cores():
    a, b = StageCost({"W": ActionCost(compute_s=0.01)}), StageCost({"W": ActionCost(compute_s=0.03)})
    schedule, load = [["0W0"], ["1W0"]], StepLoad((LinkLoad(0.0, 0.0),))
    assert step_time(schedule, [a, b], load, 1, IDEAL, PROTO, cores=2, procs=1) == pytest.approx(0.03)
    # one core: both at half speed until the first is done (t = 0.02), then the second alone
    assert step_time(schedule, [a, b], load, 1, IDEAL, PROTO, cores=1, procs=1) == pytest.approx(0.04)
    # each pipeline rank two processes (tp = 2) on 2 cores: as one process each on one core
    assert step_time(schedule, [a, b], load, 1, IDEAL, PROTO, cores=2, procs=2) == pytest.approx(0.04)


def test_enough_cores_give_the_model_s_own_step():
    stage = StageCost({"F": ActionCost(compute_s=0.01), "B": ActionCost(compute_s=0.02)})
    ti = TimingInputs([["0F0", "0B0"]], [stage], [StepLoad(())], 1, 1, measurement={"processes": 4})
    assert step_s(ti, IDEAL, cores=4) == pytest.approx(model_run(ti, {"i": IDEAL})["i"]["step_s"])
    assert step_s(ti, IDEAL, cores=2) == pytest.approx(0.06)  # 4 processes on 2 cores: half speed
    assert step_s(ti.to_dict(), IDEAL, cores=2) == pytest.approx(0.06)
