"""The DiLoCo-style outer loop of data parallelism (``sync: outer(h=H)``, ``suite.pipeline.sync``).

Each replica trains its stages alone for ``H`` steps with the task's optimizer (no data-parallel
traffic; the inner optimizer's state stays local, as in DiLoCo). Then, per stage:

1. pseudo-gradient ``delta = theta_outer - theta_local`` (one flat tensor of the stage's
   parameters, learned boundary codecs' included; ``info.segments`` gives their shapes);
2. the replica mean of ``delta`` through :class:`~suite.pipeline.data_parallel.CompressedReduce`
   with the plan's ``dp`` compressor in the ``pseudo_grad`` role: the same three paths as the
   per-step hook (a compressor's own ``reduce``, all-reduce of a linear code's payloads, else
   all-gather of frames), the same counting (meter keys ``dp.s{stage}.allreduce|allgather``, on the
   step the synchronization follows), one compressor instance per stage and side of the
   collective, so ``ef(...)`` keeps its residual across outer steps;
3. the outer optimizer (``torch.optim.SGD`` with ``lr``, ``momentum``, Nesterov by default) steps
   ``theta_outer`` with that mean as its gradient, and every replica copies ``theta_outer`` into
   its parameters.

It runs after the step's inner optimizer, every ``H`` steps and after the last step, blocking:
no overlap with the next inner steps (Streaming DiLoCo's overlap and fragments are not built;
docs/ARCHITECTURE.md, "Data parallel"). With one replica the reduction is local (the code is
applied and the bytes it would send are counted), so a single-process run equals torchrun.
With ``H = 1``, ``none``, ``lr = 1`` and no momentum it is plain data parallelism for an SGD inner
optimizer (tested).
"""

from __future__ import annotations

import time
from typing import Sequence

import torch
from torch import Tensor, nn

from .data_parallel import CompressedReduce
from .sync import DPSync

__all__ = ["OuterLoop", "flatten", "unflatten_into"]


def flatten(tensors: Sequence[Tensor]) -> Tensor:
    """One contiguous copy of ``tensors`` laid end to end (their dtype)."""
    return torch.cat([t.detach().reshape(-1) for t in tensors]) if tensors else torch.zeros(0)


def unflatten_into(flat: Tensor, tensors: Sequence[Tensor]) -> None:
    """Copy consecutive slices of ``flat`` into ``tensors`` (in place)."""
    off = 0
    for t in tensors:
        n = t.numel()
        t.copy_(flat[off : off + n].view_as(t))
        off += n


class OuterLoop:
    """The outer loop of one stage on one replica (see the module docstring)."""

    def __init__(self, params: list[nn.Parameter], sync: DPSync, reducer: CompressedReduce) -> None:
        """``params``: the stage module's parameters (learned boundary codecs' stay per replica: they
        may be created lazily, on their first message)."""
        self.params = [p for p in params if p.requires_grad]
        self.sync = sync
        self.reducer = reducer
        self.segments = tuple(p.shape for p in self.params)
        with torch.no_grad():
            self.anchor = nn.Parameter(flatten(self.params).clone())  # theta_outer, the shared parameters
        self.optimizer = torch.optim.SGD(
            [self.anchor], lr=sync.lr, momentum=sync.momentum, nesterov=sync.nesterov and sync.momentum > 0
        )
        self.local_s: list[float] = []  # per synchronization: seconds outside the collectives

    @torch.no_grad()
    def synchronize(self, step: int) -> None:
        """Average the pseudo-gradients over the replicas, step the outer optimizer, copy back."""
        t0 = time.perf_counter()
        comm0 = self.reducer.comm_wall_s
        delta = self.anchor.detach() - flatten(self.params)  # the pseudo-gradient
        self.reducer.step = step  # ``compressed`` is the training loop's (uncompressed warm-up steps)
        mean = self.reducer.reduce(delta, 0, self.segments)
        self.anchor.grad = mean.to(self.anchor.dtype)
        self.optimizer.step()
        self.anchor.grad = None
        unflatten_into(self.anchor.detach(), [p.data for p in self.params])
        comm = self.reducer.comm_wall_s - comm0
        self.local_s.append(max(0.0, time.perf_counter() - t0 - comm))

    def state_nbytes(self) -> int:
        """Bytes of outer state per replica: the anchor and the momentum buffer."""
        n = self.anchor.numel() * self.anchor.element_size()
        return n * (2 if self.sync.momentum > 0 else 1)
