"""Wall-clock accounting per stage: compute, compress, comm, optimizer (exclusive times).

Sections nest (the data-parallel hook compresses and communicates inside the backward
pass): an inner section's time is subtracted from the enclosing one, so the categories
add up to the time spent inside sections. On CUDA the clock synchronizes the device at
section boundaries so that asynchronous kernels are charged to the right category.
"""

from __future__ import annotations

import time
from collections import defaultdict
import torch

__all__ = ["Clock", "SECTIONS"]

SECTIONS = ("compute", "compress", "comm", "optimizer")


class Clock:
    """Accumulates exclusive seconds per section; ``snapshot()`` ends a step."""

    def __init__(self, device: torch.device) -> None:
        self._cuda = device.type == "cuda"
        self._device = device
        self._stack: list[_Section] = []  # open sections, innermost last
        self.current: dict[str, float] = defaultdict(float)
        self.steps: list[dict[str, float]] = []  # one dict per finished step
        self.counts: dict[str, int] = defaultdict(int)

    def _sync(self) -> None:
        if self._cuda:
            torch.cuda.synchronize(self._device)

    def section(self, name: str) -> "_Section":
        """``with clock.section("compress"): ...`` charges the block to ``name``."""
        return _Section(self, name)

    def snapshot(self, wall_s: float) -> dict[str, float]:
        """Close the current step: store its per-section seconds and its wall time."""
        row = {k: float(self.current.get(k, 0.0)) for k in SECTIONS}
        row["step"] = float(wall_s)
        self.steps.append(row)
        self.current = defaultdict(float)
        return row

    def discard(self) -> None:
        """Drop what was timed since the last snapshot (evaluation)."""
        self.current = defaultdict(float)


class _Section:
    """Context manager of one timed block (a class: cheaper than a generator per message)."""

    __slots__ = ("clock", "name", "start", "child")

    def __init__(self, clock: Clock, name: str) -> None:
        self.clock, self.name = clock, name

    def __enter__(self) -> None:
        c = self.clock
        c._sync()
        self.child = 0.0
        c._stack.append(self)
        self.start = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        c = self.clock
        c._sync()
        elapsed = time.perf_counter() - self.start
        c._stack.pop()
        c.current[self.name] += elapsed - self.child
        if c._stack:
            c._stack[-1].child += elapsed
        c.counts[self.name] += 1
