"""The pipeline time model (suite.results.network): a discrete-event simulation of the
executed action lists with receiver-posted sends, per-direction links and ring collectives."""

from __future__ import annotations

import math

import pytest

from suite.results.network import (
    IDEAL,
    PROFILES,
    PROTOCOLS,
    ActionCost,
    DPLoad,
    LinkLoad,
    NetworkProfile,
    StageCost,
    StepLoad,
    TimingInputs,
    dp_time,
    encode_steps,
    get_profile,
    interpolate_target_step,
    model_record,
    model_run,
    quantile,
    simulate_step,
    step_time,
)
from suite.schedules import build_schedule


def _schedule(name: str, stages: int, micro: int) -> list[list[str]]:
    """The runtime's own action lists, as the trainer stores them."""
    return build_schedule(name, stages, micro).to_lists()


def _stage(fwd: float, bwd: float, pre: float = 0.0, post: float = 0.0, opt: float = 0.0) -> StageCost:
    return StageCost({"F": ActionCost(pre, fwd, post), "B": ActionCost(pre, bwd, post)}, opt)


def test_profiles_cover_the_required_links_with_sane_latencies():
    for name in ("100Gbps", "10Gbps", "1Gbps", "100Mbps", "80Mbps"):
        p = PROFILES[name]
        assert p.name == name and p.bandwidth_bps > 0 and 0 < p.latency_s < 1
    bws = [p.bandwidth_bps for p in PROFILES.values()]
    lats = [p.latency_s for p in PROFILES.values()]
    assert bws == sorted(bws, reverse=True) and lats == sorted(lats)  # slower links are also farther away
    with pytest.raises(KeyError, match="valid profiles: 100Gbps"):
        get_profile("56k")


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("stages,micro", [(2, 1), (2, 4), (4, 8), (3, 5)])
def test_uniform_stages_on_an_ideal_network_give_the_bubble_formula(schedule, stages, micro):
    fwd, bwd = 0.01, 0.02
    ends = simulate_step(
        _schedule(schedule, stages, micro),
        [_stage(fwd, bwd)] * stages,
        StepLoad((LinkLoad(1e6, 1e6),) * (stages - 1)),
        IDEAL,
    )
    assert max(ends) == pytest.approx((micro + stages - 1) * (fwd + bwd))


def test_hand_computed_rendezvous_with_a_length_prefix():
    # 2 stages, 1 micro-batch; 1 Mbit/s, L = 5 ms. The forward payload is 1258 bytes: an 8-byte
    # prefix (64 us on the wire), then 1250 bytes (10 ms). Stage 1 posts the prefix's receive at
    # t = 0; its notice reaches stage 0 at L, before stage 0 finishes F0 at 20 ms. Then:
    #   prefix leaves at 20 ms, arrives 20 + 0.064 + 5; stage 1 posts the body's receive, the notice
    #   takes L back, the body leaves at 30.064 and arrives 30.064 + 10 + 5 = 45.064 ms.
    # Stage 1 runs F0 + B0 (30 + 40 ms) -> 115.064 ms and sends its 8 + 2500 byte gradient; stage 0
    # posted that receive when B0 started (20 ms), so the prefix leaves at once: arrives +0.064 + 5,
    # the body's notice + L, the body 20 ms + L -> 115.064 + 35.064; then stage 0's B0 (20 ms).
    net = NetworkProfile("slow", 1e6, 0.005)
    stages = [_stage(0.020, 0.020, opt=0.004), _stage(0.030, 0.040, opt=0.001)]
    load = StepLoad((LinkLoad(1258, 2508),), (DPLoad(), DPLoad()))
    sched = _schedule("1f1b", 2, 1)
    ends = simulate_step(sched, stages, load, net, PROTOCOLS["length_prefix"])
    assert ends[1] == pytest.approx(0.045064 + 0.070)
    assert ends[0] == pytest.approx(0.115064 + 0.035064 + 0.020)
    # one message whose receive was posted early costs exactly latency + bytes / bandwidth
    one = simulate_step(sched, stages, StepLoad((LinkLoad(1250, 2500),)), net, PROTOCOLS["single"])
    assert one[1] == pytest.approx(0.020 + 0.015 + 0.070) and one[0] == pytest.approx(one[1] + 0.025 + 0.020)
    # + slowest stage's optimizer; dp = 2 all-reduce of 1000 B per replica: 2*(1/2)*8000/1e6 + 2*1*0.005
    dp_load = StepLoad(load.links, (DPLoad(allreduce_bytes=1000, allreduce_ops=1), DPLoad()))
    assert dp_time(dp_load.dp[0], 2, net) == pytest.approx(0.008 + 0.010)
    assert step_time(sched, stages, dp_load, 2, net) == pytest.approx(ends[0] + 0.018 + 0.004)


