"""Timing helpers shared by the benchmarks (not a test module; imported by them).

How a time is taken (``bench``): pytest-benchmark's ``pedantic`` mode with a fixed number
of ``rounds`` after one warm-up round; each round runs the function ``iterations`` times
back to back and records the mean, and we report the *minimum* over rounds (the least
disturbed by other processes on a shared machine). ``iterations`` is chosen from a probe
call so that one round lasts about ``ROUND_S`` (1 ms on CUDA, so the one synchronization
per round is amortized; on CPU a round is 20 ms).
On CUDA the clock synchronizes the device before it is read, so a round's time covers
every kernel its calls launched and nothing else (no per-call sync).
On CPU the clock is, by default, the benchmarking thread's CPU time
(``time.thread_time``, user + system), not wall-clock: the benchmarks run torch with one
thread (``--bench-threads 1``), so every operation runs on that thread, and on a shared
machine the time it spends descheduled is excluded (measured at load 5 on 2 cores: TopK's
wall-clock min over 20 calls was 105 ms, its CPU time 53 ms; x.sum() 0.42 ms either way).
``--bench-clock wall`` switches back to ``time.perf_counter``.

The memory-bandwidth floor (``floor_s``) is the time to read the input once, measured the
same way on the same tensor in the same session: ``x.sum()``, a single-pass reduction
whose output is one scalar, so its traffic is exactly ``x.nbytes`` read. (A copy would
also write ``x.nbytes``; an empty kernel would ignore the data.) A compressor's *multiple
of the floor* is its time divided by ``floor_s``; 1.0 means "as fast as reading the input".
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch

from compressors import Compressor, CompressorError, TensorInfo, TensorRole, build, get_class

try:
    from compressors.registry import default_spec as registry_default_spec
except ImportError:  # an older compressor library (the "before" runs): the same rule, spelled out

    def registry_default_spec(name: str) -> str:
        import inspect

        sig = inspect.signature(get_class(name).__init__)
        required = [
            p
            for p in list(sig.parameters.values())[1:]
            if p.default is inspect.Parameter.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        ]
        if any("Compressor" not in str(p.annotation) for p in required):
            raise CompressorError(f"{name}: a required parameter has no default; give a full spec")
        return f"{name}({', '.join('topk(ratio=0.1)' for _ in required)})" if required else name


__all__ = [
    "ROUNDS",
    "Shape",
    "parse_shape",
    "synced_clock",
    "use_cpu_clock",
    "cpu_clock",
    "measure",
    "bench",
    "default_spec",
    "main_role",
    "make_info",
    "make_input",
]

ROUNDS = int(os.environ.get("MPCBENCH_BENCH_ROUNDS", "7"))  # timed rounds per benchmark (min is reported)
ROUND_S = {"cpu": 0.02, "cuda": 0.001}  # target duration of one round: sets iterations per round
MAX_ITERATIONS = 1000

Shape = tuple[int, ...]


def parse_shape(text: str) -> Shape:
    """``"8x512x512"`` -> ``(8, 512, 512)``."""
    try:
        shape = tuple(int(s) for s in text.lower().split("x"))
    except ValueError:
        raise ValueError(f"bad shape {text!r}; expected e.g. 8x512x512") from None
    if not shape or min(shape) < 1:
        raise ValueError(f"bad shape {text!r}; every dimension must be >= 1")
    return shape


# --------------------------------------------------------------------------- clocks
CPU_CLOCKS: dict[str, Callable[[], float]] = {"thread": time.thread_time, "wall": time.perf_counter}
_cpu_clock: list[Callable[[], float]] = [time.thread_time]


def use_cpu_clock(name: str) -> None:
    """Select the CPU clock: ``thread`` (CPU time of this thread) or ``wall``."""
    _cpu_clock[0] = CPU_CLOCKS[name]


def cpu_clock() -> Callable[[], float]:
    """The selected CPU clock."""
    return _cpu_clock[0]


def synced_clock(device: torch.device) -> Callable[[], float]:
    """The CPU clock, or on CUDA ``time.perf_counter`` after waiting for queued kernels."""
    if device.type != "cuda":
        return _cpu_clock[0]

    def clock() -> float:
        torch.cuda.synchronize(device)
        return time.perf_counter()

    return clock


def _iterations(fn: Callable[[], Any], device: torch.device) -> int:
    clock = synced_clock(device)
    fn()  # warm-up (lazy init, allocator, autotuning)
    t0 = clock()
    fn()
    probe = max(clock() - t0, 1e-7)
    return max(1, min(MAX_ITERATIONS, round(ROUND_S[device.type] / probe)))


def measure(fn: Callable[[], Any], device: torch.device, rounds: int = ROUNDS) -> float:
    """Minimum over ``rounds`` of the mean seconds per call (same scheme as :func:`bench`)."""
    clock = synced_clock(device)
    n = _iterations(fn, device)
    best = math.inf
    for _ in range(rounds):
        t0 = clock()
        for _ in range(n):
            fn()
        best = min(best, (clock() - t0) / n)
    return best


def bench(benchmark, fn: Callable[[], Any], device: torch.device, rounds: int = ROUNDS) -> float | None:
    """Time ``fn`` with pytest-benchmark; return the minimum seconds per call (None if disabled)."""
    if getattr(benchmark, "disabled", False):  # --benchmark-disable: run once as a smoke test
        benchmark.pedantic(fn)
        return None
    benchmark._timer = synced_clock(device)  # read by pedantic's runner; syncs once per round on CUDA
    n = _iterations(fn, device)
    benchmark.pedantic(fn, rounds=rounds, iterations=n, warmup_rounds=1)
    return float(benchmark.stats.stats.min)


# --------------------------------------------------------------------------- compressors
def default_spec(name: str) -> tuple[str | None, str]:
    """(spec at default settings, skip reason) for registered compressor ``name``.

    Compressors that need model features (``requires``) or arguments without a default are
    skipped with the reason; see ``compressors.registry.default_spec``.
    """
    if get_class(name).requires:
        return None, f"{name} requires model features {sorted(get_class(name).requires)}"
    try:
        return registry_default_spec(name), ""
    except CompressorError as e:
        return None, str(e)


def main_role(comp: Compressor) -> TensorRole:
    """Activation if supported (the issue's use case), else the compressor's first role."""
    roles = comp.roles
    return TensorRole.ACTIVATION if TensorRole.ACTIVATION in roles else sorted(roles, key=lambda r: r.value)[0]


def make_input(shape: Shape, dtype: torch.dtype, device: torch.device, seed: int = 0) -> torch.Tensor:
    """Standard-normal test tensor (drawn on CPU for reproducibility, then moved)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(device=device, dtype=dtype)


def make_info(x: torch.Tensor, role: TensorRole, seed: int = 1234) -> TensorInfo:
    ids = None if role is TensorRole.WEIGHT_GRAD else torch.arange(x.shape[0], dtype=torch.int64)
    return TensorInfo(
        role=role,
        boundary=0,
        microbatch=0,
        step=0,
        shape=x.shape,
        dtype=x.dtype,
        device=x.device,
        sample_ids=ids,
        seed=seed,
        training=True,
    )


@dataclass
class Pair:
    """A sender and a receiver instance of one spec (one link, as the runtime builds them)."""

    spec: str
    sender: Compressor
    receiver: Compressor

    @classmethod
    def build(cls, spec: str, device: torch.device) -> Pair:
        s, r = build(spec), build(spec)
        s.to(device)
        r.to(device)
        return cls(spec, s, r)
