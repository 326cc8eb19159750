"""Wall-clock accounting per stage: compute, compress, comm, optimizer (exclusive times).

Sections nest (the data-parallel hook compresses and communicates inside the backward
pass): an inner section's time is subtracted from the enclosing one, so the categories
add up to the time spent inside sections.

On the CPU a section is timed with ``time.perf_counter`` and, next to it, with the calling
thread's CPU time (``time.thread_time``): per action the network model takes the CPU time
(``Clock.cpu_action_steps``) when the process computes on one thread, because it does not grow
when the scheduler hands the core to another process, as wall time does on a shared machine
(compute inputs that do not move with the load). On CUDA kernels run
asynchronously, so the host clock would charge a kernel to whichever section happens to
wait for it. Two ways to fix that:

* **events** (default): each section records a CUDA event pair on the current stream, and
  the step's events are resolved once, in :meth:`Clock.snapshot` (one synchronization per
  step). A section's time is then the stream's time between its two marks: the GPU work it
  launched, plus any time the stream sat idle waiting for the host inside the section (so
  host-side work such as Python overhead or a blocking receive still counts). The CPU and
  the GPU keep overlapping, which is what the pipeline-overhead target measures.
* **sync** (``MPCBENCH_CLOCK=sync``): synchronize the device at every section boundary and
  use the host clock; exact attribution but no CPU/GPU overlap (two syncs per section: 264
  per training step with 4 stages x 4 micro-batches, counted from ``Clock.counts``). For
  debugging the split, not for step times.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from typing import Any, Callable

import torch

from suite import settings

__all__ = ["Clock", "SECTIONS", "CLOCK_ENV", "CODEC_SAMPLE_EVERY"]

SECTIONS = ("compute", "compress", "comm", "optimizer")
CLOCK_ENV = "MPCBENCH_CLOCK"  # "events" (default on CUDA) or "sync"
CPU_REUSE_S = 20e-6  # see Clock._cpu_at
# The codec reference (docs/ARCHITECTURE.md, "Time"): every this many-th call of one codec site,
# after the first few (warm-up), the call's thread CPU seconds are taken beside those of a copy of
# the same raw bytes, right after it on the same thread; the board prices the codec as that
# multiple of a copy, which does not move with the machine's load the way seconds do
REFERENCE = "reference"  # the section of that copy: charged to nothing
CODEC_SAMPLE_EVERY = 2
CODEC_SKIP_CALLS = 4
CODEC_MAX_SAMPLES = 256  # per site: the quantiles the multiple is taken from


class Clock:
    """Accumulates exclusive seconds per section; ``snapshot()`` ends a step.

    ``event_factory`` (tests) makes the objects used in events mode; on CUDA it is
    ``torch.cuda.Event(enable_timing=True)``. Such an object needs ``record()``,
    ``synchronize()`` and ``elapsed_time(end) -> milliseconds``.
    """

    def __init__(self, device: torch.device, event_factory: Callable[[], Any] | None = None) -> None:
        mode = settings.clock()
        cuda = device.type == "cuda"
        self._sync_device = cuda and mode == "sync"
        if event_factory is None and cuda and mode == "events":
            event_factory = lambda: torch.cuda.Event(enable_timing=True)  # noqa: E731
        self._event_factory = event_factory
        self._device = device
        self._stack: list[_Section] = []  # open sections, innermost last
        self._closed: list[_Section] = []  # this step's closed sections
        # finished steps not yet turned into rows: (closed sections, wall seconds). On the host
        # clock they are resolved when the rows are first read (after training: the per-step
        # bookkeeping is not part of a step); events mode resolves each step in snapshot()
        self._unresolved: list[tuple[list[_Section], float]] = []
        self._free: list[Any] = []  # events mode: resolved events, reused
        self.current: dict[str, float] = defaultdict(float)
        self._steps: list[dict[str, float]] = []  # one dict per finished step
        self.counts: dict[str, int] = defaultdict(int)
        # per schedule action (the network model's inputs): the action being run ("F3"), set by
        # the stage; per step, action -> [pre, compute, post] exclusive seconds, where "pre" is
        # the compression before the action's compute (decompressing what it received), "post"
        # the compression and send-side transport work after it; receive waits are left out.
        self.action: str | None = None
        self.current_actions: dict[str, list[float]] = {}
        self._action_steps: list[dict[str, list[float]]] = []
        # the same per action in this thread's CPU seconds (CPU device only; empty otherwise)
        self.cpu_clock = not cuda and event_factory is None
        self.current_cpu_actions: dict[str, list[float]] = {}
        self._cpu_action_steps: list[dict[str, list[float]]] = []
        self.current_cpu: dict[str, float] = defaultdict(float)  # per section, thread CPU seconds
        self._cpu_mark = (0.0, -math.inf)  # the last thread CPU reading and the host time it was taken at
        if event_factory is None and not self._sync_device:
            self._stamp = time.perf_counter  # the common CPU case: no Python frame per stamp
        # per codec site ("b0.forward.compress", "dp.s1.decompress"...): [codec CPU seconds, copy
        # CPU seconds, sampled calls, raw bytes of those calls, calls in all (evaluation too),
        # calls in training steps]; CPU device only
        self.codec_totals: dict[str, list[float]] = {}
        self._codec_step: list[tuple[str, float, float, int]] = []  # this step's samples (evaluation: discarded)
        self._codec_calls: dict[str, int] = {}  # this step's calls per site
        self._codec_bufs: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}  # per site: the copy's buffers
        self.codec_samples: dict[str, list[tuple[float, float]]] = {}  # per site: (codec, copy) seconds

    @property
    def steps(self) -> list[dict[str, float]]:
        """Per finished step: exclusive seconds per section (``*_cpu``: thread CPU) and ``step``."""
        self._resolve_steps()
        return self._steps

    @property
    def action_steps(self) -> list[dict[str, list[float]]]:
        """Per finished step: action -> [pre, compute, post] exclusive seconds."""
        self._resolve_steps()
        return self._action_steps

    @property
    def cpu_action_steps(self) -> list[dict[str, list[float]]]:
        """The same in thread CPU seconds (CPU device only; empty otherwise)."""
        self._resolve_steps()
        return self._cpu_action_steps

    @property
    def uses_events(self) -> bool:
        return self._event_factory is not None

    def _stamp(self) -> Any:
        """A point in time: a recorded event (events mode) or the host clock (after a device
        sync in sync mode)."""
        if self._event_factory is None:
            if self._sync_device:
                torch.cuda.synchronize(self._device)
            return time.perf_counter()
        ev = self._free.pop() if self._free else self._event_factory()
        ev.record()
        return ev

    def section(self, name: str) -> _Section:
        """``with clock.section("compress"): ...`` charges the block to ``name``."""
        sec = _new_section(_Section)  # no Python __init__ frame: sections open per message
        sec.clock, sec.name = self, name
        return sec

    def codec(self, site: str, raw: torch.Tensor | tuple[Any, torch.dtype]) -> _Section:
        """``with clock.codec("b0.forward.compress", x): ...``: a ``compress`` section that, on
        sampled calls of training steps (CPU only), also times a copy of ``raw``'s bytes (the uncompressed
        tensor, or its (shape, dtype): a decoder's output size) into a buffer kept per site, right after the block, outside every section, into
        :attr:`codec_totals`: the compressor's work as a multiple of a copy of the same bytes."""
        sec = _new_section(_CodecSection)
        sec.clock, sec.name, sec.site, sec.raw, sec.t0 = self, "compress", site, raw, -1.0
        return sec

    def _codec_sample(self, sec: _CodecSection, codec_s: float) -> None:
        raw = sec.raw
        shape, dtype = (raw.shape, raw.dtype) if isinstance(raw, torch.Tensor) else (torch.Size(raw[0]), raw[1])
        # the reference is a copy into a buffer kept per site: memory traffic only. (A clone allocates,
        # and a fresh allocation of this size page-faults; under load that took 40x longer, so the
        # multiple moved with the load: what it is there to avoid.)
        bufs = self._codec_bufs.get(sec.site)
        if bufs is None or bufs[0].shape != shape or bufs[0].dtype != dtype:
            bufs = self._codec_bufs[sec.site] = (
                torch.empty(shape, dtype=dtype, device=self._device),
                torch.zeros(shape, dtype=dtype, device=self._device),
            )
            bufs[0].copy_(bufs[1])  # first touch: the pages are mapped before anything is timed
        src = raw if isinstance(raw, torch.Tensor) else bufs[1]
        # inside a section of its own ("reference"), which no action, section total or enclosing
        # section is charged with: the raw times stay those of the run without the copy
        with self.section(REFERENCE):
            bufs[0].copy_(src)  # warm: the copy timed next finds the bytes where a codec just left them
            t0 = time.thread_time()
            bufs[0].copy_(src)
            copy_s = time.thread_time() - t0
        ref = bufs[0]
        self._codec_step.append((sec.site, codec_s, copy_s, ref.numel() * ref.element_size()))

    def _resolve(self, closed: list[_Section]) -> None:
        """Turn one step's closed sections into exclusive seconds (events: one sync)."""
        if not closed:
            return
        if self._event_factory is not None:
            closed[-1].end.synchronize()  # events complete in stream order: the last one covers all
            spans = [sec.start.elapsed_time(sec.end) / 1000.0 for sec in closed]
            for sec in closed:
                self._free += (sec.start, sec.end)
        else:
            spans = [sec.end - sec.start for sec in closed]
        columns = [(spans, self.current, self.current_actions)]
        if self.cpu_clock:
            cpu = [sec.cpu_end - sec.cpu_start for sec in closed]
            columns.append((cpu, self.current_cpu, self.current_cpu_actions))
        self._charge(closed, columns)

    @staticmethod
    def _charge(
        closed: list[_Section], columns: list[tuple[list[float], dict[str, float], dict[str, list[float]]]]
    ) -> None:
        """Per clock (wall, and thread CPU where kept): add each section's exclusive share of its
        span (its own span minus its children's; children close before their parents) to the
        clock's totals per section and its rows per action."""
        # which part of its action a section is: 0 pre (decompressing what it received; the
        # receive's wait is left out), 1 compute (nested work such as a data-parallel hook
        # inside the backward too), 2 post (compressing / framing what it sends), None: no part
        slots: list[int | None] = []
        computed: set[str] = set()  # actions whose compute section has closed (close order)
        for sec in closed:
            slot = None
            if sec.action is not None and sec.name != REFERENCE:
                if sec.parent is not None or sec.name in ("compute", "optimizer"):
                    if sec.name != "comm":
                        slot = 1
                    if sec.name == "compute" and sec.parent is None:
                        computed.add(sec.action)
                elif sec.action in computed:
                    slot = 2
                elif sec.name == "compress":
                    slot = 0
            slots.append(slot)
        for spans, totals, actions in columns:
            child: dict[int, float] = {}
            for sec, span in zip(closed, spans):
                if sec.parent is not None:
                    child[id(sec.parent)] = child.get(id(sec.parent), 0.0) + span
            for sec, span, slot in zip(closed, spans, slots):
                own = span - child.get(id(sec), 0.0)
                totals[sec.name] += own
                if sec.action is not None:
                    row = actions.get(sec.action)
                    if row is None:
                        row = actions[sec.action] = [0.0, 0.0, 0.0]
                    if slot is not None:
                        row[slot] += own

    def snapshot(self, wall_s: float) -> None:
        """Close the current step (its rows appear in :attr:`steps` and the action lists)."""
        self._unresolved.append((self._closed, wall_s))
        self._closed = []
        for site, codec_s, copy_s, nbytes in self._codec_step:  # training steps only, like the sections
            row = self.codec_totals[site]
            row[0] += codec_s
            row[1] += copy_s
            row[2] += 1
            row[3] += nbytes
            samples = self.codec_samples.setdefault(site, [])
            if len(samples) < CODEC_MAX_SAMPLES:
                samples.append((codec_s, copy_s))
        self._codec_step = []
        for site, n in self._codec_calls.items():
            self.codec_totals[site][5] += n
        self._codec_calls = {}
        if self._event_factory is not None:  # one sync per step; the events are reused
            self._resolve_steps()

    def _resolve_steps(self) -> None:
        pending, self._unresolved = self._unresolved, []
        for closed, wall_s in pending:
            self._resolve(closed)
            self._store_step(wall_s)

    def _store_step(self, wall_s: float) -> None:
        row = {k: float(self.current.get(k, 0.0)) for k in SECTIONS}
        row["step"] = float(wall_s)
        if self.cpu_clock:
            row.update({f"{k}_cpu": float(self.current_cpu.get(k, 0.0)) for k in SECTIONS})
            self.current_cpu = defaultdict(float)
        self._steps.append(row)
        self.current = defaultdict(float)
        self._action_steps.append(self.current_actions)
        self.current_actions = {}
        if self.cpu_clock:
            self._cpu_action_steps.append(self.current_cpu_actions)
            self.current_cpu_actions = {}

    def discard(self) -> None:
        """Drop what was timed since the last snapshot (evaluation)."""
        self._closed = []  # never resolved: their events are not reused
        self._codec_step = []
        self._codec_calls = {}
        self.current = defaultdict(float)
        self.current_actions = {}
        self.current_cpu_actions = {}
        self.current_cpu = defaultdict(float)