def test_a_late_receiver_delays_the_send_and_links_carry_one_message_at_a_time():
    net = NetworkProfile("n", 8e6, 0.0)  # 1 byte per us
    # GPipe: stage 0 sends F0, F1 back to back (1 ms each on the wire, no compute); stage 1 needs 5 ms per
    # forward, so it posts F1's receive at 5 ms: F1 leaves then, not when it was sent.
    stages = [_stage(0.0, 0.0), _stage(0.005, 0.0)]
    load = StepLoad((LinkLoad(1000, 0),))
    ends = simulate_step([["0F0", "0F1"], ["1F0", "1F1"]], stages, load, net, PROTOCOLS["single"])
    assert ends[1] == pytest.approx(0.001 + 0.005 + 0.001 + 0.005)
    # posting ahead lets F1 cross during F0's compute, but only after F0 left the link
    ahead = simulate_step([["0F0", "0F1"], ["1F0", "1F1"]], stages, load, net, PROTOCOLS["preposted"])
    assert ahead[1] == pytest.approx(0.001 + 0.005 + 0.005)
    both = simulate_step(
        [["0F0", "0F1"], ["1F0", "1F1"]], [_stage(0, 0), _stage(0, 0)], load, net, PROTOCOLS["preposted"]
    )
    assert both[1] == pytest.approx(0.002)  # two messages serialized on one direction


def test_messages_on_the_wire_at_once_share_a_nic_and_the_two_directions_do_not():
    net = NetworkProfile("n", 8e6, 0.0)  # 1 byte per us: a 1000-byte message alone takes 1 ms
    zero = StageCost({"F": ActionCost(0, 0, 0), "B": ActionCost(0, 0, 0)}, 0)
    ahead = PROTOCOLS["preposted"]  # every receive posted at once, so the messages overlap
    # two stages sending to each other at once: full duplex, both arrive after 1 ms
    pair = simulate_step([["0F0", "0B1"], ["1B1", "1F0"]], [zero] * 2, StepLoad((LinkLoad(1000, 1000),)), net, ahead)
    assert pair == pytest.approx([0.001, 0.001])
    # the middle stage of three receives F0 from stage 0 and B1 from stage 2 at once (its NIC's
    # way in, half the rate each: both land at 2 ms), then sends F0 on and B1 back at once
    # (its way out, half the rate each: both land at 4 ms); alone, each would take 1 ms
    load = StepLoad((LinkLoad(1000, 1000), LinkLoad(1000, 1000)))
    ends = simulate_step([["0F0", "0B1"], ["1F0", "1B1"], ["2B1", "2F0"]], [zero] * 3, load, net, ahead)
    assert ends == pytest.approx([0.004, 0.002, 0.004])


def test_protocols_order_and_monotonicity():
    sched = _schedule("1f1b", 4, 8)
    stages = [_stage(0.004, 0.008, 0.0005, 0.0005, 0.002)] * 4
    for bw in (1e9, 1e8, 2e7):
        net = NetworkProfile("n", bw, 2e-3)
        load = StepLoad((LinkLoad(2e5, 2e5),) * 3)
        t = {p: step_time(sched, stages, load, 1, net, PROTOCOLS[p]) for p in ("length_prefix", "single", "preposted")}
        assert t["preposted"] <= t["single"] <= t["length_prefix"]
        slower = step_time(sched, stages, load, 1, NetworkProfile("m", bw / 2, 2e-3))
        bigger = step_time(sched, stages, StepLoad((LinkLoad(4e5, 4e5),) * 3), 1, net)
        assert slower > t["length_prefix"] and bigger > t["length_prefix"]


