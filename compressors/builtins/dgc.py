"""Deep Gradient Compression as published (Lin, Han, Mao, Wang and Dally 2018, "Deep Gradient
Compression: Reducing the Communication Bandwidth for Distributed Training", ICLR 2018).

``dgc(ratio=0.001, momentum=0.9, clip=0.0, warmup_steps=0)`` compresses data-parallel weight
gradients (one instance per DDP bucket and replica) with the paper's four parts:

- **momentum correction**: each replica keeps its own velocity ``u = momentum * u + g`` and
  accumulates it, ``v = v + u``; what it sends is a sparse part of ``v``, so the update that
  arrives is momentum SGD's, not plain SGD's on accumulated gradients. The optimizer then steps
  with momentum 0 (``suite.pipeline.optimizer``: a cell running ``dgc`` names the same momentum
  in its optimizer, and the runtime moves it here);
- **local gradient clipping**: before ``g`` is accumulated, its 2-norm is clipped to
  ``clip / sqrt(N)`` for N replicas (the paper's scaling of the global threshold; 0: no
  clipping). The hook sees one DDP bucket at a time, so the norm is the bucket's;
- **momentum factor masking**: at every sent position both ``u`` and ``v`` are zeroed, so stale
  momentum does not push a coordinate again after it was applied;
- **exponential sparsity warm-up**: over the first ``warmup_steps`` steps the density falls in
  ``warmup_stages`` equal stages from 25 % by the same factor each stage to ``ratio`` (the
  paper's 75 %, 93.75 %, 98.4375 %, 99.6 %, then 99.9 % sparsity for ratio 0.001 and 4 stages).

Selection is ``threshold``'s (the top-``ratio`` magnitude estimated on a ``sample`` of ``|v|``,
everything above it sent; the paper's sampled threshold), with its payload: sent bytes are the
values and positions that cross the wire. Without ``momentum`` (0) and ``clip`` (0) and with no
warm-up it is threshold sparsification with error feedback, ``ef(threshold(...))`` up to the
positions' masking of the residual.
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch
from torch import Tensor

from ..api import Compressor, Payload, TensorInfo, TensorRole
from ..registry import check_range, register
from ._common import require_finite
from .sparsification import Threshold

__all__ = ["DGC", "warmup_density"]

_START_DENSITY = 0.25  # the paper's first warm-up stage: 75 % sparsity


def warmup_density(step: int, ratio: float, warmup_steps: int, stages: int) -> float:
    """The density sent at ``step``: ``ratio`` after the warm-up, else stage ``i = step * stages //
    warmup_steps`` of an exponential fall from 25 % (``0.25 * (ratio / 0.25) ** (i / stages)``)."""
    if step >= warmup_steps or ratio >= _START_DENSITY:
        return ratio
    i = step * stages // warmup_steps
    return _START_DENSITY * (ratio / _START_DENSITY) ** (i / stages)


@register("dgc")
class DGC(Compressor):
    """DGC on data-parallel weight gradients (see the module docstring)."""

    roles = frozenset({TensorRole.WEIGHT_GRAD})

    def __init__(
        self,
        ratio: float = 0.001,
        momentum: float = 0.9,
        clip: float = 0.0,
        warmup_steps: int = 0,
        warmup_stages: int = 4,
        sample: float = 0.01,
    ) -> None:
        self.ratio = check_range("dgc", "ratio", ratio, 1e-6, 1.0)
        self.momentum = check_range("dgc", "momentum", momentum, 0.0, 0.999)
        self.clip = check_range("dgc", "clip", clip, 0.0, 1e6)
        self.warmup_steps = check_range("dgc", "warmup_steps", warmup_steps, 0, 10**9, integer=True)
        self.warmup_stages = check_range("dgc", "warmup_stages", warmup_stages, 1, 64, integer=True)
        self.sample = check_range("dgc", "sample", sample, 1e-6, 1.0)
        self._select: dict[float, Threshold] = {}
        self._u: Tensor | None = None  # velocity (momentum correction)
        self._v: Tensor | None = None  # accumulated velocity not yet sent

    def _selector(self, density: float) -> Threshold:
        if density not in self._select:
            self._select[density] = Threshold(ratio=density, sample=self.sample)
        return self._select[density]

    def compress(self, x: Tensor, info: TensorInfo) -> Payload:
        g = x.detach().reshape(-1).float()
        require_finite(g, info, self.name, summary=g.sum())
        if not info.training:  # no state to update: the current gradient alone
            return self._selector(self.ratio).compress(g, info)
        if self._u is None or self._u.shape != g.shape or self._u.device != g.device:
            self._u, self._v = torch.zeros_like(g), torch.zeros_like(g)
        assert self._v is not None
        if self.clip > 0:  # local clipping at the global threshold scaled by N^-1/2
            limit = self.clip / math.sqrt(max(1, info.replicas or 1))
            norm = float(torch.linalg.vector_norm(g))
            if norm > limit:
                g = g * (limit / norm)
        self._u.mul_(self.momentum).add_(g)
        self._v.add_(self._u)
        density = warmup_density(info.step, self.ratio, self.warmup_steps, self.warmup_stages)
        sel = self._selector(density)
        payload = sel.compress(self._v, info)
        sent = sel.decompress(payload, _flat(info, self._v))
        mask = sent != 0  # threshold sends only nonzero values, so this is exactly the sent set
        self._v.masked_fill_(mask, 0.0)  # momentum factor masking: both buffers at the sent positions
        self._u.masked_fill_(mask, 0.0)
        return payload

    def decompress(self, payload: Payload, info: TensorInfo) -> Tensor:
        return self._selector(self.ratio).decompress(payload, info)

    def reset(self) -> None:
        self._u = self._v = None

    def to(self, device: torch.device) -> Compressor:
        if self._u is not None and self._v is not None:
            self._u, self._v = self._u.to(device), self._v.to(device)
        return self

    def state_nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self._u, self._v) if t is not None)


def _flat(info: TensorInfo, v: Tensor) -> TensorInfo:
    """``info`` for the fp32 flat state ``v`` (the sender's own decode of what it sent)."""
    return replace(info, shape=v.shape, dtype=v.dtype, device=v.device)
