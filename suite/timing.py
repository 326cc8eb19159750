"""Wall-clock accounting per stage: compute, compress, comm, optimizer (exclusive times).

Sections nest (the data-parallel hook compresses and communicates inside the backward
pass): an inner section's time is subtracted from the enclosing one, so the categories
add up to the time spent inside sections.

On the CPU a section is timed with ``time.perf_counter``. On CUDA kernels run
asynchronously, so the host clock would charge a kernel to whichever section happens to
wait for it. Two ways to fix that:

* **events** (default): each section records a CUDA event pair on the current stream, and
  the step's events are resolved once, in :meth:`Clock.snapshot` (one synchronization per
  step). A section's time is then the stream's time between its two marks: the GPU work it
  launched, plus any time the stream sat idle waiting for the host inside the section (so
  host-side work such as Python overhead or a blocking receive still counts). The CPU and
  the GPU keep overlapping, which is what the pipeline-overhead target measures.
* **sync** (``MPCBENCH_CLOCK=sync``): synchronize the device at every section boundary and
  use the host clock; exact attribution but no CPU/GPU overlap (~100 syncs per step with
  4 stages x 4 micro-batches). For debugging the split, not for step times.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from typing import Any, Callable

import torch

__all__ = ["Clock", "SECTIONS", "CLOCK_ENV"]

SECTIONS = ("compute", "compress", "comm", "optimizer")
CLOCK_ENV = "MPCBENCH_CLOCK"  # "events" (default on CUDA) or "sync"


class Clock:
    """Accumulates exclusive seconds per section; ``snapshot()`` ends a step.

    ``event_factory`` (tests) makes the objects used in events mode; on CUDA it is
    ``torch.cuda.Event(enable_timing=True)``. Such an object needs ``record()``,
    ``synchronize()`` and ``elapsed_time(end) -> milliseconds``.
    """

    def __init__(self, device: torch.device, event_factory: Callable[[], Any] | None = None) -> None:
        mode = os.environ.get(CLOCK_ENV, "events")
        if mode not in ("events", "sync"):
            raise ValueError(f"{CLOCK_ENV}={mode!r}: valid values are events, sync")
        cuda = device.type == "cuda"
        self._sync_device = cuda and mode == "sync"
        if event_factory is None and cuda and mode == "events":
            event_factory = lambda: torch.cuda.Event(enable_timing=True)  # noqa: E731
        self._event_factory = event_factory
        self._device = device
        self._stack: list[_Section] = []  # open sections, innermost last
        self._marks: list[_Marks] = []  # events mode: this step's closed sections, resolved in snapshot()
        self._free: list[Any] = []  # events mode: resolved events, reused
        self.current: dict[str, float] = defaultdict(float)
        self.steps: list[dict[str, float]] = []  # one dict per finished step
        self.counts: dict[str, int] = defaultdict(int)

    @property
    def uses_events(self) -> bool:
        return self._event_factory is not None

    def _sync(self) -> None:
        if self._sync_device:
            torch.cuda.synchronize(self._device)

    def _event(self) -> Any:
        ev = self._free.pop() if self._free else self._event_factory()
        ev.record()
        return ev

    def section(self, name: str) -> "_Section":
        """``with clock.section("compress"): ...`` charges the block to ``name``."""
        return _Section(self, name)

    def _resolve(self) -> None:
        """Events mode: turn this step's event pairs into exclusive seconds (one sync)."""
        if not self._marks:
            return
        self._marks[-1].end.synchronize()  # events complete in stream order: the last one covers all
        for m in self._marks:
            m.elapsed = m.start.elapsed_time(m.end) / 1000.0
        for m in self._marks:  # children were closed before their parents; subtract them
            if m.parent is not None:
                m.parent.child += m.elapsed
        for m in self._marks:
            self.current[m.name] += m.elapsed - m.child
            self._free += (m.start, m.end)
        self._marks = []

    def snapshot(self, wall_s: float) -> dict[str, float]:
        """Close the current step: store its per-section seconds and its wall time."""
        self._resolve()
        row = {k: float(self.current.get(k, 0.0)) for k in SECTIONS}
        row["step"] = float(wall_s)
        self.steps.append(row)
        self.current = defaultdict(float)
        return row

    def discard(self) -> None:
        """Drop what was timed since the last snapshot (evaluation)."""
        self._resolve()
        self.current = defaultdict(float)


class _Marks:
    """A closed section in events mode: its events, its parent's marks, its children's time."""

    __slots__ = ("name", "start", "end", "parent", "child", "elapsed")

    def __init__(self, name: str, start: Any, parent: "_Marks | None") -> None:
        self.name, self.start, self.parent = name, start, parent
        self.end: Any = None
        self.child = 0.0
        self.elapsed = 0.0


class _Section:
    """Context manager of one timed block (a class: cheaper than a generator per message)."""

    __slots__ = ("clock", "name", "start", "child", "marks")

    def __init__(self, clock: Clock, name: str) -> None:
        self.clock, self.name = clock, name

    def __enter__(self) -> None:
        c = self.clock
        if c._event_factory is not None:
            parent = c._stack[-1].marks if c._stack else None
            self.marks = _Marks(self.name, c._event(), parent)
            c._stack.append(self)
            return
        c._sync()
        self.child = 0.0
        c._stack.append(self)
        self.start = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        c = self.clock
        if c._event_factory is not None:
            self.marks.end = c._event()
            c._stack.pop()
            c._marks.append(self.marks)
            c.counts[self.name] += 1
            return
        c._sync()
        elapsed = time.perf_counter() - self.start
        c._stack.pop()
        c.current[self.name] += elapsed - self.child
        if c._stack:
            c._stack[-1].child += elapsed
        c.counts[self.name] += 1
