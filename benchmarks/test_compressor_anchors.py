"""Each built-in compressor's round trip against plain torch doing the same thing (issue 28).

An *anchor* is the shortest plain-torch code with the same granularity and output: TopK per
sample is ``torch.topk`` on each sample's ``|x|`` plus a scatter into zeros, ``fp16`` is
``x.half().float()``, ``quant`` is a min-max uint8 code per row, and so on (``ANCHORS``;
the anchors skip what the built-ins add on top: the NaN/Inf refusal, exact ties, index
encoding, the wire format). Ratio = built-in round trip / anchor; <= 1.0 is the goal.

Interleaved: every round times ``n`` calls of the built-in, then ``n`` of its anchor (the
order alternates between rounds), on this thread's CPU clock (``--bench-clock``), so both
see the same machine load; the ratio of each round is kept and the report gives min /
median / max over rounds with the 1-minute load average before and after::

    pytest benchmarks/test_compressor_anchors.py -s --benchmark-json anchors.json

Shapes: ``--bench-shape`` (default 8x512x512) and the issue's (32, 64, 32, 32), fp32.
``MPCBENCH_ANCHOR_ROUNDS`` sets the rounds (default 11).
"""

from __future__ import annotations

import math
import os
from statistics import median
from typing import Callable

import pytest
import torch
from _harness import Pair, cpu_clock, default_spec, main_role, make_info, make_input

import compressors
from conftest import shape_for

ROUNDS = int(os.environ.get("MPCBENCH_ANCHOR_ROUNDS", "11"))
ROUND_S = 0.03  # target seconds of one side of one round
ISSUE_SHAPE = (32, 64, 32, 32)

Fn = Callable[[], object]


def _rows(x: torch.Tensor) -> torch.Tensor:
    """(rows, d): the last dimension is a row (quant's default grouping)."""
    return x.reshape(-1, x.shape[-1])


def _topk_anchor(x: torch.Tensor, ratio: float = 0.1) -> Fn:
    s = x.reshape(x.shape[0], -1)
    k = math.ceil(ratio * s.shape[1])

    def run() -> torch.Tensor:
        idx = s.abs().topk(k, dim=1, sorted=False).indices
        return torch.zeros_like(s).scatter_(1, idx, s.gather(1, idx)).view_as(x)

    return run


def _ef_anchor(x: torch.Tensor) -> Fn:
    err = torch.zeros_like(x)

    def run() -> torch.Tensor:
        e = x + err
        s = e.reshape(e.shape[0], -1)
        k = math.ceil(0.1 * s.shape[1])
        idx = s.abs().topk(k, dim=1, sorted=False).indices
        out = torch.zeros_like(s).scatter_(1, idx, s.gather(1, idx)).view_as(x)
        torch.sub(e, out, out=err)
        return out

    return run


def _quant_anchor(x: torch.Tensor) -> Fn:
    g = _rows(x)

    def run() -> torch.Tensor:
        lo, hi = g.amin(1, keepdim=True), g.amax(1, keepdim=True)
        step = (hi - lo) / 255
        codes = ((g - lo) / step).round_().to(torch.uint8)
        return (codes.float() * step + lo).view_as(x)

    return run


def _fp8_anchor(x: torch.Tensor) -> Fn:
    def run() -> torch.Tensor:
        scale = x.abs().amax() / 448.0
        return (x / scale).to(torch.float8_e4m3fn).float() * scale

    return run


def _randomk_anchor(x: torch.Tensor) -> Fn:
    flat = x.reshape(-1)
    n = flat.numel()
    k = math.ceil(0.1 * n)
    gen = torch.Generator().manual_seed(0)

    def run() -> torch.Tensor:
        pos = torch.randint(0, n, (k,), generator=gen)  # (with repeats: cheaper than a permutation)
        return torch.zeros_like(flat).index_copy_(0, pos, flat.index_select(0, pos)).view_as(x)

    return run


