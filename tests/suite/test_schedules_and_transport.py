"""Schedules (action lists) and the framed transport with its byte meter."""

from __future__ import annotations

import math

import pytest
import torch

from suite.pipeline.accounting import ByteMeter
from suite.pipeline.schedules import Action, check_schedule, get_schedule, gpipe, one_f_one_b
from suite.pipeline.transport import PREFIX_NBYTES, LocalTransport, TransportError, frame, frame_nbytes, unframe


# --------------------------------------------------------------------------- schedules
@pytest.mark.parametrize("name", ["gpipe", "1f1b"])
@pytest.mark.parametrize("stages,micro", [(1, 1), (2, 4), (4, 4), (4, 2), (3, 7)])
def test_schedules_are_valid(name, stages, micro):
    acts = get_schedule(name, stages, micro)
    assert len(acts) == stages
    check_schedule(acts, micro)


def test_1f1b_bounds_activations_in_flight_and_gpipe_does_not():
    S, M = 4, 8
    for s, acts in enumerate(one_f_one_b(S, M)):
        live = peak = 0
        for a in acts:
            live += 1 if a.kind == "F" else -1
            peak = max(peak, live)
        assert peak == min(S - s, M)
    assert one_f_one_b(2, 3)[0] == [Action("F", 0), Action("F", 1), Action("B", 0), Action("F", 2), Action("B", 1), Action("B", 2)]
    assert gpipe(2, 2)[1] == [Action("F", 0), Action("F", 1), Action("B", 0), Action("B", 1)]


def test_bad_schedules_are_refused():
    with pytest.raises(ValueError, match="valid schedules: gpipe, 1f1b"):
        get_schedule("interleaved", 2, 2)
    with pytest.raises(ValueError, match="before its forward"):
        check_schedule([[Action("B", 0), Action("F", 0)]], 1)


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
        assert torch.equal(a.view(torch.uint8) if a.element_size() == 1 else a, b.view(torch.uint8) if b.element_size() == 1 else b)


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
    assert c.wire == sum(sizes[:2]) and c.messages == 2 and c.raw == 2 * 60
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
