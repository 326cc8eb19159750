"""Data parallelism on the pp x dp grid: DDP per stage with a compressed communication hook.

Rank layout: ``suite.pipeline.placement`` (``rank = dp_rank * P + stage % P`` for P pipeline
ranks per replica). The dp replicas of a pipeline rank form one process group, shared by
the stages that rank holds; each replica's stage module is wrapped in
``torch.nn.parallel.DistributedDataParallel`` on that group, with a communication hook
built from the plan's ``dp`` compressor spec (any registered compressor). Per DDP bucket
``x`` (the flattened local gradients, shape (n,)) the hook returns a future of the replica mean:

1. ``compressor.reduce(x, info, all_reduce)`` if it implements a custom scheme (PowerSGD:
   per parameter matrix, all-reduce the P's, then the Q's). ``info.segments`` holds the
   shapes of the bucket's parameters in bucket order (from ``bucket.gradients()``, checked
   to tile the buffer) and ``info.replicas`` the group size. ``all_reduce(t)`` is the
   runtime's in-place sum (counted); ``all_reduce(t, async_op=True)`` returns a future and
   ``reduce`` may return one, so later rounds run in completion callbacks while the
   backward goes on (as torch's ``powerSGD_hook``);
2. else, if ``compressor.linear``: all-reduce the payload tensors (sum) and decompress once;
3. else: all-gather the framed payloads (sizes exchanged first; equal sizes use one
   all-gather, different sizes one broadcast per replica, so no padding crosses the wire),
   decompress each replica's payload and average.

Collective order: backends pair collectives by issue order, and rounds launched from
callbacks would otherwise race with the next bucket's. Each bucket's reduction is a unit of
the group's ``_Sequencer``: its collectives are issued in the order it launches them, after
every earlier bucket's reduction has finished (later buckets' launches wait in a queue while
their local computation proceeds). DDP waits for every bucket's future at the end of the
backward, so nothing is in flight between steps.

One compressor instance per bucket (state such as error feedback is per bucket and per
replica). Gradients accumulate locally over the M micro-batches: forwards run under
``no_sync`` and the reducer is armed just before the last micro-batch's backward (the
same thing ``torch.distributed.pipelining`` does), so exactly one reduction per step.

Counted bytes (key ``dp.s{stage}.allreduce|allgather``): the bytes each replica contributes
per collective call (the size exchange of the all-gather path included), counted when the
collective is issued, summed over replicas; raw = the bucket's uncompressed gradient. Not
counted: DDP's one-time parameter and buffer broadcast at construction (replicas start
identical anyway); buffers are not synchronized during training
(``forward_sync_buffers=False``). Learned compressors' parameters (not inside the DDP module)
are averaged with a plain all-reduce after backward, counted the same way.

Time: synchronous collectives are charged to ``comm`` and compression to ``compress``; the
rounds of an asynchronous reduction run on the backend's threads, overlapping the backward,
and whatever the backward then waits for them shows in the stage's ``compute``.
"""

from __future__ import annotations

import math
import threading
import time
from contextlib import contextmanager, nullcontext
from typing import Any, Callable, Iterator, Mapping

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel

from compressors.api import Compressor, TensorInfo, TensorRole, chain, completed
from compressors.builtins.baseline import NoCompression
from compressors.registry import build
from compressors.spec import Spec

from .accounting import ByteMeter, dp_key
from .boundary import _check_output, _check_payload, derive_seed
from .placement import Placement
from .timing import Clock
from .transport import frame, unframe

__all__ = ["make_dp_groups", "CompressedReduce", "DDPSync", "wrap_stage"]


def make_dp_groups(placement: Placement, backend: str | None = None) -> dict[int, Any]:
    """Stage -> the process group of its dp replicas: one group per (pipeline rank, tensor-parallel
    rank), created in the same order on every rank (every rank must call this); this process's
    tensor-parallel rank picks its own."""
    groups = {
        (p, t): dist.new_group([placement.address(p, d, t) for d in range(placement.dp_size)], backend=backend)
        for p in range(placement.n_ranks)
        for t in range(placement.tp_size)
    }
    return {s: groups[(placement.pp_rank(s), placement.tp_rank)] for s in range(placement.n_stages)}