def _threshold_anchor(x: torch.Tensor) -> Fn:
    flat = x.reshape(-1)
    n = flat.numel()
    m = max(1024, math.ceil(0.01 * n))
    gen = torch.Generator().manual_seed(0)

    def run() -> torch.Tensor:
        sample = flat.index_select(0, torch.randint(0, n, (m,), generator=gen)).abs()
        thr = sample.topk(math.ceil(0.01 * m), sorted=False).values.min()
        mask = flat.abs() >= thr
        return torch.zeros_like(flat).masked_scatter_(mask, flat[mask]).view_as(x)

    return run


def _qsgd_anchor(x: torch.Tensor, levels: int = 15, bucket: int = 128) -> Fn:
    b = x.reshape(-1, bucket)
    gen = torch.Generator().manual_seed(0)

    def run() -> torch.Tensor:
        norm = b.norm(dim=1, keepdim=True)
        level = b.abs() / norm * levels
        q = (level + torch.rand(b.shape, generator=gen)).floor_() * b.sign()
        codes = q.to(torch.int8)
        return (codes.float() * norm / levels).view_as(x)

    return run


def _powersgd_anchor(x: torch.Tensor, rank: int = 4) -> Fn:
    m = x.reshape(x.shape[0], -1).float() if x.dim() > 1 else x.reshape(1, -1)
    m = m.reshape(-1, x.shape[-1])
    q = torch.randn(m.shape[1], rank, generator=torch.Generator().manual_seed(0))

    def run() -> torch.Tensor:  # torch's powerSGD_hook per matrix: P = MQ, orthogonalize, Q = M^T P
        p = torch.linalg.qr(m @ q).Q
        q2 = m.t() @ p
        return (p @ q2.t()).view_as(x)

    return run


def _ae_anchor(x: torch.Tensor) -> Fn:
    d = x.shape[-1]
    c = max(1, round(0.125 * d))
    enc, dec = torch.nn.Linear(d, c), torch.nn.Linear(c, d)

    def run() -> torch.Tensor:
        with torch.no_grad():
            return dec(enc(x))

    return run


def _aqsgd_anchor(x: torch.Tensor) -> Fn:
    prev = torch.zeros_like(x)

    def run() -> torch.Tensor:  # quantize the change against the stored previous activation
        delta = x - prev
        g = _rows(delta)
        lo, hi = g.amin(1, keepdim=True), g.amax(1, keepdim=True)
        step = (hi - lo) / 255
        codes = ((g - lo) / step).round_().to(torch.uint8)
        out = prev + (codes.float() * step + lo).view_as(x)
        prev.copy_(out)
        return out

    return run


# name -> (what the anchor is, builder); names not here are reported without an anchor
ANCHORS: dict[str, tuple[str, Callable[[torch.Tensor], Fn]]] = {
    "none": ("x itself", lambda x: lambda: x),
    "fp16": ("x.half().float()", lambda x: lambda: x.half().float()),
    "bf16": ("x.bfloat16().float()", lambda x: lambda: x.bfloat16().float()),
    "fp8": ("amax scale, cast to float8_e4m3fn and back", _fp8_anchor),
    "topk": ("torch.topk of |x| per sample + scatter", _topk_anchor),
    "ef": ("topk anchor on x + error, error update", _ef_anchor),
    "ef21": ("topk anchor on x + error, error update", _ef_anchor),
    "randomk": ("torch.randint positions, index_select + index_copy_", _randomk_anchor),
    "threshold": ("sampled topk threshold, |x| >= t, masked_scatter_", _threshold_anchor),
    "quant": ("min-max uint8 per row", _quant_anchor),
    "qsgd": ("QSGD 15 levels, buckets of 128, stochastic rounding", _qsgd_anchor),
    "aqsgd": ("min-max uint8 of x - previous, previous updated", _aqsgd_anchor),
    "powersgd": ("rank-4 power iteration (MQ, QR, M^T P, PQ^T)", _powersgd_anchor),
    "ae": ("two nn.Linear (d -> d/8 -> d)", _ae_anchor),
}