def test_an_impossible_schedule_is_reported_not_hung():
    with pytest.raises(ValueError, match="deadlocks"):
        simulate_step([["0B0", "0F0"], ["1F0", "1B0"]], [_stage(0.01, 0.01)] * 2, StepLoad((LinkLoad(1, 1),)), IDEAL)
    with pytest.raises(ValueError, match="STAGE KIND MICROBATCH"):
        simulate_step([["forward"], ["1F0"]], [_stage(0.01, 0.01)] * 2, StepLoad((LinkLoad(1, 1),)), IDEAL)


def test_all_gather_costs_more_than_all_reduce_of_the_same_payload():
    net = PROFILES["1Gbps"]
    for d in (2, 4, 8):
        ag = dp_time(DPLoad(allgather_bytes=1e6, allgather_ops=1), d, net)
        ar = dp_time(DPLoad(allreduce_bytes=1e6, allreduce_ops=1), d, net)
        assert ag == pytest.approx((d - 1) * (8e6 / 1e9 + net.latency_s))
        assert ar == pytest.approx(2 * (d - 1) / d * 8e6 / 1e9 + 2 * (d - 1) * net.latency_s)
    assert dp_time(DPLoad(allreduce_bytes=1e9, allreduce_ops=1), 1, net) == 0.0  # one replica: no traffic


@pytest.mark.parametrize("d", [2, 3, 8])
@pytest.mark.parametrize("ops", [1, 3])
def test_a_reduction_alone_on_the_wire_costs_the_ring_formula(d, ops):
    net = PROFILES["100Mbps"]
    one = _stage(0.0, 0.0, opt=0.004)  # one stage: nothing else on the wire
    dp = DPLoad(allreduce_bytes=2e6, allreduce_ops=ops, allgather_bytes=1e5, allgather_ops=1)
    t = step_time([["0F0", "0B0"]], [one], StepLoad((), (dp,)), d, net)
    assert t == pytest.approx(dp_time(dp, d, net) + 0.004)


def test_a_reduction_shares_the_nic_with_the_last_gradient_still_on_the_wire():
    net = NetworkProfile("n", 8e6, 0.0)  # 1 byte per us
    zero = _stage(0.0, 0.0)
    # stage 1 sends B0's 1000-byte gradient back and starts its all-reduce (2 replicas: two ring
    # steps of 1000 bytes) at the same moment: the two share its NIC's way out, so both first
    # messages take 2 ms, then the second ring step 1 ms alone. The closed form said 2 ms.
    load = StepLoad((LinkLoad(0, 1000),), (DPLoad(), DPLoad(allreduce_bytes=2000, allreduce_ops=1)))
    assert step_time([["0F0", "0B0"], ["1F0", "1B0"]], [zero, zero], load, 2, net, PROTOCOLS["single"]) == (
        pytest.approx(0.003)
    )
    assert dp_time(load.dp[1], 2, net) == pytest.approx(0.002)


def _inputs(bytes_per_mb: float, steps: int = 5, warmup: int = 0) -> TimingInputs:
    return TimingInputs(
        schedule=_schedule("1f1b", 3, 4),
        stages=[_stage(0.002, 0.004, 0.0005, 0.0005, 0.002)] * 3,
        steps=[StepLoad((LinkLoad(bytes_per_mb, bytes_per_mb),) * 2, (DPLoad(),) * 3)] * steps,
        microbatches=4,
        replicas=1,
        mean_stages=[_stage(0.003, 0.006, 0.0005, 0.0005, 0.002)] * 3,
        warmup_steps=warmup,
    )


def test_modeled_time_is_monotone_in_bandwidth_and_bytes():
    out = model_run(_inputs(1e6))
    ordered = [out[n]["step_s"] for n in ("100Gbps", "10Gbps", "1Gbps", "100Mbps", "80Mbps")]
    assert ordered == sorted(ordered) and ordered[0] < ordered[-1]
    small, big = model_run(_inputs(1e3)), model_run(_inputs(1e6))
    assert all(small[n]["step_s"] < big[n]["step_s"] for n in PROFILES)


