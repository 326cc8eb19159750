"""The pipeline timing model (suite.results.network): profiles, bubble, monotonicity, a hand-computed case."""

from __future__ import annotations

import math

import pytest

from suite.results.network import (
    PROFILES,
    DPLoad,
    LinkLoad,
    NetworkProfile,
    StageCost,
    StepLoad,
    TimingInputs,
    dp_time,
    encode_steps,
    get_profile,
    model_run,
    pipeline_time,
    step_time,
)

FREE = NetworkProfile("free", math.inf, 0.0)


def test_profiles_cover_the_required_links_with_sane_latencies():
    for name in ("100Gbps", "10Gbps", "1Gbps", "100Mbps", "80Mbps"):
        p = PROFILES[name]
        assert p.name == name and p.bandwidth_bps > 0 and 0 < p.latency_s < 1
    bws = [p.bandwidth_bps for p in PROFILES.values()]
    lats = [p.latency_s for p in PROFILES.values()]
    assert bws == sorted(bws, reverse=True) and lats == sorted(lats)  # slower links are also farther away
    with pytest.raises(KeyError, match="valid profiles: 100Gbps"):
        get_profile("56k")


@pytest.mark.parametrize("stages,micro", [(2, 1), (2, 4), (4, 8), (3, 5)])
def test_uniform_stages_on_free_links_give_the_bubble_formula(stages, micro):
    tau = 0.01
    costs = [StageCost(compute_s=tau)] * stages
    links = [LinkLoad(1e6, 1e6)] * (stages - 1)
    assert pipeline_time(costs, links, micro, FREE) == pytest.approx((micro + stages - 1) * tau)


def test_hand_computed_case():
    # 2 stages: tau0 = 10 ms + 2 ms compression, tau1 = 20 ms; one link at 1 Mbit/s, 5 ms latency;
    # per micro-batch 1250 B forward (10 ms on the wire) and 2500 B backward (20 ms); M = 3.
    net = NetworkProfile("slow", 1e6, 0.005)
    costs = [StageCost(0.010, 0.002, optimizer_s=0.004), StageCost(0.020, 0.0, optimizer_s=0.001)]
    link = LinkLoad(1250, 2500)
    f, g = 0.005 + 0.010, 0.005 + 0.020
    expected_pipe = (0.012 + 0.020) + (f + g) + 2 * max(0.012, 0.020, max(f, g))
    assert expected_pipe == pytest.approx(0.032 + 0.040 + 0.050)
    assert pipeline_time(costs, [link], 3, net) == pytest.approx(expected_pipe)
    # + slowest optimizer; dp=2 all-reduce of 1000 B per replica in 1 op: 2*(1/2)*8000/1e6 + 2*1*0.005
    load = StepLoad((link,), (DPLoad(allreduce_bytes=1000, allreduce_ops=1), DPLoad()))
    assert dp_time(load.dp[0], 2, net) == pytest.approx(0.008 + 0.010)
    assert step_time(costs, load, 3, 2, net) == pytest.approx(expected_pipe + 0.004 + 0.018)


def test_all_gather_costs_more_than_all_reduce_of_the_same_payload():
    net = PROFILES["1Gbps"]
    for d in (2, 4, 8):
        ag = dp_time(DPLoad(allgather_bytes=1e6, allgather_ops=1), d, net)
        ar = dp_time(DPLoad(allreduce_bytes=1e6, allreduce_ops=1), d, net)
        assert ag == pytest.approx((d - 1) * (8e6 / 1e9 + net.latency_s))
        assert ar == pytest.approx(2 * (d - 1) / d * 8e6 / 1e9 + 2 * (d - 1) * net.latency_s)
    assert dp_time(DPLoad(allreduce_bytes=1e9, allreduce_ops=1), 1, net) == 0.0  # one replica: no traffic


