"""Scaled signSGD as an mpcbench compressor plugin (an example of a third-party package).

Bernstein et al. 2018, "signSGD: Compressed Optimisation for Non-Convex Problems", with
the per-tensor scale of Karimireddy et al. 2019 ("Error Feedback Fixes SignSGD"): send
one bit per value (its sign, 8 signs per byte) and one fp32 scale ``mean |x|``; decode
as ``scale * sign``. Zeros decode to ``+scale`` (a sign bit has no zero); an all-zero
tensor has scale 0 and decodes to zeros. Wrap it as ``ef(signsgd)`` for EF-SignSGD.

Payload: ``(signs uint8 (ceil(numel / 8),), scale fp32 (1,))``: 1/32 of fp32 plus 4 bytes.
"""

from __future__ import annotations

import torch
from torch import Tensor

from compressors import Compressor, Payload, TensorInfo, check_finite, register

__all__ = ["SignSGD"]

_BIT_WEIGHTS = 2 ** torch.arange(8, dtype=torch.uint8)  # LSB-first: sign i -> bit i % 8 of byte i // 8


@register("signsgd")
class SignSGD(Compressor):
    """Scaled sign compression (Bernstein et al. 2018): 1 bit per value plus one fp32 scale (mean |x|)."""

    def compress(self, x: Tensor, info: TensorInfo) -> Payload:
        check_finite(x, info, self.name)
        flat = x.detach().reshape(-1).float()
        scale = flat.abs().mean().reshape(1) if flat.numel() else flat.new_zeros(1)
        bits = (flat >= 0).to(torch.uint8)  # (n,) 1 = non-negative
        bits = torch.nn.functional.pad(bits, (0, (-bits.numel()) % 8)).view(-1, 8)  # (ceil(n/8), 8)
        packed = (bits * _BIT_WEIGHTS.to(x.device)).sum(dim=1, dtype=torch.uint8)  # (ceil(n/8),)
        return packed, scale

    def decompress(self, payload: Payload, info: TensorInfo) -> Tensor:
        packed, scale = payload
        bits = (packed.unsqueeze(1) & _BIT_WEIGHTS.to(packed.device)) != 0  # (ceil(n/8), 8) bool
        signs = bits.reshape(-1)[: info.numel].float() * 2 - 1  # (n,) in {-1, +1}
        return (signs * scale).reshape(info.shape).to(info.dtype)
