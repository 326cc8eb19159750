"""Wall-clock accounting per stage: compute, compress, comm, optimizer (exclusive times).

Sections nest (the data-parallel hook compresses and communicates inside the backward
pass): an inner section's time is subtracted from the enclosing one, so the categories
add up to the time spent inside sections. On CUDA the clock synchronizes the device at
section boundaries so that asynchronous kernels are charged to the right category.
"""

from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager
from typing import Iterator

import torch

__all__ = ["Clock", "SECTIONS"]

SECTIONS = ("compute", "compress", "comm", "optimizer")


class Clock:
    """Accumulates exclusive seconds per section; ``snapshot()`` ends a step."""

    def __init__(self, device: torch.device) -> None:
        self._cuda = device.type == "cuda"
        self._device = device
        self._stack: list[list[float]] = []  # [start, child seconds]
        self.current: dict[str, float] = defaultdict(float)
        self.steps: list[dict[str, float]] = []  # one dict per finished step
        self.counts: dict[str, int] = defaultdict(int)

    def _sync(self) -> None:
        if self._cuda:
            torch.cuda.synchronize(self._device)

    @contextmanager
    def section(self, name: str) -> Iterator[None]:
        self._sync()
        frame = [time.perf_counter(), 0.0]
        self._stack.append(frame)
        try:
            yield
        finally:
            self._sync()
            elapsed = time.perf_counter() - frame[0]
            self._stack.pop()
            self.current[name] += elapsed - frame[1]
            if self._stack:
                self._stack[-1][1] += elapsed
            self.counts[name] += 1

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
