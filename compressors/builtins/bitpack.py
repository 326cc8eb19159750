"""Bit packing of 1..8-bit unsigned codes into a uint8 byte stream (exact inverse).

The stream is LSB-first: code ``i`` occupies bits ``[i*bits, (i+1)*bits)`` of the
stream, and bit ``j`` of the stream is bit ``j % 8`` of byte ``j // 8``. It is
``ceil(numel * bits / 8)`` bytes long, the information-theoretic minimum for fixed-width
codes. Two paths produce the same bytes:

* 1, 2, 4, 8 bits: ``8 // bits`` codes share one byte (8 bits: the codes themselves).
* 3, 5, 6, 7 bits: 8 codes fill exactly ``bits`` bytes; each group of 8 is assembled in an
  int64 (at most 56 bits) and split into bytes.

Everything is vectorized torch and runs on the codes' device. Codes must already be in
``[0, 2**bits)``; higher bits are masked off, not checked (checking would cost a sync).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..api import CompressorError

__all__ = ["pack", "unpack", "packed_nbytes"]


def packed_nbytes(numel: int, bits: int) -> int:
    """Bytes of ``numel`` codes of ``bits`` bits once packed."""
    return (numel * bits + 7) // 8


def _check_bits(bits: int) -> None:
    if isinstance(bits, bool) or not isinstance(bits, int) or not 1 <= bits <= 8:
        raise CompressorError(f"bitpack: bits={bits!r} must be an integer in [1, 8]")


def _pad_to(flat: Tensor, multiple: int) -> Tensor:
    pad = (-flat.numel()) % multiple
    return torch.nn.functional.pad(flat, (0, pad)) if pad else flat


def pack(codes: Tensor, bits: int) -> Tensor:
    """Pack unsigned codes (any shape, any integer dtype, values < 2**bits) into a 1D uint8 tensor."""
    _check_bits(bits)
    flat = codes.reshape(-1)
    n = flat.numel()
    mask = (1 << bits) - 1
    if bits == 8:
        return flat.to(torch.uint8).contiguous()
    if 8 % bits == 0:  # 1, 2, 4 bits: (n/per, per) codes -> one byte per row
        per = 8 // bits
        c = _pad_to(flat.to(torch.uint8) & mask, per).view(-1, per)
        shifts = torch.arange(0, 8, bits, dtype=torch.uint8, device=c.device)  # (per,)
        return (c << shifts).sum(dim=1, dtype=torch.uint8)
    # 3, 5, 6, 7 bits: 8 codes -> one int64 word of 8*bits bits -> `bits` bytes
    c = _pad_to(flat.to(torch.int64) & mask, 8).view(-1, 8)
    shifts = torch.arange(0, 8 * bits, bits, dtype=torch.int64, device=c.device)  # (8,)
    words = (c << shifts).sum(dim=1, keepdim=True)  # disjoint bit ranges: sum == or
    byte_shifts = torch.arange(0, 8 * bits, 8, dtype=torch.int64, device=c.device)  # (bits,)
    out = ((words >> byte_shifts) & 0xFF).to(torch.uint8).reshape(-1)
    nbytes = packed_nbytes(n, bits)
    return out[:nbytes].clone() if out.numel() != nbytes else out  # own storage, no hidden tail


def unpack(packed: Tensor, bits: int, numel: int) -> Tensor:
    """Inverse of :func:`pack`: the first ``numel`` codes as a 1D uint8 tensor."""
    _check_bits(bits)
    if packed.dtype != torch.uint8 or packed.dim() != 1:
        raise CompressorError(f"bitpack: expected a 1D uint8 tensor, got {packed.dtype} {tuple(packed.shape)}")
    if packed.numel() != packed_nbytes(numel, bits):
        raise CompressorError(
            f"bitpack: {packed.numel()} bytes cannot hold exactly {numel} codes of {bits} bits "
            f"(expected {packed_nbytes(numel, bits)})"
        )
    if bits == 8:
        return packed
    mask = (1 << bits) - 1
    if 8 % bits == 0:
        shifts = torch.arange(0, 8, bits, dtype=torch.uint8, device=packed.device)
        return ((packed.unsqueeze(1) >> shifts) & mask).reshape(-1)[:numel]
    b = _pad_to(packed, bits).view(-1, bits).to(torch.int64)  # (groups, bits)
    byte_shifts = torch.arange(0, 8 * bits, 8, dtype=torch.int64, device=packed.device)
    words = (b << byte_shifts).sum(dim=1, keepdim=True)
    shifts = torch.arange(0, 8 * bits, bits, dtype=torch.int64, device=packed.device)
    return ((words >> shifts) & mask).to(torch.uint8).reshape(-1)[:numel]
