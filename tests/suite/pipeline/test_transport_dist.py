"""DistTransport between two gloo processes: every payload arrives intact and in order, whatever
the mix of fixed-size streams (first message framed, then bodies alone, one or several
tensors) and variable-size (framed) messages, with the wire bytes the meter counts."""

from __future__ import annotations

import os
import socket
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

pytestmark = pytest.mark.distributed

# (stream, payload) in sending order: "a" and "b" are fixed-size streams, None is variable-size
_MESSAGES = [
    ("a", lambda i: (torch.full((3, 4), float(i)),)),
    ("a", lambda i: (torch.full((3, 4), float(i)),)),
    (None, lambda i: (torch.arange(i + 1, dtype=torch.int16),)),
    ("b", lambda i: (torch.full((5,), float(i), dtype=torch.float16), torch.tensor([i, i], dtype=torch.int8))),
    ("a", lambda i: (torch.full((3, 4), float(i)),)),
    ("b", lambda i: (torch.full((5,), float(i), dtype=torch.float16), torch.tensor([i, i], dtype=torch.int8))),
    (None, lambda i: (torch.arange(i + 1, dtype=torch.int16), torch.ones(2, 2))),
    ("a", lambda i: (torch.full((3, 4), float(i)),)),
    ("a", lambda i: (torch.full((3, 4), float(i)),)),
    ("b", lambda i: (torch.full((5,), float(i), dtype=torch.float16), torch.tensor([i, i], dtype=torch.int8))),
    ("c", lambda i: (torch.full((3,), complex(i, -i), dtype=torch.complex64),)),  # sent as its real view
    ("c", lambda i: (torch.full((3,), complex(i, -i), dtype=torch.complex64),)),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, port: int, q) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2, timeout=timedelta(seconds=30))
    from suite.pipeline.accounting import ByteMeter
    from suite.pipeline.transport import DistTransport

    tr = DistTransport(ByteMeter(), torch.device("cpu"), rank)
    out: dict = {}
    try:
        for rnd in range(2):  # round 1: every fixed-size stream's layout is known
            if rank == 0:
                for i, (stream, make) in enumerate(_MESSAGES):
                    p = make(i)
                    key = f"b0.{'forward' if stream is not None and rnd == 1 else 'backward'}"
                    tr.send(p, 1, key=key, shape=(7,), dtype=torch.float32, stream=stream)
                tr.flush()
                if rnd == 1:
                    counts = tr.meter.totals()
                    fixed = tr.meter.totals(lambda k: k == "b0.forward")
                    out["messages"], out["fixed_wire_round1"] = counts.messages, fixed.wire
            else:
                got = []
                for i, (stream, _) in enumerate(_MESSAGES):
                    payload, shape, dtype = tr.recv(0, stream)
                    want = _MESSAGES[i][1](i)
                    got.append(
                        tuple(shape) == (7,)
                        and dtype == torch.float32
                        and len(payload) == len(want)
                        and all(a.dtype == b.dtype and torch.equal(a, b) for a, b in zip(payload, want))
                    )
                out[rnd] = got
            dist.barrier()
        q.put(out)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def test_dist_transport_delivers_fixed_and_variable_size_payloads_in_order():
    ctx = mp.get_context("spawn")
    q = ctx.SimpleQueue()
    mp.start_processes(_worker, args=(_free_port(), q), nprocs=2, join=True, start_method="spawn")
    out = q.get() | q.get()
    for rnd in (0, 1):
        assert out[rnd] == [True] * len(_MESSAGES), (rnd, out[rnd])
    # messages handed to torch.distributed: a framed payload is two (length, buffer), a fixed-size
    # stream's payload one once the stream has been seen
    seen, messages = set(), 0
    for _ in range(2):
        for stream, _make in _MESSAGES:
            messages += 1 if stream in seen else 2
            if stream is not None:
                seen.add(stream)
    assert out["messages"] == messages
    # round 1's fixed-size payloads cost their tensors' bytes and nothing else
    fixed = [i for i, (stream, _) in enumerate(_MESSAGES) if stream is not None]
    assert out["fixed_wire_round1"] == sum(sum(t.numel() * t.element_size() for t in _MESSAGES[i][1](i)) for i in fixed)