def test_model_run_totals_time_to_target_comm_share_and_statistic():
    inp = _inputs(1e5, steps=6)
    out = model_run(inp, reached_target_step=4.5)
    for _n, m in out.items():
        assert m["total_s"] == pytest.approx(6 * m["step_s"])
        assert m["time_to_target_s"] == pytest.approx(4.5 * m["step_s"])
        ideal = step_time(inp.schedule, inp.stages, inp.steps[0], 1, IDEAL)
        assert m["comm_s_per_step"] == pytest.approx(m["step_s"] - ideal) and m["comm_s_per_step"] > 0
    assert all(m["time_to_target_s"] is None for m in model_run(inp).values())
    inp.target_step = 2.0
    assert model_record(inp, PROFILES["1Gbps"])["time_to_target_s"] == pytest.approx(2 * out["1Gbps"]["step_s"])
    assert model_record(inp, IDEAL, "mean")["step_s"] == pytest.approx(
        6 * (0.003 + 0.006 + 4 * 0.0005) + 0.002
    )  # (M + S - 1) slots
    with pytest.raises(ValueError, match="valid values are robust, mean"):
        model_run(inp, statistic="median")


def test_warmup_steps_count_in_total_but_not_in_step_time():
    heavy = StepLoad((LinkLoad(1e7, 1e7),) * 2, (DPLoad(),) * 3)
    inp = _inputs(1e3, steps=4, warmup=1)
    inp.steps = [heavy] + inp.steps[1:]
    out = model_run(inp, {"1Gbps": PROFILES["1Gbps"]})["1Gbps"]
    steady = model_run(_inputs(1e3, steps=3), {"1Gbps": PROFILES["1Gbps"]})["1Gbps"]
    assert out["step_s"] == pytest.approx(steady["step_s"])
    assert out["total_s"] > 4 * out["step_s"]


def test_timing_inputs_round_trip_and_model_record_takes_a_stored_dict():
    inp = _inputs(123.0, steps=2)
    inp.target_step, inp.measurement = 1.5, {"loadavg": [0.5, 1.0], "contended": False}
    d = inp.to_dict()
    again = TimingInputs.from_dict(d)
    assert again == inp and d["version"] == 2
    assert model_run(again) == model_run(inp)
    assert model_record(d, PROFILES["100Mbps"]) == model_run(inp, {"100Mbps": PROFILES["100Mbps"]})["100Mbps"]


def test_version_1_inputs_are_converted():
    v1 = {
        "stages": [{"compute_s": 0.03, "compress_s": 0.004, "optimizer_s": 0.001}] * 2,
        "steps": [
            {"links": [{"fwd_bytes": 1e5, "bwd_bytes": 1e5, "fwd_messages": 1, "bwd_messages": 1}], "dp": [{}, {}]}
        ],
        "microbatches": 4,
        "replicas": 1,
        "counts": [10],
    }
    inp = TimingInputs.from_dict(v1)
    assert inp.schedule == _schedule("1f1b", 2, 4) and inp.extra["converted_from_v1"]
    assert inp.stages[0].of("F").busy_s + inp.stages[0].of("B").busy_s == pytest.approx(0.034)
    assert model_record(v1, IDEAL)["step_s"] == pytest.approx(5 * 0.034 + 0.001)
    # the action lists come from the schedule registry (suite.schedules), as the runtime's do
    assert TimingInputs.from_dict({**v1, "extra": {"schedule": "gpipe"}}).schedule == _schedule("gpipe", 2, 4)
    for other in ("interleaved_1f1b", "no-such-schedule"):  # v1 ran one stage per rank: the default
        assert TimingInputs.from_dict({**v1, "extra": {"schedule": other}}).schedule == _schedule("1f1b", 2, 4)


