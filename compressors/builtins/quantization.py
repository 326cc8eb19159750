"""Uniform quantization to 1..8 bits (``quant``) and QSGD (``qsgd``), both really bit-packed.

``quant`` is min-max (asymmetric, zero-point) uniform quantization as used for
activation compression in pipeline training, e.g. "GACT" (Liu et al. 2022) and
"ActNN" (Chen et al. 2021, per-group min-max with stochastic rounding); blockwise scales
follow Dettmers et al. 2022, "8-bit Optimizers via Block-wise Quantization".
The reference variants of the activation-compression study (Rudakov et al. 2023,
"Activations and Gradients Compression for Model-Parallel Training", arXiv:2401.07788) and
AQ-SGD's code (Wang et al. 2022) are available by name: ``quant(scale=tensor)`` is the
study's min-max "quantization_simple" (one min and max for the whole tensor);
``quant(range=absmax, scale=feature)`` is its "quantization_acsgd" (AQ-SGD's fixpoint
quantizer: symmetric absmax codes, one scale per feature over the batch, i.e.
``scale_dims=(0,)`` of the (B, n) flattened activation); ``quant(range=absmax,
scale=channel)`` is AQ-SGD's GPT setting (``scale_dims=(0, 1)`` of (B, T, d): one scale per
hidden channel).
``qsgd`` is QSGD (Alistarh et al. 2017, "QSGD: Communication-Efficient SGD via Gradient
Quantization and Encoding"): per-bucket norm, sign and stochastically rounded level.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..api import Compressor, CompressorError, Payload, TensorInfo
from ..registry import check_choice, check_range, register
from ._common import device_generator, matrix_shape, require_finite
from ._fast import dequant, quant_codes, row_minmax
from .bitpack import pack, unpack

__all__ = ["Quant", "QSGD"]

_SCALES = ("tensor", "row", "block", "sample", "feature", "channel")
_RANGES = ("minmax", "absmax")
_TRANSPOSED = ("feature", "channel")  # groups run across the memory layout: codes are stored untransposed
_ROUNDINGS = ("nearest", "stochastic")
_SALT_ROUNDING = 0x51  # separates the rounding noise stream from other uses of info.seed
_TINY = torch.finfo(torch.float32).tiny


def _empty_like_info(info: TensorInfo) -> Tensor:
    return torch.zeros(info.shape, dtype=info.dtype, device=info.device)


@register("quant")
class Quant(Compressor):
    """Uniform quantization to 1-8 bits, bit-packed: min-max (ActNN, Chen et al. 2021; GACT, Liu et al.
    2022) or absmax (AQ-SGD's fixpoint quantizer, Wang et al. 2022).

    ``range=minmax`` (default): each group of values is mapped to ``2**bits`` evenly spaced
    levels between its minimum ``lo`` and maximum ``hi``: ``code = round((x - lo) / step)``,
    ``step = (hi - lo) / (2**bits - 1)``, decoded as ``lo + code * step``. Asymmetric
    because post-ReLU/GELU activations are skewed: a symmetric grid wastes half its levels.
    ``range=absmax``: symmetric, ``s = max |x|`` of the group, ``step = s / 2**(bits-1)``,
    ``lo = -s``: codes ``-2**(bits-1) .. 2**(bits-1) - 1`` around zero (zero is exact; the
    top code is clipped, so ``+s`` decodes to ``s - step``), as AQ-SGD's ``_compress_nbits``. Rounding ``nearest`` has error at
    most ``step / 2``; ``stochastic`` (noise from ``info.seed``, so reproducible) is
    unbiased with error below ``step``.

    Scale groups (``scale=``):
        tensor: one ``(lo, step)`` pair for the tensor, sent as fp32.
        row: one pair per row; a row is ``x[i, j]`` (all trailing dims) for rank >= 3, i.e.
            per token for ``(B, T, d)`` and per sample-channel plane for ``(B, C, H, W)``;
            per row for rank 2; the whole tensor for rank <= 1 (flat DDP buckets).
        block: one pair per ``block`` consecutive values of the flattened tensor
            (blockwise quantization, Dettmers et al. 2022).
        sample: one pair per sample ``x[b]``.
        feature: one pair per position of ``x[0]`` (over the batch dim), AQ-SGD's
            ``scale_dims=(0,)`` on the flattened (B, n) activation.
        channel: one pair per index of the last dim (over all other dims): per hidden
            channel of (B, T, d), AQ-SGD's ``scale_dims=(0, 1)``.
        Rank <= 1 tensors are one group for row, sample, feature and channel.
    Row and block scales travel as fp16 *relative to* one fp32 per-tensor magnitude
    (``max |x|``), so fp16's range never clips tiny gradients; the sender quantizes against
    the rounded scales, so the receiver reconstructs exactly what the sender computed.

    Payload: tensor: ``(codes uint8, scales fp32 (1, 2))``;
    row/block: ``(codes uint8, scales fp16 (groups, 2), magnitude fp32 (1,))``.
    ``codes`` holds ``ceil(numel * bits / 8)`` bytes (two 4-bit or four 2-bit codes per byte).
    """

    fixed_size = True  # payload layout follows from the input shape (one message per payload)

    def __init__(
        self, bits: int = 8, scale: str = "row", block: int = 64, rounding: str = "nearest", range: str = "minmax"
    ):  # noqa: A002  (the spec parameter's name)
        self.bits = check_range("quant", "bits", bits, 1, 8, integer=True)
        self.scale = check_choice("quant", "scale", scale, _SCALES)
        self.range = check_choice("quant", "range", range, _RANGES)
        self.block = check_range("quant", "block", block, 2, 1 << 20, integer=True)
        self.rounding = check_choice("quant", "rounding", rounding, _ROUNDINGS)
        self.levels = (1 << self.bits) - 1

    # (numel,) -> (groups, group_size); block mode pads the tail with zeros; feature / channel
    # return a transposed (strided) view: group g is a column of the (B, n) or (N, d) layout
    def _groups(self, flat: Tensor, shape: torch.Size) -> Tensor:
        if self.scale == "tensor" or (len(shape) < 2 and self.scale != "block"):
            return flat.view(1, -1)
        if self.scale == "row":
            return flat.view(*matrix_shape(shape))
        if self.scale == "sample":
            return flat.view(shape[0], -1)
        if self.scale == "feature":
            return flat.view(shape[0], -1).t()  # (n, B)
        if self.scale == "channel":
            return flat.view(-1, shape[-1]).t()  # (d, N)
        pad = (-flat.numel()) % self.block
        if pad:
            flat = torch.nn.functional.pad(flat, (0, pad))
        return flat.view(-1, self.block)

    def compress(self, x: Tensor, info: TensorInfo) -> Payload:
        n = x.numel()
        if n == 0:
            return (torch.empty(0, dtype=torch.uint8, device=x.device),)
        g = self._groups(x.detach().reshape(-1), x.shape)  # (G, S) in x's dtype (no fp32 copy)
        lo, hi = (v.float() for v in row_minmax(g))  # (G,) each, exact; NaN/Inf propagate
        require_finite(x, info, self.name, summary=lo + hi)
        if self.range == "absmax":
            hi = torch.maximum(lo.abs(), hi.abs())  # s
            lo = -hi
            step = hi / (1 << (self.bits - 1))
        else:
            step = (hi - lo) / self.levels
        if self.scale == "tensor":
            scales = torch.stack([lo, step], dim=1)  # (1, 2) fp32
            extra: tuple[Tensor, ...] = ()
        else:
            mag = torch.maximum(lo.abs().amax(), hi.abs().amax())
            mag = torch.where(mag > 0, mag, torch.ones_like(mag)).reshape(1)  # (1,) fp32
            scales = (torch.stack([lo, step], dim=1) / mag).to(torch.float16)  # (G, 2) fp16
            extra = (mag,)
            lo, step = (scales.float() * mag).unbind(1)  # what the receiver will use
        # zero (or subnormal) range: every code 0, decoded as lo; 1/step stays finite otherwise
        inv_step = torch.where(step >= _TINY, 1.0 / step, torch.zeros_like(step))
        if self.rounding == "nearest":  # one fused kernel on CUDA (see _fast)
            codes = quant_codes(g, lo, inv_step, self.levels)  # (G, S) uint8
        else:
            t = (g.float() - lo[:, None]).mul_(inv_step[:, None])  # (G, S) in [0, levels] up to scale rounding
            gen = device_generator(info, x.device, _SALT_ROUNDING)
            t.add_(torch.rand(t.shape, generator=gen, device=t.device)).floor_()
            codes = t.clamp_(0, self.levels).to(torch.uint8)
        codes = codes.t().reshape(-1) if self._transposed(x.shape) else codes.reshape(-1)[:n]
        return (pack(codes, self.bits), scales.contiguous(), *extra)

    def _transposed(self, shape: torch.Size) -> bool:
        return self.scale in _TRANSPOSED and len(shape) >= 2

    def decompress(self, payload: Payload, info: TensorInfo) -> Tensor:
        n = info.numel
        if n == 0:
            return _empty_like_info(info)
        codes = unpack(payload[0], self.bits, n)  # (n,) uint8
        scales = payload[1].float()
        if self.scale != "tensor":
            scales = scales * payload[2]
        lo, step = scales.unbind(1)  # (G,) each
        g = self._groups(codes, info.shape)  # (G, S) uint8; block mode zero-pads the tail
        x = dequant(g, lo, step, info.dtype)  # lo + code * step, one fused kernel on CUDA
        if self._transposed(info.shape):
            return x.t().reshape(info.shape)
        return x.reshape(-1)[:n].reshape(info.shape)


@register("qsgd")
class QSGD(Compressor):
    """QSGD (Alistarh et al. 2017): per-bucket L2 norm, sign and a stochastic level.

    The flattened tensor is cut into buckets of ``bucket`` values (0: one bucket, the
    paper's basic scheme; the paper's experiments bucket to cut variance). Each value
    becomes ``norm * sign(v) * xi / levels`` where ``xi`` is ``|v| / norm * levels``
    rounded stochastically to a neighbouring integer, so the estimate is unbiased with
    variance at most ``min(d / levels**2, sqrt(d) / levels) * norm**2`` per bucket of ``d``
    values. Sign and level are packed together as one code ``sign*xi + levels`` of
    ``ceil(log2(2*levels + 1))`` bits (default 15 levels: 5 bits). Fixed-width codes
    replace the paper's Elias coding (a GPU-friendly simplification).

    Payload: ``(codes uint8, norms fp32 (buckets,))``.
    """

    fixed_size = True  # payload layout follows from the input shape (one message per payload)

    def __init__(self, levels: int = 15, bucket: int = 128):
        self.levels = check_range("qsgd", "levels", levels, 1, 127, integer=True)
        self.bucket = check_range("qsgd", "bucket", bucket, 0, 1 << 24, integer=True)
        if self.bucket == 1:
            raise CompressorError("qsgd: parameter bucket=1 is not allowed; use 0 (whole tensor) or >= 2")
        self.bits = math.ceil(math.log2(2 * self.levels + 1))

    def _buckets(self, flat: Tensor) -> Tensor:
        if self.bucket == 0:
            return flat.view(1, -1)
        pad = (-flat.numel()) % self.bucket
        if pad:
            flat = torch.nn.functional.pad(flat, (0, pad))
        return flat.view(-1, self.bucket)

    def compress(self, x: Tensor, info: TensorInfo) -> Payload:
        n = x.numel()
        if n == 0:
            return (torch.empty(0, dtype=torch.uint8, device=x.device),)
        v = self._buckets(x.detach().reshape(-1).float())  # (G, d)
        norms = torch.linalg.vector_norm(v, dim=1)  # (G,)
        require_finite(x, info, self.name, summary=norms)
        scale = torch.where(norms >= _TINY, self.levels / norms, torch.zeros_like(norms))  # (G,)
        r = v.abs().mul_(scale[:, None])  # |v| / norm * levels, in [0, levels]
        gen = device_generator(info, x.device, _SALT_ROUNDING)
        xi = r.add_(torch.rand(r.shape, generator=gen, device=r.device)).floor_().clamp_(0, self.levels)
        codes = xi.copysign_(v).add_(self.levels).to(torch.uint8).reshape(-1)[:n]  # sign*xi + levels
        return pack(codes, self.bits), norms

    def decompress(self, payload: Payload, info: TensorInfo) -> Tensor:
        n = info.numel
        if n == 0:
            return _empty_like_info(info)
        codes, norms = payload
        level = unpack(codes, self.bits, n).float() - self.levels
        level = self._buckets(level)  # (G, d), zero padded like the sender's
        x = level * (norms / self.levels)[:, None]
        return x.reshape(-1)[:n].reshape(info.shape).to(info.dtype)
