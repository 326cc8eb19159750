"""Low-precision float casts: fp16, bf16 and fp8 (e4m3 with a per-tensor scale).

fp16/bf16: the mixed-precision cast used as the simplest activation compressor in
pipeline training (Micikevicius et al. 2018, "Mixed Precision Training").
fp8: the OCP 8-bit float format E4M3 (Micikevicius et al. 2022, "FP8 Formats for Deep
Learning") with a per-tensor amax scale, as in Transformer Engine's delayed scaling
(here: current scaling, the scale travels with the payload).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..api import Compressor, CompressorError, Payload, TensorInfo, check_finite
from ..registry import register
from ._common import require_finite
from ._fast import fp8_decode

__all__ = ["FP16", "BF16", "FP8"]

_E4M3_MAX = 448.0


class _Cast(Compressor):
    fixed_size = True  # payload layout follows from the input shape (one message per payload)
    wire_dtype: torch.dtype

    def compress(self, x: Tensor, info: TensorInfo) -> Payload:
        require_finite(x, info, self.name)  # one read (a sum), not isfinite's four passes
        return (x.detach().to(self.wire_dtype).contiguous(),)

    def decompress(self, payload: Payload, info: TensorInfo) -> Tensor:
        return payload[0].to(info.dtype)


@register("fp16")
class FP16(_Cast):
    """Cast to IEEE half precision (2 bytes per value). Values beyond 65504 overflow to Inf,
    so the input is checked for range and a clear error is raised instead."""

    wire_dtype = torch.float16

    def compress(self, x: Tensor, info: TensorInfo) -> Payload:
        x = x.detach()
        if x.numel():
            # one pass gives both checks: min/max are non-finite iff x is, max |x| = max(hi, -lo)
            lo, hi = (float(v) for v in torch.stack(torch.aminmax(x)).float().tolist())
            if not (math.isfinite(lo) and math.isfinite(hi)):
                check_finite(x, info, self.name)
            if max(hi, -lo) > 65504.0:
                raise CompressorError(
                    f"fp16: |x| exceeds 65504 at {info.role.value} boundary {info.boundary}; use bf16 or fp8"
                )
        return (x.to(torch.float16).contiguous(),)


@register("bf16")
class BF16(_Cast):
    """Cast to bfloat16 (2 bytes per value, fp32 range, 8-bit mantissa)."""

    wire_dtype = torch.bfloat16


@register("fp8")
class FP8(Compressor):
    """FP8 E4M3 with a per-tensor scale: x / s is cast to float8_e4m3fn, s = amax / 448.

    Payload: (codes uint8 viewed from float8, scale fp32 scalar) = 1 byte per value + 4.
    """

    fixed_size = True  # payload layout follows from the input shape (one message per payload)

    def compress(self, x: Tensor, info: TensorInfo) -> Payload:
        xf = x.detach().float()
        if xf.numel():
            lo, hi = torch.aminmax(xf)  # one pass, no |x| temporary; max |x| = max(hi, -lo) exactly
            amax = torch.maximum(hi, -lo)  # NaN/Inf propagate
        else:
            amax = xf.new_zeros(())
        require_finite(x, info, self.name, summary=amax)
        scale = torch.where(amax > 0, amax / _E4M3_MAX, torch.ones_like(amax)).reshape(1)
        codes = (xf / scale).to(torch.float8_e4m3fn).view(torch.uint8)
        return codes.contiguous(), scale.float()

    def decompress(self, payload: Payload, info: TensorInfo) -> Tensor:
        codes, scale = payload
        return fp8_decode(codes, scale, info.dtype).reshape(info.shape)
