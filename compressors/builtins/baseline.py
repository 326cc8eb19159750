"""The uncompressed baseline: every ranking is relative to it."""

from __future__ import annotations

from torch import Tensor

from ..api import Compressor, Payload, TensorInfo
from ..registry import register

__all__ = ["NoCompression"]


@register("none")
class NoCompression(Compressor):
    """Send the tensor as is (the uncompressed baseline).

    Linear: payloads sum elementwise, so data-parallel reduction is a plain all-reduce.
    """

    fixed_size = True  # payload layout follows from the input shape (one message per payload)

    linear = True

    def compress(self, x: Tensor, info: TensorInfo) -> Payload:
        return (x.detach().contiguous(),)

    def decompress(self, payload: Payload, info: TensorInfo) -> Tensor:
        return payload[0]
