"""Data parallelism on the pp x dp grid: DDP per stage with a compressed communication hook.

Rank layout: ``suite.pipeline.placement`` (``rank = dp_rank * P + stage % P`` for P pipeline
ranks per replica). The dp replicas of a pipeline rank form one process group, shared by
the stages that rank holds; each replica's stage module is wrapped in
``torch.nn.parallel.DistributedDataParallel`` on that group, with a communication hook
built from the plan's ``dp`` compressor spec (any registered compressor). Per DDP bucket
``x`` (the flattened local gradients, shape (n,)) the hook returns the replica mean:

1. ``compressor.reduce(x, info, all_reduce)`` if it implements a custom scheme (PowerSGD
   all-reduces P, then Q); ``all_reduce`` is the runtime's, so its bytes are counted;
2. else, if ``compressor.linear``: all-reduce the payload tensors (sum) and decompress once;
3. else: all-gather the framed payloads (sizes exchanged first; equal sizes use one
   all-gather, different sizes one broadcast per replica, so no padding crosses the wire),
   decompress each replica's payload and average.

One compressor instance per bucket (state such as error feedback is per bucket and per
replica). Gradients accumulate locally over the M micro-batches: forwards run under
``no_sync`` and the reducer is armed just before the last micro-batch's backward (the
same thing ``torch.distributed.pipelining`` does), so exactly one reduction per step.

Counted bytes (key ``dp.s{stage}.allreduce|allgather``): the bytes each replica contributes
per collective call (the size exchange of the all-gather path included), summed over
replicas; raw = the bucket's uncompressed gradient. Not counted: DDP's one-time parameter
and buffer broadcast at construction (replicas start identical anyway); buffers are not
synchronized during training (``forward_sync_buffers=False``). Learned compressors' parameters (not inside the DDP module)
are averaged with a plain all-reduce after backward, counted the same way.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator, Mapping

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel

from compressors.api import Compressor, TensorInfo, TensorRole
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
    """Stage -> the process group of its dp replicas: one group per pipeline rank, created in
    the same order on every rank (every rank must call this)."""
    groups = [
        dist.new_group([placement.address(p, d) for d in range(placement.dp_size)], backend=backend)
        for p in range(placement.n_ranks)
    ]
    return {s: groups[placement.pp_rank(s)] for s in range(placement.n_stages)}


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
    ) -> None:
        self.spec = spec
        self.stage = stage
        self.group = group
        self.replicas = dist.get_world_size(group)
        self.me = dist.get_rank(group)
        self.group_ranks = dist.get_process_group_ranks(group)
        self.meter = meter
        self.clock = clock
        self.seed = seed
        self.features = features or {}
        self.step = 0
        self.compressed = True
        self._instances: dict[int, Compressor] = {}
        self._plain = NoCompression()
        self._plain.spec = "none"

    def compressors(self) -> list[Compressor]:
        return list(self._instances.values())

    def _instance(self, bucket: int, device: torch.device) -> Compressor:
        if bucket not in self._instances:
            c = build(self.spec)
            c.bind(self.features)
            self._instances[bucket] = c.to(device)
        return self._instances[bucket]

    # --- counted collectives -------------------------------------------------------------
    def _all_reduce(self, t: Tensor) -> Tensor:
        t = t.contiguous().clone()
        with self.clock.section("comm"):
            dist.all_reduce(t, group=self.group)
        self.meter.record(dp_key(self.stage, "allreduce"), 0, t.numel() * t.element_size())
        return t

    def _all_gather_frames(self, buf: Tensor) -> list[Tensor]:
        n = torch.tensor([buf.numel()], dtype=torch.int64, device=buf.device)
        sizes = [torch.empty_like(n) for _ in range(self.replicas)]
        with self.clock.section("comm"):
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
        self.meter.record(dp_key(self.stage, "allgather"), 0, n.numel() * 8 + buf.numel(), messages=2)
        return out

    # --- the hook ----------------------------------------------------------------------------
    def run(self, bucket: dist.GradBucket) -> torch.futures.Future:
        """Reduce one DDP bucket; returns a completed future holding the replica mean."""
        x = bucket.buffer()  # (n,) local gradients of this bucket
        mean = self.reduce(x, bucket.index())
        fut: torch.futures.Future = torch.futures.Future()
        fut.set_result(mean.to(x.dtype).reshape(x.shape))
        return fut

    def reduce(self, x: Tensor, bucket: int) -> Tensor:
        """The replica mean of ``x`` through the configured compressor."""
        comp = self._instance(bucket, x.device) if self.compressed else self._plain
        info = TensorInfo(
            role=TensorRole.WEIGHT_GRAD,
            boundary=bucket,
            microbatch=0,
            step=self.step,
            shape=x.shape,
            dtype=x.dtype,
            device=x.device,
            seed=derive_seed(self.seed, "dp", self.stage, bucket, self.step),
        )
        raw = x.numel() * x.element_size()
        if _has_reduce(comp):
            out = comp.reduce(x, info, self._all_reduce)
            if out is not None:
                self.meter.record(dp_key(self.stage, "allreduce"), raw, 0, messages=0)
                return _check_output(out, comp, info, what="reduce")
        d = self.replicas
        with self.clock.section("compress"):
            payload = _check_payload(comp.compress(x, info), comp, info)
        if comp.linear:
            self.meter.record(dp_key(self.stage, "allreduce"), raw, 0, messages=0)
            summed = tuple(self._all_reduce(t) for t in payload)
            with self.clock.section("compress"):
                return _check_output(comp.decompress(summed, info), comp, info) / d
        self.meter.record(dp_key(self.stage, "allgather"), raw, 0, messages=0)
        frames = self._all_gather_frames(frame(payload, x.shape, x.dtype, x.device))
        with self.clock.section("compress"):
            total = torch.zeros_like(x)
            for f in frames:
                p, _, _ = unframe(f)
                total += _check_output(comp.decompress(p, info), comp, info)
            return total / d

    def average(self, params: list[nn.Parameter]) -> None:
        """Plain mean all-reduce of extra gradients (learned compressors' parameters)."""
        for p in params:
            if p.grad is not None:
                p.grad.copy_(self._all_reduce(p.grad) / self.replicas)


def _has_reduce(comp: Compressor) -> bool:
    return type(comp).reduce is not Compressor.reduce


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
