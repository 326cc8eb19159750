"""Compressor speed: compress, decompress and both, per registered compressor, per device.

Parametrized over ``compressors.available()`` (timm style): a newly registered plugin is
benchmarked without editing this file, at its default settings (``_harness.default_spec``;
wrappers wrap ``topk(ratio=0.1)``; compressors that need model features are skipped).

Inputs: a standard-normal activation of ``--bench-shape`` (CPU, default 8x512x512, fp32
and bf16) and ``--bench-cuda-shape`` (CUDA when present, default 8x2048x2048 bf16 = 64 MB,
the issue's tensor). Role: activation when supported. Stateful compressors (ef, ef21,
aqsgd, powersgd's warm start) are first run through two compress/decompress round trips so
the timed calls are steady-state calls, and everything runs under ``torch.no_grad()`` like
the runtime's straight-through path.

Each benchmark's ``extra_info``: ``bytes_in`` (the raw tensor), ``payload_bytes``,
``seconds`` (min over rounds), ``gbps`` (``bytes_in / seconds``), ``floor_s`` (time to read
the input once, see ``_harness``) and ``floor_multiple`` (``seconds / floor_s``). The floor
itself is benchmarked as ``test_read_floor``. Turn the JSON into the docs table with
``python benchmarks/report.py out.json``.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from _harness import Pair, bench, default_spec, main_role, make_info, make_input, measure

import compressors
from compressors import payload_nbytes
from conftest import devices, shape_for

PHASES = ("compress", "decompress", "roundtrip")
DTYPES = {"cpu": (torch.float32, torch.bfloat16), "cuda": (torch.bfloat16,)}
WARM_ROUNDTRIPS = 2


@dataclass(frozen=True)
class Case:
    device: str
    dtype: torch.dtype
    shape: tuple[int, ...]

    @property
    def label(self) -> str:
        return f"{self.device}-{str(self.dtype).removeprefix('torch.')}"


def _cases(config: pytest.Config) -> list[Case]:
    return [Case(d, dt, shape_for(config, d)) for d in devices(config) for dt in DTYPES[d]]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    cases = _cases(metafunc.config)
    if "floor_case" in metafunc.fixturenames:
        metafunc.parametrize("floor_case", cases, ids=[c.label for c in cases])
    if "speed_case" in metafunc.fixturenames:
        params = []
        for c in cases:
            for name in compressors.available():
                spec, reason = default_spec(name)
                marks = [pytest.mark.skip(reason=reason)] if spec is None else []
                for phase in PHASES:
                    params.append(pytest.param((c, name, spec, phase), id=f"{c.label}-{name}-{phase}", marks=marks))
        metafunc.parametrize("speed_case", params)


# --------------------------------------------------------------------------- shared inputs
_INPUTS: dict[Case, torch.Tensor] = {}
_FLOORS: dict[Case, float] = {}


def _input(case: Case) -> torch.Tensor:
    if case not in _INPUTS:
        _INPUTS[case] = make_input(case.shape, case.dtype, torch.device(case.device))
    return _INPUTS[case]


def _floor(case: Case) -> float:
    """Seconds to read the input once (min over 4x the rounds: it is the denominator)."""
    if case not in _FLOORS:
        x = _input(case)
        _FLOORS[case] = measure(lambda: x.sum(), x.device, rounds=20)
    return _FLOORS[case]


def _record(benchmark, case: Case, seconds: float | None, **info) -> None:
    x = _input(case)
    floor = _floor(case)
    benchmark.extra_info.update(
        device=case.device,
        dtype=str(case.dtype).removeprefix("torch."),
        shape="x".join(map(str, case.shape)),
        bytes_in=x.nbytes,
        floor_s=floor,
        **info,
    )
    if seconds is not None:
        benchmark.extra_info.update(seconds=seconds, gbps=x.nbytes / seconds / 1e9, floor_multiple=seconds / floor)


# --------------------------------------------------------------------------- benchmarks
def test_read_floor(benchmark, floor_case: Case):
    """The memory-bandwidth floor: one read of the input (``x.sum()``)."""
    x = _input(floor_case)
    benchmark.group = floor_case.label
    seconds = bench(benchmark, lambda: x.sum(), x.device)
    _record(benchmark, floor_case, seconds, compressor="(read floor: x.sum())", spec="x.sum()", phase="floor")


@pytest.mark.parametrize("wire", ["float16", "bfloat16"])
def test_plain_cast_anchor(benchmark, floor_case: Case, wire: str):
    """The anchor of fp16/bf16: a plain cast there and back, no checks (issue 13: the built-ins'
    round trip should stay within one extra pass of this)."""
    x = _input(floor_case)
    dtype = getattr(torch, wire)
    benchmark.group = floor_case.label
    seconds = bench(benchmark, lambda: x.to(dtype).to(x.dtype), x.device)
    _record(benchmark, floor_case, seconds, compressor=f"(plain cast: {wire})", spec=f"x.to({wire})", phase="anchor")


def test_compressor(benchmark, speed_case):
    case, name, spec, phase = speed_case
    device = torch.device(case.device)
    x = _input(case)
    pair = Pair.build(spec, device)
    info = make_info(x, main_role(pair.sender))
    benchmark.group = case.label

    with torch.no_grad():
        for _ in range(WARM_ROUNDTRIPS):  # steady state for stateful compressors
            out = pair.receiver.decompress(pair.sender.compress(x, info), info)
        assert out.shape == x.shape and out.dtype == x.dtype, f"{spec}: decompress returned {out.shape} {out.dtype}"
        payload = pair.sender.compress(x, info)

        def compress():
            return pair.sender.compress(x, info)

        def decompress():
            return pair.receiver.decompress(payload, info)

        def roundtrip():
            return pair.receiver.decompress(pair.sender.compress(x, info), info)

        fn = {"compress": compress, "decompress": decompress, "roundtrip": roundtrip}[phase]
        seconds = bench(benchmark, fn, device)
    _record(benchmark, case, seconds, compressor=name, spec=spec, phase=phase, payload_bytes=payload_nbytes(payload))