class _Sequencer:
    """Issues one dp group's collectives in the same order on every replica.

    Backends pair collectives by the order they are issued, and an asynchronous reduction
    launches its later rounds from completion callbacks, whose timing differs between
    replicas. So every bucket reduction is a *unit*, numbered in the order the hooks start
    (DDP fires them in bucket order, the same on every replica); a unit's collectives are
    issued in the order it launches them, and only once every earlier unit has finished.
    Launches of a later unit wait in a queue (its local computation goes on meanwhile)."""

    def __init__(self) -> None:
        self._cv = threading.Condition(threading.RLock())  # reentrant: a callback may run inline
        self._opened = 0
        self._active = 0
        self._finished: set[int] = set()
        self._queued: dict[int, list[Callable[[], None]]] = {}

    def open(self) -> int:
        with self._cv:
            self._opened += 1
            return self._opened - 1

    def submit(self, unit: int, launch: Callable[[], None]) -> None:
        """Run ``launch`` (which issues one collective) now if ``unit`` is active, else queue it."""
        with self._cv:  # launched under the lock: a queue flush cannot interleave with it
            if unit == self._active:
                launch()
            else:
                self._queued.setdefault(unit, []).append(launch)

    def wait_turn(self, unit: int) -> None:
        """Block until ``unit`` is active (a synchronous collective on the calling thread)."""
        with self._cv:
            self._cv.wait_for(lambda: self._active == unit)

    def finish(self, unit: int) -> None:
        with self._cv:
            self._finished.add(unit)
            while self._active in self._finished:
                self._finished.discard(self._active)
                self._active += 1
                for launch in self._queued.pop(self._active, []):
                    launch()
            self._cv.notify_all()


_SEQUENCERS: dict[int, tuple[Any, _Sequencer]] = {}


def _sequencer(group: Any) -> _Sequencer:
    """The one sequencer of a process group (stages on one rank share their dp group)."""
    entry = _SEQUENCERS.get(id(group))
    if entry is None or entry[0] is not group:
        entry = _SEQUENCERS[id(group)] = (group, _Sequencer())
    return entry[1]


def _settle(out: torch.futures.Future, done: torch.futures.Future, value: Tensor) -> None:
    try:
        done.value()
    except BaseException as e:  # noqa: BLE001 (handed to whoever waits on ``out``)
        out.set_exception(e)
        return
    out.set_result(value)


