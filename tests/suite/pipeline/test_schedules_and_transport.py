"""Schedules (action lists) and the framed transport with its byte meter."""

from __future__ import annotations

import math

import pytest
import torch

from suite.pipeline.accounting import ByteMeter
from suite.pipeline.transport import PREFIX_NBYTES, LocalTransport, TransportError, frame, frame_nbytes, unframe
from suite.schedules import (
    SCHEDULES,
    Action,
    Kind,
    Schedule,
    build_schedule,
    check_schedule,
    get_schedule,
    gpipe,
    one_f_one_b,
)

F, B, I, W = Kind.FORWARD, Kind.FULL_BACKWARD, Kind.BACKWARD_INPUT, Kind.BACKWARD_WEIGHT


# --------------------------------------------------------------------------- schedules
@pytest.mark.parametrize("name", ["gpipe", "1f1b"])
@pytest.mark.parametrize("stages,micro", [(1, 1), (2, 4), (4, 4), (4, 2), (3, 7)])
def test_schedules_are_valid(name, stages, micro):
    acts = get_schedule(name, stages, micro)
    assert len(acts) == stages
    check_schedule(build_schedule(name, stages, micro))
    for s, rank in enumerate(acts):  # one stage per rank; every micro-batch forwarded and backpropagated in order
        assert {a.stage for a in rank} == {s}
        for kind in (F, B):
            assert [a.microbatch for a in rank if a.kind == kind] == list(range(micro))


def test_1f1b_bounds_activations_in_flight_and_gpipe_does_not():
    S, M = 4, 8
    for s, acts in enumerate(one_f_one_b(S, M)):
        live = peak = 0
        for a in acts:
            live += 1 if a.kind == F else -1
            peak = max(peak, live)
        assert peak == min(S - s, M)
    assert one_f_one_b(2, 3)[0] == [Action(0, k, m) for k, m in ((F, 0), (F, 1), (B, 0), (F, 2), (B, 1), (B, 2))]
    assert gpipe(2, 2)[1] == [Action(1, F, 0), Action(1, F, 1), Action(1, B, 0), Action(1, B, 1)]
    # the schedules module docstring's example
    assert repr(build_schedule("1f1b", 2, 2).ranks) == "((0F0, 0F1, 0B0, 0B1), (1F0, 1B0, 1F1, 1B1))"


@pytest.mark.parametrize("stages,micro", [(4, 2), (4, 4), (4, 8), (6, 3), (6, 6), (8, 4), (8, 12)])
def test_interleaved_1f1b_runs_two_chunks_per_rank(stages, micro):
    sched = build_schedule("interleaved_1f1b", stages, micro)
    P = stages // 2
    assert sched.n_ranks == P and SCHEDULES["interleaved_1f1b"].chunks == 2
    for r, acts in enumerate(sched.ranks):
        assert {a.stage for a in acts} == {r, r + P} == set(sched.stages_of(r))
        for s in (r, r + P):  # each chunk backpropagates micro-batches in order (same gradient sums as unsplit)
            assert [a.microbatch for a in acts if a.stage == s and a.kind == B] == list(range(micro))
    if P == 2 and micro >= 4:  # rank 0 of 2: P micro-batches through chunk 0, then chunk 1 (stage 2), then 1F1B
        assert [repr(a) for a in sched.ranks[0][:6]] == ["0F0", "0F1", "2F0", "2F1", "0F2", "2B0"]
    # peak activations alive on a rank stay below GPipe's M per chunk
    for acts in sched.ranks:
        live = peak = 0
        for a in acts:
            live += 1 if a.kind == F else -1
            peak = max(peak, live)
        assert peak <= min(2 * micro, 3 * P)


def test_schedule_layout_errors_name_the_fix():
    with pytest.raises(ValueError, match="valid schedules: gpipe, 1f1b, interleaved_1f1b"):
        get_schedule("interleaved", 2, 2)
    with pytest.raises(ValueError, match="2 stages per rank on at least 2 ranks: 3 stages do not fit"):
        build_schedule("interleaved_1f1b", 3, 4)
    with pytest.raises(ValueError, match="at least 2 ranks: 2 stages do not fit"):  # both chunks on one rank
        build_schedule("interleaved_1f1b", 2, 4)
    with pytest.raises(ValueError, match="multiple of 3, got 4"):
        build_schedule("interleaved_1f1b", 6, 4)


def _sched(*ranks, S=None, M=1):
    return Schedule("test", S or len(ranks), M, tuple(tuple(r) for r in ranks))