class _Section:
    """One timed block, a context manager (a class: cheaper than a generator per message).

    Closed sections wait in ``clock._closed`` until the step ends; ``start``/``end`` are host
    seconds or CUDA events (``cpu_start``/``cpu_end``: thread CPU seconds, CPU device only)."""

    __slots__ = ("clock", "name", "start", "end", "parent", "action", "cpu_start", "cpu_end")
    clock: Clock
    name: str
    start: Any
    end: Any
    parent: _Section | None
    action: str | None
    cpu_start: float
    cpu_end: float

    def __enter__(self) -> None:
        c = self.clock
        self.parent = c._stack[-1] if c._stack else None
        self.action = c.action
        c._stack.append(self)
        self.start = wall = c._stamp()
        # this thread's CPU seconds: reading them is a system call, so a reading less than
        # CPU_REUSE_S of wall time old is extended by the wall time since, as if the thread ran
        # throughout (at most that much error per section; inlined: no Python frame per read)
        if c.cpu_clock:
            cpu, at = c._cpu_mark
            if wall - at < CPU_REUSE_S:
                self.cpu_start = cpu + (wall - at)
            else:
                self.cpu_start = cpu = time.thread_time()
                c._cpu_mark = (cpu, wall)

    def __exit__(self, *exc: object) -> None:
        c = self.clock
        self.end = wall = c._stamp()
        if c.cpu_clock:  # as in __enter__
            cpu, at = c._cpu_mark
            if wall - at < CPU_REUSE_S:
                self.cpu_end = cpu + (wall - at)
            else:
                self.cpu_end = cpu = time.thread_time()
                c._cpu_mark = (cpu, wall)
        c._stack.pop()
        c._closed.append(self)
        c.counts[self.name] += 1


class _CodecSection(_Section):
    """A ``compress`` section of one codec site; sampled calls are also timed against a copy."""

    __slots__ = ("site", "raw", "t0")
    site: str
    raw: Any
    t0: float

    def __enter__(self) -> None:
        c = self.clock
        if c.cpu_clock:
            row = c.codec_totals.get(self.site)
            if row is None:
                row = c.codec_totals[self.site] = [0.0, 0.0, 0, 0, 0, 0]
            row[4] += 1
            c._codec_calls[self.site] = c._codec_calls.get(self.site, 0) + 1
            n = int(row[4])
            if n > CODEC_SKIP_CALLS and n % CODEC_SAMPLE_EVERY == 0:
                self.t0 = time.thread_time()
        _Section.__enter__(self)

    def __exit__(self, *exc: object) -> None:
        _Section.__exit__(self, *exc)
        if self.t0 >= 0 and not exc[0]:
            self.clock._codec_sample(self, time.thread_time() - self.t0)


_new_section = object.__new__