class CompressedReduce:
    """The DDP communication hook of one stage (see the module docstring).

    ``step`` and ``compressed`` are set by the training loop before each step.
    """

    def __init__(
        self,
        spec: Spec,
        stage: int,
        group: Any,
        meter: ByteMeter,
        clock: Clock,
        seed: int,
        features: Mapping[str, Any] | None = None,
        role: TensorRole = TensorRole.WEIGHT_GRAD,
    ) -> None:
        self.spec = spec
        self.stage = stage
        self.group = group  # None: one replica, reduced in this process (nothing crosses a wire)
        self.replicas = 1 if group is None else dist.get_world_size(group)
        self.me = 0 if group is None else dist.get_rank(group)
        self.group_ranks = [0] if group is None else dist.get_process_group_ranks(group)
        self.meter = meter
        self.clock = clock
        self.seed = seed
        self.features = features or {}
        self.role = role
        self.comm_wall_s = 0.0  # seconds the calling thread spent in synchronous collectives (outer loop)
        self.step = 0
        self.compressed = True
        self._instances: dict[int, Compressor] = {}
        self._plain = NoCompression()
        self._plain.spec = "none"
        self._seq = _Sequencer() if group is None else _sequencer(group)
        self._thread = threading.get_ident()  # the training thread: the only one that may use the clock

    def compressors(self) -> list[Compressor]:
        return list(self._instances.values())

    def _instance(self, bucket: int, device: torch.device) -> Compressor:
        if bucket not in self._instances:
            c = build(self.spec)
            c.bind(self.features)
            self._instances[bucket] = c.to(device)
        return self._instances[bucket]

    # --- counted collectives -------------------------------------------------------------
    def _comm(self) -> Any:
        return self.clock.section("comm") if threading.get_ident() == self._thread else nullcontext()

    def _all_reduce(self, t: Tensor, unit: int, async_op: bool = False) -> Tensor | torch.futures.Future:
        """Sum ``t`` over the replicas in place (a non-contiguous ``t`` is summed in a contiguous
        copy); with ``async_op`` a Future of it. Bytes are counted when the collective is issued."""
        t = t.contiguous()
        nbytes = t.numel() * t.element_size()
        key = dp_key(self.stage, "allreduce")
        if self.group is None:  # one replica: the sum is the tensor (counted as what it would send)
            self.meter.record(key, 0, nbytes)
            return completed(t) if async_op else t
        if not async_op:
            self._seq.wait_turn(unit)
            t0 = time.perf_counter()
            with self._comm():
                dist.all_reduce(t, group=self.group)
            self.comm_wall_s += time.perf_counter() - t0
            self.meter.record(key, 0, nbytes)
            return t
        out: torch.futures.Future = torch.futures.Future(devices=[t.device]) if t.is_cuda else torch.futures.Future()

        def launch() -> None:
            self.meter.record(key, 0, nbytes)
            try:
                work = dist.all_reduce(t, group=self.group, async_op=True)
            except BaseException as e:  # noqa: BLE001 (handed to whoever waits on ``out``)
                out.set_exception(e)
                return
            work.get_future().add_done_callback(lambda f: _settle(out, f, t))

        self._seq.submit(unit, launch)
        return out

    def _all_gather_frames(self, buf: Tensor) -> list[Tensor]:
        if self.group is None:  # one replica: its own frame (counted as what it would send)
            self.meter.record(dp_key(self.stage, "allgather"), 0, 8 + buf.numel(), messages=2)
            return [buf]
        n = torch.tensor([buf.numel()], dtype=torch.int64, device=buf.device)
        sizes = [torch.empty_like(n) for _ in range(self.replicas)]
        t0 = time.perf_counter()
        with self._comm():
            dist.all_gather(sizes, n, group=self.group)
            lengths = [int(s.item()) for s in sizes]
            if len(set(lengths)) == 1:
                out = [torch.empty_like(buf) for _ in range(self.replicas)]
                dist.all_gather(out, buf, group=self.group)
            else:  # different sizes: each replica broadcasts exactly its own bytes
                out = [
                    buf if r == self.me else torch.empty(lengths[r], dtype=torch.uint8, device=buf.device)
                    for r in range(self.replicas)
                ]
                for r in range(self.replicas):
                    dist.broadcast(out[r], src=self.group_ranks[r], group=self.group)
        self.comm_wall_s += time.perf_counter() - t0
        self.meter.record(dp_key(self.stage, "allgather"), 0, n.numel() * 8 + buf.numel(), messages=2)
        return out

    # --- the hook ----------------------------------------------------------------------------
    def run(self, bucket: dist.GradBucket) -> torch.futures.Future:
        """Reduce one DDP bucket; returns a future of the replica mean (completed unless the
        compressor's ``reduce`` is asynchronous)."""
        x = bucket.buffer()  # (n,) local gradients of this bucket
        return self.reduce_async(x, bucket.index(), _segments(x, bucket.gradients()))

    def reduce(self, x: Tensor, bucket: int, segments: tuple[torch.Size, ...] | None = None) -> Tensor:
        """The replica mean of ``x`` through the configured compressor (waits for it)."""
        return self.reduce_async(x, bucket, segments).wait()

    def reduce_async(
        self, x: Tensor, bucket: int, segments: tuple[torch.Size, ...] | None = None
    ) -> torch.futures.Future:
        """A future of the replica mean of ``x`` (shape and dtype of ``x``); may overwrite ``x``."""
        comp = self._instance(bucket, x.device) if self.compressed else self._plain
        if segments is not None and sum(math.prod(s) for s in segments) != x.numel():
            segments = None  # not a layout of this bucket
        info = TensorInfo(
            role=self.role,
            boundary=bucket,
            microbatch=0,
            step=self.step,
            shape=x.shape,
            dtype=x.dtype,
            device=x.device,
            seed=derive_seed(
                self.seed,
                "dp" if self.role is TensorRole.WEIGHT_GRAD else self.role.value,
                self.stage,
                bucket,
                self.step,
            ),
            segments=segments,
            replicas=self.replicas,
        )
        unit = self._seq.open()
        pending = False
        try:
            if _has_reduce(comp):

                def all_reduce(t: Tensor, async_op: bool = False) -> Tensor | torch.futures.Future:
                    return self._all_reduce(t, unit, async_op)

                # the compressor's own reduction: its codec work and the collectives it issues are
                # one block; their exclusive time (collectives on this thread are "comm") is the codec
                with self.clock.codec(f"dp.s{self.stage}.reduce", x):
                    out = comp.reduce(x, info, all_reduce)
                if out is not None:
                    self.meter.record(dp_key(self.stage, "allreduce"), x.numel() * x.element_size(), 0, messages=0)
                    if isinstance(out, torch.futures.Future):
                        fut = chain(out, lambda o: _check_output(o, comp, info, what="reduce"))
                        fut.add_done_callback(lambda _: self._seq.finish(unit))
                        pending = True
                        return fut
                    return completed(_check_output(out, comp, info, what="reduce"))
            return completed(self._reduce_payloads(x, comp, info, unit))
        finally:
            if not pending:
                self._seq.finish(unit)

    def _reduce_payloads(self, x: Tensor, comp: Compressor, info: TensorInfo, unit: int) -> Tensor:
        """The default paths: all-reduce of a linear compressor's payloads, else all-gather."""
        raw = x.numel() * x.element_size()
        d = self.replicas
        with self.clock.codec(f"dp.s{self.stage}.compress", x):
            payload = _check_payload(comp.compress(x, info), comp, info)
        if comp.linear:
            self.meter.record(dp_key(self.stage, "allreduce"), raw, 0, messages=0)
            # summed in place: a payload tensor aliasing the bucket is the runtime's to overwrite,
            # any other may be the compressor's own (state, a cache) and is summed in a copy
            summed = tuple(self._all_reduce(t if _aliases(t, x) else t.clone(), unit) for t in payload)
            with self.clock.codec(f"dp.s{self.stage}.decompress", (x.shape, x.dtype)):
                mean = _check_output(comp.decompress(summed, info), comp, info, payload=summed)
                return mean.div_(d) if _aliases(mean, x) else mean / d  # the bucket itself (none): no copy
        self.meter.record(dp_key(self.stage, "allgather"), raw, 0, messages=0)
        self._seq.wait_turn(unit)
        frames = self._all_gather_frames(frame(payload, x.shape, x.dtype, x.device))
        with self.clock.codec(f"dp.s{self.stage}.decompress", (x.shape, x.dtype)):
            total = torch.zeros_like(x)
            for f in frames:
                p, _, _ = unframe(f)
                total += _check_output(comp.decompress(p, info), comp, info, payload=p)
            return total / d

    def average(self, params: list[nn.Parameter]) -> None:
        """Plain mean all-reduce of extra gradients (learned compressors' parameters)."""
        unit = self._seq.open()
        try:
            for p in params:
                if p.grad is not None:
                    total = self._all_reduce(p.grad, unit)
                    if total is not p.grad:  # a non-contiguous gradient was summed in a copy
                        p.grad.copy_(total)
                    p.grad.div_(self.replicas)
        finally:
            self._seq.finish(unit)