def test_check_schedule_checks_dependencies_not_a_fixed_order():
    # any order that respects the dependencies is accepted: backwards in reverse, split I/W backward
    check_schedule(
        _sched(
            [Action(0, F, 0), Action(0, F, 1), Action(0, B, 1), Action(0, B, 0)],
            [Action(1, F, 0), Action(1, F, 1), Action(1, B, 1), Action(1, B, 0)],
            M=2,
        )
    )
    check_schedule(_sched([Action(0, k, 0) for k in (F, I, W)], [Action(1, k, 0) for k in (F, I, W)]))
    bad = {
        "before its forward": _sched([Action(0, B, 0), Action(0, F, 0)]),
        "before its input-gradient pass": _sched([Action(0, F, 0), Action(0, W, 0), Action(0, I, 0)]),
        r"micro-batch 0 has F x2, B x1": _sched([Action(0, F, 0), Action(0, F, 0), Action(0, B, 0)]),
        r"micro-batch 1 has F x0, B x0": _sched([Action(0, F, 0), Action(0, B, 0)], M=2),
        r"has F x1, B x1, I x1, W x1": _sched([Action(0, F, 0), Action(0, I, 0), Action(0, W, 0), Action(0, B, 0)]),
        "out of range": _sched([Action(0, F, 0), Action(0, B, 0), Action(0, F, 1)]),
        "is on rank 0, its stage lives on rank 1": _sched([Action(1, F, 0), Action(1, B, 0)], [], S=2),
        "neighbouring stages 0 and 1 share rank 0": _sched(
            [Action(s, k, 0) for s, k in ((0, F), (1, F), (1, B), (0, B))], S=2
        ),
        # rank 0 waits for B0's gradient before sending F1; rank 1 waits for F1 before sending B0's gradient
        "deadlocks: rank 0 at 0B0, rank 1 at 1F1": _sched(
            [Action(0, F, 0), Action(0, B, 0), Action(0, F, 1), Action(0, B, 1)],
            [Action(1, F, 0), Action(1, F, 1), Action(1, B, 0), Action(1, B, 1)],
            M=2,
        ),
        # both messages are sent, but rank 1 would read micro-batch 1's activation for its F0
        "would receive the message from stage 0 to stage 1 for micro-batch 0": _sched(
            [Action(0, F, 0), Action(0, F, 1), Action(0, B, 0), Action(0, B, 1)],
            [Action(1, F, 1), Action(1, B, 1), Action(1, F, 0), Action(1, B, 0)],
            M=2,
        ),
    }
    for message, sched in bad.items():
        with pytest.raises(ValueError, match=message):
            check_schedule(sched)


# --------------------------------------------------------------------------- framing
PAYLOADS = [
    (torch.randn(4, 32),),
    (torch.randn(7).half(), torch.randint(0, 255, (3, 5), dtype=torch.uint8), torch.tensor([1.5])),
    (torch.zeros(0, dtype=torch.int64), torch.tensor([True, False, True])),
    (torch.randn(2, 3).to(torch.float8_e4m3fn), torch.randn(2, 2, 2, 2, dtype=torch.bfloat16), torch.tensor(3)),
    (),
]


@pytest.mark.parametrize("payload", PAYLOADS, ids=lambda p: "-".join(str(t.dtype)[6:] for t in p) or "empty")
def test_frame_round_trip_and_exact_size(payload):
    buf = frame(payload, (4, 32), torch.float32, torch.device("cpu"))
    header = 4 * (2 + 2 + 1 + sum(2 + t.dim() for t in payload))  # int32: dtype, ndim, dims...
    assert buf.dtype == torch.uint8 and buf.numel() == header + sum(t.numel() * t.element_size() for t in payload)
    assert frame_nbytes(payload, (4, 32), torch.float32) == buf.numel()
    out, shape, dtype = unframe(buf)
    assert shape == torch.Size([4, 32]) and dtype == torch.float32 and len(out) == len(payload)
    for a, b in zip(payload, out):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert torch.equal(
            a.view(torch.uint8) if a.element_size() == 1 else a, b.view(torch.uint8) if b.element_size() == 1 else b
        )


def test_malformed_frames_and_payloads_are_refused():
    buf = frame((torch.randn(3),), (3,), torch.float32, torch.device("cpu"))
    with pytest.raises(TransportError, match="malformed"):
        unframe(buf[:-1])
    with pytest.raises(TransportError, match="tuple of tensors"):
        frame([torch.randn(3)], (3,), torch.float32, torch.device("cpu"))  # type: ignore[arg-type]


def test_local_transport_counts_the_framed_size_and_hands_over_copies():
    meter = ByteMeter()
    t = LocalTransport(meter, torch.device("cpu"))
    t.rank = 0
    meter.step = 3
    msgs = [(torch.randn(5, 3),), (torch.randn(2).half(), torch.arange(4)), (torch.randn(1),)]
    sizes = [PREFIX_NBYTES + frame(p, (5, 3), torch.float32, torch.device("cpu")).numel() for p in msgs]
    for i, p in enumerate(msgs):
        meter.evaluating = i == 2
        assert t.send(p, 1, key="b0.forward", shape=(5, 3), dtype=torch.float32) == sizes[i]
    meter.evaluating = False
    c = meter.by_boundary()["b0.forward"]
    assert c.wire == sum(sizes[:2]) and c.messages == 4 and c.raw == 2 * 60  # framed: length + buffer
    assert sizes[0] == PREFIX_NBYTES + 4 * 9 + 60
    assert meter.eval_totals().wire == sizes[2]
    assert meter.per_step("b0.forward", 5) == [0, 0, 0, sum(sizes[:2]), 0]
    t.rank = 1
    assert t.ready(0) and not t.ready(2)
    got, shape, _ = t.recv(0)
    assert shape == (5, 3) and torch.equal(got[0], msgs[0][0])
    got[0].zero_()  # the receiver owns its copy, as it would across processes
    assert not torch.equal(got[0], msgs[0][0])
    assert t.pending() == 2
    with pytest.raises(TransportError, match="tuple of tensors"):
        t.send((torch.randn(2), "not a tensor"), 1, key="b0.forward", shape=(5, 3), dtype=torch.float32)  # type: ignore[arg-type]


def test_meter_merges_ranks():
    a, b = ByteMeter(), ByteMeter()
    a.record("b0.forward", 10, 4)
    b.record("b0.backward", 10, 5)
    b.record("dp.s1.allgather", 8, 2)
    m = ByteMeter.from_lists([a.to_list(), b.to_list()])
    d = m.by_direction()
    assert (d["forward"].wire, d["backward"].wire, d["dp"].wire, d["dp"].raw) == (4, 5, 2, 8)
    assert math.isclose(d["forward"].ratio, 2.5)