def test_step_loads_are_run_length_encoded_and_bounded():
    a, b = (StepLoad((LinkLoad(x, x),), (DPLoad(), DPLoad())) for x in (1e4, 1e3))
    loads, counts = encode_steps([a, a, b, b, b], warmup_steps=1)
    assert loads == [a, a, b] and counts == [1, 1, 3]  # the warm-up step stays its own run
    sched, st = _schedule("gpipe", 2, 4), [_stage(0.01, 0.01)] * 2
    inp = TimingInputs(sched, st, loads, 4, 1, warmup_steps=1, counts=counts)
    raw = TimingInputs(sched, st, [a, a, b, b, b], 4, 1, warmup_steps=1)
    assert inp.n_steps == 5
    for reached in (None, 1, 2, 4, 5):
        enc, ref = model_run(inp, reached_target_step=reached), model_run(raw, reached_target_step=reached)
        for n in PROFILES:
            assert enc[n] == pytest.approx(ref[n])
    varying = [StepLoad((LinkLoad(float(i), float(i)),), ()) for i in range(1000)]
    loads, counts = encode_steps(varying, max_runs=10)
    assert len(loads) == 10 and sum(counts) == 1000
    assert loads[0].links[0].fwd_bytes == pytest.approx(sum(range(100)) / 100)


def test_time_to_target_is_interpolated_between_evaluations():
    curve = [(30, 0.40), (60, 0.55), (90, 0.70)]
    assert interpolate_target_step(curve, 0.60, True) == pytest.approx(70.0)
    assert interpolate_target_step(curve, 0.40, True) == 30.0  # met at the first evaluation
    assert interpolate_target_step(curve, 0.90, True) is None
    assert interpolate_target_step([(10, 2.0), (20, 1.0)], 1.5, False) == pytest.approx(15.0)
    assert interpolate_target_step([(10, math.nan), (20, 1.0)], 1.5, False) == 20.0


def test_quantile():
    assert quantile([], 0.3) == 0.0 and quantile([2.0], 0.9) == 2.0
    assert quantile([4.0, 1.0, 3.0, 2.0], 0.0) == 1.0 and quantile([4.0, 1.0, 3.0, 2.0], 1.0) == 4.0
    assert quantile([1.0, 2.0, 3.0, 4.0, 5.0], 0.25) == 2.0


def test_interleaved_schedules_run_two_stages_per_rank_and_shrink_the_bubble():
    fwd, bwd, M = 0.01, 0.02, 4
    chunks = _schedule("interleaved_1f1b", 4, M)  # 4 stages (chunks of half a rank's model) on 2 ranks
    assert len(chunks) == 2
    plain = _schedule("1f1b", 2, M)  # the same model as 2 stages of twice the cost
    links4, links2 = StepLoad((LinkLoad(1e5, 1e5),) * 3), StepLoad((LinkLoad(1e5, 1e5),))
    t_chunks = max(simulate_step(chunks, [_stage(fwd / 2, bwd / 2)] * 4, links4, IDEAL))
    t_plain = max(simulate_step(plain, [_stage(fwd, bwd)] * 2, links2, IDEAL))
    assert M * (fwd + bwd) <= t_chunks < t_plain == pytest.approx((M + 1) * (fwd + bwd))
    # on a slow link the interleaved schedule pays for its twice as many messages
    slow = NetworkProfile("slow", 1e7, 0.01)
    assert max(simulate_step(chunks, [_stage(fwd / 2, bwd / 2)] * 4, links4, slow)) > max(
        simulate_step(plain, [_stage(fwd, bwd)] * 2, links2, slow)
    )


@pytest.mark.parametrize("d", [1, 2, 4])
def test_ring_steps_are_the_closed_form_step_by_step(d):
    from suite.results.network.ring import ring_steps

    dp = DPLoad(allreduce_bytes=4e6, allreduce_ops=2, allgather_bytes=1e6, allgather_ops=1)
    steps = ring_steps(dp, d)
    assert len(steps) == (0 if d == 1 else 2 * 2 * (d - 1) + (d - 1))  # 2 ops x 2(d-1) + 1 op x (d-1)
    net = NetworkProfile("n", 8e6, 0.0)  # 1 byte per us, no latency: time = bytes
    assert sum(net.serialize_s(b) for b in steps) == pytest.approx(dp_time(dp, d, net))