def _has_reduce(comp: Compressor) -> bool:
    return type(comp).reduce is not Compressor.reduce


def _segments(x: Tensor, grads: list[Tensor]) -> tuple[torch.Size, ...] | None:
    """The shapes of the parameters' gradients laid out one after another in bucket ``x``
    (DDP's bucket views), or None if they are not exactly that."""
    base, size, off = x.data_ptr(), x.element_size(), 0
    for g in grads:
        if g.data_ptr() != base + off * size:
            return None
        off += g.numel()
    return tuple(g.shape for g in grads) if off == x.numel() else None


def _aliases(t: Tensor, x: Tensor) -> bool:
    return t.device == x.device and t.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()


class DDPSync:
    """GradSync for a DDP-wrapped stage: accumulate locally, reduce on the last backward."""

    def __init__(self, ddp: DistributedDataParallel, hook: CompressedReduce) -> None:
        self.ddp = ddp
        self.hook = hook

    @contextmanager
    def forward(self) -> Iterator[None]:
        with self.ddp.no_sync():  # no reducer preparation at forward time
            yield

    @contextmanager
    def backward(self, last: bool) -> Iterator[None]:
        if last:
            # Arm the reducer for this backward only: it fires the hook once per bucket with
            # the gradients accumulated over all micro-batches (as torch.distributed.pipelining
            # does for DDP-wrapped stages).
            self.ddp.reducer.prepare_for_backward([])
        yield

    def after_backward(self, extra_params: list[nn.Parameter]) -> None:
        self.hook.average(extra_params)


def wrap_stage(
    module: nn.Module, group: Any, device: torch.device, hook: CompressedReduce
) -> tuple[DistributedDataParallel, DDPSync]:
    """Wrap one stage module in DDP on its dp group with the compressed hook."""
    ddp = DistributedDataParallel(
        module,
        device_ids=[device.index] if device.type == "cuda" else None,
        process_group=group,
        forward_sync_buffers=False,  # no hidden buffer traffic during training
    )

    def compressed_reduce_hook(state, bucket):  # DDP inspects the hook's name and annotations
        return hook.run(bucket)

    ddp.register_comm_hook(state=None, hook=compressed_reduce_hook)
    return ddp, DDPSync(ddp, hook)


class LocalSync:
    """GradSync of a single replica with a ``dp`` compressor (seed 002's one-worker runs): after
    the step's backward the stage's gradients, laid end to end as one bucket, go through the
    compressor in this process (``CompressedReduce`` without a group: the code is applied and the
    bytes one replica would send are counted). ``local_s`` holds the seconds of each step's pass."""

    def __init__(self, module: nn.Module, hook: CompressedReduce) -> None:
        self.params = [p for p in module.parameters() if p.requires_grad]
        self.hook = hook
        self.local_s: list[float] = []

    def forward(self) -> Any:
        return nullcontext()

    def backward(self, last: bool) -> Any:
        return nullcontext()

    @torch.no_grad()
    def after_backward(self, extra_params: list[nn.Parameter]) -> None:
        t0 = time.perf_counter()
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params]
        flat = torch.cat([g.reshape(-1) for g in grads])
        mean = self.hook.reduce(flat, 0, tuple(p.shape for p in self.params))
        off = 0
        for p in self.params:
            n = p.numel()
            p.grad = mean[off : off + n].view_as(p).clone()
            off += n
        self.local_s.append(time.perf_counter() - t0)