def _builtin(name: str) -> bool:
    return compressors.get_class(name).__module__.startswith("compressors.builtins")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "anchor_case" not in metafunc.fixturenames:
        return
    shapes = [shape_for(metafunc.config, "cpu"), ISSUE_SHAPE]
    params = []
    for shape in dict.fromkeys(shapes):
        for name in compressors.available():
            if not _builtin(name):
                continue
            spec, reason = default_spec(name)
            marks = []
            if spec is None:
                marks.append(pytest.mark.skip(reason=reason))
            elif name not in ANCHORS:
                marks.append(pytest.mark.skip(reason=f"{name}: no plain-torch anchor defined"))
            sid = "x".join(map(str, shape))
            params.append(pytest.param((shape, name, spec), id=f"{sid}-{name}", marks=marks))
    metafunc.parametrize("anchor_case", params)


def interleaved(ours: Fn, anchor: Fn, rounds: int = ROUNDS) -> list[float]:
    """Per-round ratios ours / anchor; each round times both, in alternating order."""
    clock = cpu_clock()
    for f in (ours, anchor):
        f()
    t0 = clock()
    anchor()
    probe = max(clock() - t0, 1e-7)
    n = max(1, min(1000, round(ROUND_S / probe)))

    def timed(f: Fn) -> float:
        t0 = clock()
        for _ in range(n):
            f()
        return (clock() - t0) / n

    ratios = []
    for r in range(rounds):
        if r % 2:
            b = timed(anchor)
            a = timed(ours)
        else:
            a = timed(ours)
            b = timed(anchor)
        ratios.append(a / b)
    return ratios


def test_round_trip_vs_anchor(benchmark, anchor_case):
    shape, name, spec = anchor_case
    what, build_anchor = ANCHORS[name]
    x = make_input(shape, torch.float32, torch.device("cpu"))
    pair = Pair.build(spec, x.device)
    info = make_info(x, main_role(pair.sender))
    with torch.no_grad():
        for _ in range(2):  # steady state for stateful compressors
            pair.receiver.decompress(pair.sender.compress(x, info), info)

        def ours() -> torch.Tensor:
            return pair.receiver.decompress(pair.sender.compress(x, info), info)

        anchor = build_anchor(x)
        load0 = os.getloadavg()[0]
        ratios: list[float] = []
        benchmark.pedantic(lambda: ratios.extend(interleaved(ours, anchor)), rounds=1, iterations=1)
        load1 = os.getloadavg()[0]
    benchmark.group = "anchors-" + "x".join(map(str, shape))
    lo, mid, hi = min(ratios), median(ratios), max(ratios)
    benchmark.extra_info.update(
        compressor=name,
        spec=spec,
        anchor=what,
        shape="x".join(map(str, shape)),
        ratio_min=lo,
        ratio_median=mid,
        ratio_max=hi,
        rounds=len(ratios),
        load_1m_before=load0,
        load_1m_after=load1,
    )
    print(
        f"\n{name:10s} {'x'.join(map(str, shape)):12s} ratio {lo:.2f} / {mid:.2f} / {hi:.2f}  load {load0:.1f}->{load1:.1f}"
    )


@pytest.mark.parametrize("wire", ["float16", "bfloat16"])
def test_cast_with_one_check_pass_vs_anchor(benchmark, wire):
    """The floor of a refusing cast on CPU: the plain cast there and back plus the cheapest exact
    non-finite check torch offers (a sum of the 2-byte output; eager CPU has no fused
    cast-and-reduce), against the plain cast. fp16/bf16 cannot go below this ratio without a
    compiled kernel; compare it with their rows of ``test_round_trip_vs_anchor``."""
    x = make_input(ISSUE_SHAPE, torch.float32, torch.device("cpu"))
    dtype = getattr(torch, wire)

    def checked() -> torch.Tensor:
        h = x.to(dtype)
        bool(torch.isfinite(h.sum()))
        return h.float()

    load0 = os.getloadavg()[0]
    ratios: list[float] = []
    benchmark.pedantic(lambda: ratios.extend(interleaved(checked, lambda: x.to(dtype).float())), rounds=1, iterations=1)
    lo, mid, hi = min(ratios), median(ratios), max(ratios)
    benchmark.extra_info.update(wire=wire, ratio_min=lo, ratio_median=mid, ratio_max=hi, load_1m_before=load0)
    print(f"\ncast + one sum check ({wire}) vs plain cast: {lo:.2f} / {mid:.2f} / {hi:.2f}  load {load0:.1f}")
