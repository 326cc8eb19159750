"""A cell's optimizer when it is not the task's own: momentum SGD (docs/data_parallel.md).

``CellConfig.optimizer`` None trains with the task's optimizer (``Task.make_optimizer``: AdamW for
the language models, Nesterov SGD for cifar10). ``sgd(momentum=0.9, clip=1.0)`` replaces it for
every stage: ``torch.optim.SGD`` (no weight decay, no Nesterov) at the cell's learning rate, the
task's schedule kept, and each step's gradient clipped to a global 2-norm of ``clip`` (0: none)
before the step. Clipping is over the stage's parameters, so it is the whole model's only with one
stage and one tensor-parallel rank, and other cells are refused.

DGC (Lin et al. 2018, ``compressors.builtins.dgc``) carries the momentum and the clipping itself
(momentum correction, local clipping on each replica): the optimizer then applies the replicas'
averaged update with momentum 0 and no second clip (:meth:`OptimizerSpec.for_code`), and
:meth:`OptimizerSpec.check_code` holds the two to one momentum and one clip.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from compressors.api import CompressorError
from compressors.spec import parse_spec

from .errors import ConfigError

__all__ = ["OPTIMIZERS", "MOMENTUM_CODES", "OptimizerSpec", "parse_optimizer"]

OPTIMIZERS = ("sgd",)  # None (the task's own) is the default
_SGD_ARGS = {"momentum": (0.0, 0.999), "clip": (0.0, 1e6)}
# a compressor that applies the optimizer's momentum and clipping on each replica itself
MOMENTUM_CODES = ("dgc",)


@dataclass(frozen=True)
class OptimizerSpec:
    """Momentum SGD: ``momentum`` (0: plain SGD), ``clip`` (max global gradient 2-norm; 0: none)."""

    name: str = "sgd"
    momentum: float = 0.0
    clip: float = 0.0

    def __str__(self) -> str:
        return f"{self.name}(momentum={self.momentum:g}, clip={self.clip:g})"

    def build(self, params: list[Any], lr: float) -> Any:
        import torch

        return torch.optim.SGD(params, lr=lr, momentum=self.momentum, weight_decay=0.0)

    def check_code(self, dp_spec: str, stages: int, tp: int, compress_warmup_steps: int) -> None:
        """Refuse what this optimizer cannot run with the cell's data-parallel code ``dp_spec``."""
        if self.clip and (stages > 1 or tp > 1):
            raise ConfigError(
                f"optimizer {self}: clip is the whole gradient's norm, which needs 1 stage and tp=1 "
                f"(got {stages} stages, tp={tp}); use clip=0 or --stages 1"
            )
        spec = parse_spec(dp_spec)
        if spec.name not in MOMENTUM_CODES:
            return
        kw = dict(spec.kwargs)
        own = {"momentum": float(kw.get("momentum", 0.9)), "clip": float(kw.get("clip", 0.0))}
        if (own["momentum"], own["clip"]) != (self.momentum, self.clip):
            raise ConfigError(
                f"dp code {dp_spec} applies momentum {own['momentum']:g} and clip {own['clip']:g} itself; the optimizer "
                f"{self} must name the same (e.g. --optimizer 'sgd(momentum={own['momentum']:g}, clip={own['clip']:g})')"
            )
        if compress_warmup_steps:
            raise ConfigError(
                f"dp code {dp_spec} carries the momentum: uncompressed warm-up steps would train without it; "
                "use its own warmup_steps (sparsity warm-up) and compress_warmup_steps=0"
            )

    def for_code(self, dp_spec: str) -> OptimizerSpec:
        """The optimizer the stages step with: momentum 0 and no clip when the code applies them."""
        if parse_spec(dp_spec).name in MOMENTUM_CODES:
            return replace(self, momentum=0.0, clip=0.0)
        return self


def parse_optimizer(text: str) -> OptimizerSpec:
    """``sgd``, ``sgd(momentum=0.9)``, ``sgd(momentum=0.9, clip=1.0)``; a bad value names itself."""
    try:
        spec = parse_spec(text)
    except CompressorError as e:
        raise ConfigError(f"optimizer {text!r}: {e}") from None
    if spec.name not in OPTIMIZERS or spec.args:
        raise ConfigError(
            f"unknown optimizer {text!r}; valid: sgd(momentum=M, clip=C), or leave it unset for the task's own"
        )
    out = {}
    for k, v in spec.kwargs:
        if k not in _SGD_ARGS:
            raise ConfigError(f"optimizer {text!r}: unknown parameter {k!r}; valid: {', '.join(_SGD_ARGS)}")
        lo, hi = _SGD_ARGS[k]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (lo <= v <= hi) or math.isnan(v):
            raise ConfigError(f"optimizer {text!r}: {k}={v!r} must be a number in [{lo:g}, {hi:g}]")
        out[k] = float(v)
    return OptimizerSpec(spec.name, **out)
