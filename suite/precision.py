"""Mixed precision: the autocast context every stage runs its forward in.

A tier's ``precision`` (``tasks.TierBudget``) decides it: ``fp32`` runs as written, ``bf16``
runs each stage's forward (and the loss / metric) under ``torch.autocast`` with bfloat16.
Parameters, gradients and optimizer state stay fp32 (bf16 needs no loss scaling). The
tensors that cross stage boundaries are whatever autocast produced (bf16 activations and,
from autograd, bf16 activation gradients), so compressors see and the meter counts the
bytes a bf16 pipeline really sends. The unsplit reference uses the same context, so the
two stay comparable.
"""

from __future__ import annotations

import contextlib
from typing import ContextManager

import torch

__all__ = ["autocast"]


def autocast(device: torch.device, dtype: torch.dtype | None) -> ContextManager[object]:
    """``torch.autocast(device.type, dtype)``, or a no-op context when ``dtype`` is None."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)
