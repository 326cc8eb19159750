"""Bit packing: exact inverse, minimal size, documented LSB-first layout."""

from __future__ import annotations

import math

import pytest
import torch

from compressors import CompressorError
from compressors.builtins.bitpack import pack, pack_wide, packed_nbytes, unpack, unpack_wide


def _codes(n: int, bits: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 1 << bits, (n,), generator=g, dtype=torch.int64).to(torch.uint8)


def _reference_stream(codes: list[int], bits: int) -> list[int]:
    """Pure-Python version of the documented layout."""
    if bits in (1, 2, 4, 8):  # LSB-first, 8 // bits codes per byte
        out = [0] * ((len(codes) * bits + 7) // 8)
        for i, c in enumerate(codes):
            out[i * bits // 8] |= c << (i * bits % 8)
        return out
    out, offset = [], 0  # power-of-two planes, low bits first
    for w in [8] * (bits // 8) + [w for w in (4, 2, 1) if (bits % 8) & w]:
        out += _reference_stream([(c >> offset) & ((1 << w) - 1) for c in codes], w)
        offset += w
    return out


def _expected_nbytes(n: int, bits: int) -> int:
    widths = [8] * (bits // 8) + [w for w in (4, 2, 1) if (bits % 8) & w]
    return sum(math.ceil(n * w / 8) for w in widths)


@pytest.mark.parametrize("bits", range(1, 9))
@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 63, 1000, 1001])
def test_roundtrip_is_exact_and_minimal(bits, n):
    codes = _codes(n, bits, seed=n)
    packed = pack(codes, bits)
    assert packed.dtype == torch.uint8 and packed.dim() == 1
    assert packed.numel() == _expected_nbytes(n, bits) == packed_nbytes(n, bits)
    assert packed.numel() - math.ceil(n * bits / 8) in ((0,) if n % 8 == 0 else (0, 1, 2))
    assert torch.equal(unpack(packed, bits, n), codes)


@pytest.mark.parametrize("bits", range(1, 9))
def test_layout_matches_the_documented_lsb_first_stream(bits):
    codes = _codes(29, bits, seed=bits)
    assert pack(codes, bits).tolist() == _reference_stream(codes.tolist(), bits)


def test_codes_per_byte():
    assert pack(torch.tensor([0x1, 0x2], dtype=torch.uint8), 4).tolist() == [0x21]  # two 4-bit codes per byte
    assert pack(torch.tensor([1, 2, 3, 0], dtype=torch.uint8), 2).tolist() == [0b00111001]  # four 2-bit codes
    assert pack(torch.tensor([1, 0, 1, 1, 0, 0, 0, 1], dtype=torch.uint8), 1).tolist() == [0b10001101]
    assert pack(torch.arange(8, dtype=torch.uint8), 3).numel() == 3  # eight 3-bit codes in 3 bytes


@pytest.mark.parametrize("bits", [1, 7, 9, 16, 17, 31, 40, 63])
def test_wide_values_roundtrip(bits):
    g = torch.Generator().manual_seed(bits)
    values = torch.randint(0, 1 << min(bits, 62), (37,), generator=g)
    values[0] = (1 << bits) - 1  # the largest value fits
    packed = pack_wide(values, bits)
    assert packed.numel() == _expected_nbytes(37, bits)
    assert packed.tolist() == _reference_stream(values.tolist(), bits)
    assert torch.equal(unpack_wide(packed, bits, 37), values)


def test_accepts_any_integer_dtype_and_shape():
    codes = _codes(24, 5).view(2, 3, 4)
    packed = pack(codes.to(torch.int64), 5)
    assert torch.equal(unpack(packed, 5, 24).view(2, 3, 4), codes)


def test_packed_tensor_owns_exactly_its_bytes():
    packed = pack(_codes(13, 3), 3)
    assert packed.untyped_storage().nbytes() == packed.numel()


@pytest.mark.parametrize("bits", [0, 9, 2.0, True])
def test_bad_bits(bits):
    with pytest.raises(CompressorError, match="bits"):
        pack(torch.zeros(4, dtype=torch.uint8), bits)


def test_unpack_checks_the_byte_count():
    with pytest.raises(CompressorError, match="cannot hold exactly"):
        unpack(torch.zeros(3, dtype=torch.uint8), 4, 10)
    with pytest.raises(CompressorError, match="1D uint8"):
        unpack(torch.zeros(3, dtype=torch.int32), 4, 6)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("bits", range(1, 9))
def test_cuda_matches_cpu(bits):
    codes = _codes(1001, bits)
    packed = pack(codes.cuda(), bits)
    assert packed.is_cuda and torch.equal(packed.cpu(), pack(codes, bits))
    assert torch.equal(unpack(packed, bits, 1001).cpu(), codes)
