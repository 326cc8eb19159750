"""Learning-rate schedules shared by the tasks: linear warm-up, then cosine or linear decay.

Each returns a ``LambdaLR`` stepped once per optimizer step over ``steps`` steps: step ``s``
(counted from 0) runs at ``lr * factor(s)``.
"""

from __future__ import annotations

import math

import torch

__all__ = ["warmup_cosine", "warmup_linear"]


def _warmup(s: int, warmup: int) -> float | None:
    return (s + 1) / warmup if s < warmup else None


def warmup_cosine(
    optimizer: torch.optim.Optimizer, steps: int, warmup: int = 0, final_frac: float = 0.0
) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up over ``warmup`` steps, then cosine decay to ``final_frac * lr`` at the last step."""

    def factor(s: int) -> float:
        w = _warmup(s, warmup)
        if w is not None:
            return w
        progress = min(1.0, (s - warmup) / max(1, steps - 1 - warmup))
        return final_frac + (1.0 - final_frac) * 0.5 * (1.0 + math.cos(math.pi * progress))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def warmup_linear(optimizer: torch.optim.Optimizer, steps: int, warmup: int = 0) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up over ``warmup`` steps, then linear decay to 0 after the last step (BERT fine-tuning)."""

    def factor(s: int) -> float:
        w = _warmup(s, warmup)
        if w is not None:
            return w
        return max(0.0, (steps - s) / max(1, steps - warmup))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