def _inputs(bytes_per_mb: float, steps: int = 5, warmup: int = 0) -> TimingInputs:
    return TimingInputs(
        stages=[StageCost(0.004, 0.001, 0.002)] * 3,
        steps=[StepLoad((LinkLoad(bytes_per_mb, bytes_per_mb),) * 2, (DPLoad(),) * 3)] * steps,
        microbatches=4,
        replicas=1,
        warmup_steps=warmup,
    )


def test_modeled_time_is_monotone_in_bandwidth_and_bytes():
    out = model_run(_inputs(1e6))
    ordered = [out[n]["step_s"] for n in ("100Gbps", "10Gbps", "1Gbps", "100Mbps", "80Mbps")]
    assert ordered == sorted(ordered) and ordered[0] < ordered[-1]
    for bw in (1e12, 1e10, 1e8):
        a = NetworkProfile("a", bw, 1e-4)
        b = NetworkProfile("b", bw / 2, 1e-4)
        assert model_run(_inputs(1e5), {"a": a})["a"]["step_s"] < model_run(_inputs(1e5), {"b": b})["b"]["step_s"]
    small, big = model_run(_inputs(1e3)), model_run(_inputs(1e6))
    assert all(small[n]["step_s"] < big[n]["step_s"] for n in PROFILES)


def test_model_run_totals_time_to_target_and_comm_share():
    inp = _inputs(1e5, steps=6)
    out = model_run(inp, reached_target_step=4)
    for n, m in out.items():
        assert m["total_s"] == pytest.approx(6 * m["step_s"])
        assert m["time_to_target_s"] == pytest.approx(4 * m["step_s"])
        ideal = step_time(inp.stages, inp.steps[0], 4, 1, FREE)
        assert m["comm_s_per_step"] == pytest.approx(m["step_s"] - ideal) and m["comm_s_per_step"] > 0
    assert all(m["time_to_target_s"] is None for m in model_run(inp).values())


def test_warmup_steps_count_in_total_but_not_in_step_time():
    heavy = StepLoad((LinkLoad(1e7, 1e7),) * 2, (DPLoad(),) * 3)
    inp = _inputs(1e3, steps=4, warmup=1)
    inp.steps = [heavy] + inp.steps[1:]
    out = model_run(inp, {"1Gbps": PROFILES["1Gbps"]})["1Gbps"]
    steady = model_run(_inputs(1e3, steps=3), {"1Gbps": PROFILES["1Gbps"]})["1Gbps"]
    assert out["step_s"] == pytest.approx(steady["step_s"])
    assert out["total_s"] > 4 * out["step_s"]


def test_timing_inputs_round_trip():
    inp = _inputs(123.0, steps=2)
    again = TimingInputs.from_dict(inp.to_dict())
    assert again == inp
    assert model_run(again) == model_run(inp)


def test_step_loads_are_run_length_encoded_and_bounded():
    a, b = (StepLoad((LinkLoad(x, x),), (DPLoad(), DPLoad())) for x in (1e4, 1e3))
    loads, counts = encode_steps([a, a, b, b, b], warmup_steps=1)
    assert loads == [a, a, b] and counts == [1, 1, 3]  # the warm-up step stays its own run
    inp = TimingInputs([StageCost(0.01), StageCost(0.01)], loads, 4, 1, warmup_steps=1, counts=counts)
    raw = TimingInputs([StageCost(0.01), StageCost(0.01)], [a, a, b, b, b], 4, 1, warmup_steps=1)
    assert inp.n_steps == 5
    for reached in (None, 1, 2, 4, 5):
        enc, ref = model_run(inp, reached_target_step=reached), model_run(raw, reached_target_step=reached)
        for n in PROFILES:
            assert enc[n] == pytest.approx(ref[n])
    varying = [StepLoad((LinkLoad(float(i), float(i)),), ()) for i in range(1000)]
    loads, counts = encode_steps(varying, max_runs=10)
    assert len(loads) == 10 and sum(counts) == 1000
    assert loads[0].links[0].fwd_bytes == pytest.approx(sum(range(100)) / 100)
