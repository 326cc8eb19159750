"""quant and qsgd: error bounds per bit width, scale groups, stochastic rounding, packing."""

from __future__ import annotations

import math

import pytest
import torch

import compressors
from compressors import CompressorError, TensorInfo, TensorRole, payload_nbytes
from compressors.builtins.quantization import QSGD, Quant


def _info(x: torch.Tensor, seed: int = 0, role: TensorRole = TensorRole.ACTIVATION) -> TensorInfo:
    return TensorInfo(role, 0, 0, 0, x.shape, x.dtype, x.device, seed=seed)


def _randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _rt(c, x, seed=0):
    info = _info(x, seed)
    p = c.compress(x, info)
    return p, c.decompress(p, info)


def _rel(x, y):
    return float((x - y).norm() / x.norm())


# --------------------------------------------------------------------------- quant
@pytest.mark.parametrize("bits", range(1, 9))
@pytest.mark.parametrize("scale", ["tensor", "row", "block"])
def test_nearest_error_is_at_most_half_a_step(bits, scale):
    x = _randn(4, 6, 40) * 3 + 1
    q = Quant(bits=bits, scale=scale, block=32)
    _, y = _rt(q, x)
    groups = {"tensor": x.reshape(1, -1), "row": x.reshape(24, 40), "block": x.reshape(-1, 32)}[scale]
    lo, hi = groups.min(1).values, groups.max(1).values
    step = ((hi - lo) / (2**bits - 1))[:, None]
    err = (x.reshape(groups.shape) - y.reshape(groups.shape)).abs()
    # half a step, plus the fp16 rounding of row/block scales (relative 2^-11 of |x|max)
    slack = 0.0 if scale == "tensor" else float(x.abs().max()) * 2**-10
    assert bool((err <= step / 2 + slack + 1e-6).all()), float((err - step / 2).max())


def test_error_falls_with_bits_and_matches_uniform_noise_model():
    x = _randn(8, 16, 64)
    errs = [_rel(x, _rt(Quant(bits=b, scale="tensor"), x)[1]) for b in range(1, 9)]
    assert all(a > b for a, b in zip(errs, errs[1:])), errs
    # 8 bits: error ~ step / sqrt(12) per value
    step = float(x.max() - x.min()) / 255
    assert errs[-1] == pytest.approx(step / math.sqrt(12) / float(x.pow(2).mean().sqrt()), rel=0.15)


@pytest.mark.parametrize("bits, per_byte", [(1, 8), (2, 4), (4, 2), (8, 1)])
def test_codes_are_really_bit_packed(bits, per_byte):
    x = _randn(4, 32, 96)
    p, _ = _rt(Quant(bits=bits, scale="tensor"), x)
    assert p[0].dtype == torch.uint8 and p[0].numel() == x.numel() // per_byte
    assert payload_nbytes(p) == x.numel() // per_byte + 8  # + fp32 (lo, step)


@pytest.mark.parametrize("bits", [3, 5, 6, 7])
def test_odd_bit_widths_pack_to_the_minimum(bits):
    x = _randn(1000)
    p, y = _rt(Quant(bits=bits, scale="tensor"), x)
    assert p[0].numel() == 1000 * bits // 8
    assert _rt(Quant(bits=bits, scale="tensor"), _randn(1001))[0][0].numel() - math.ceil(1001 * bits / 8) <= 2
    assert _rel(x, y) < 3 * 2.0**-bits  # ~ range / (2^bits sqrt(12)), range ~ 6.6 sigma


@pytest.mark.parametrize(
    "shape, groups",
    [((8, 64, 4, 4), 8 * 64), ((4, 32, 48), 4 * 32), ((6, 10), 6), ((100,), 1), ((2, 3, 4, 5, 6), 6)],
)
def test_row_scales_one_pair_per_row(shape, groups):
    """A row is x[i, j] over trailing dims for rank >= 3 (per token / per sample-channel plane)."""
    x = _randn(*shape)
    p, y = _rt(Quant(bits=4, scale="row"), x)
    codes, scales, mag = p
    assert scales.shape == (groups, 2) and scales.dtype == torch.float16
    assert mag.shape == (1,) and mag.dtype == torch.float32
    assert y.shape == x.shape


def test_row_scales_isolate_an_outlier_row():
    x = _randn(4, 16, 64)
    x[0, 0] *= 1000  # one token with huge activations (common in transformers)
    row_err = (x - _rt(Quant(bits=4, scale="row"), x)[1])[1:].norm()
    tensor_err = (x - _rt(Quant(bits=4, scale="tensor"), x)[1])[1:].norm()
    assert row_err < tensor_err / 50


def test_block_scales_isolate_an_outlier_block():
    x = _randn(4096)
    x[5] = 500.0
    p, y = _rt(Quant(bits=4, scale="block", block=64), x)
    assert p[1].shape == (64, 2)
    assert _rel(x[64:], y[64:]) < 0.12
    _, y_t = _rt(Quant(bits=4, scale="tensor"), x)
    assert _rel(x[64:], y_t[64:]) > 0.5


def test_block_handles_a_partial_last_block():
    x = _randn(3, 5, 7)  # 105 values, block 64 -> 2 blocks
    p, y = _rt(Quant(bits=8, scale="block", block=64), x)
    assert p[1].shape == (2, 2) and y.shape == x.shape and _rel(x, y) < 0.01


def test_fp16_scales_are_relative_so_tiny_gradients_keep_their_precision():
    x = _randn(16, 64)
    for scale in (1.0, 1e-12, 1e12):
        _, y = _rt(Quant(bits=8, scale="row"), x * scale)
        assert _rel(x * scale, y) < 0.01, scale


def test_stochastic_rounding_is_unbiased_and_reproducible():
    x = _randn(512) * 2
    q = Quant(bits=2, scale="tensor", rounding="stochastic")
    step = float(x.max() - x.min()) / 3
    ys = torch.stack([_rt(q, x, seed=s)[1] for s in range(400)])
    assert float((ys - x).abs().max()) <= step + 1e-5  # never further than one step
    assert float((ys.mean(0) - x).abs().mean()) < 0.05 * step  # unbiased on average
    nearest = _rt(Quant(bits=2, scale="tensor"), x)[1]
    assert float((nearest - x).abs().mean()) > 0.15 * step  # nearest keeps its bias
    a, b, c = (_rt(q, x, seed=s)[0][0] for s in (1, 1, 2))
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_constant_and_zero_tensors_are_exact():
    for value in (0.0, 3.5, -2.0):
        x = torch.full((4, 8, 16), value)
        for scale in ("tensor", "row", "block"):
            assert torch.equal(_rt(Quant(bits=3, scale=scale), x)[1], x), (value, scale)


def test_bf16_and_fp16_inputs_come_back_in_their_dtype():
    for dtype in (torch.bfloat16, torch.float16):
        x = _randn(4, 8, 32).to(dtype)
        _, y = _rt(Quant(bits=8), x)
        assert y.dtype == dtype and _rel(x.float(), y.float()) < 0.02


def test_default_spec_ratio_on_an_activation():
    x = _randn(8, 64, 32, 32)
    p, y = _rt(compressors.build("quant"), x)
    assert 3.9 < x.numel() * 4 / payload_nbytes(p) <= 4.0 and _rel(x, y) < 0.01


def test_quant_parameter_errors():
    with pytest.raises(CompressorError, match=r"^quant: parameter bits=9 must be an integer in \[1, 8\]$"):
        compressors.build("quant(bits=9)")
    with pytest.raises(CompressorError, match="allowed values: tensor, row, block, sample, feature, channel"):
        compressors.build("quant(scale=column)")
    with pytest.raises(
        CompressorError, match="quant: parameter range='max' is not allowed; allowed values: minmax, absmax"
    ):
        compressors.build("quant(range=max)")


# --------------------------------------------------------------------------- qsgd
@pytest.mark.parametrize("levels, bits", [(1, 2), (3, 3), (7, 4), (15, 5), (127, 8)])
def test_qsgd_packs_sign_and_level_into_one_code(levels, bits):
    x = _randn(4096)
    q = QSGD(levels=levels, bucket=128)
    p, y = _rt(q, x)
    assert q.bits == bits and p[0].numel() == 4096 * bits // 8
    assert p[1].shape == (32,) and p[1].dtype == torch.float32
    # every value is norm * k / levels with integer |k| <= levels and the sign of x
    k = y.view(32, 128) / p[1][:, None] * levels
    assert torch.allclose(k, k.round(), atol=1e-4) and float(k.abs().max()) <= levels + 1e-4
    assert bool(((torch.sign(y) == torch.sign(x)) | (y == 0)).all())


def test_qsgd_is_unbiased_with_the_papers_variance_bound():
    x = _randn(256)
    levels, d = 4, 256
    q = QSGD(levels=levels, bucket=0)
    ys = torch.stack([_rt(q, x, seed=s)[1] for s in range(300)])
    var = float((ys - x).pow(2).sum(1).mean())
    bound = min(d / levels**2, math.sqrt(d) / levels) * float(x.pow(2).sum())
    assert var <= bound
    norm = float(x.norm())
    assert float((ys.mean(0) - x).abs().max()) < 4 * norm / levels / math.sqrt(300)


def test_qsgd_error_falls_with_levels_and_smaller_buckets():
    x = _randn(8, 64, 32)
    e = {lv: _rel(x, _rt(QSGD(levels=lv, bucket=128), x)[1]) for lv in (1, 7, 127)}
    assert e[1] > e[7] > e[127] and e[127] < 0.1
    assert _rel(x, _rt(QSGD(levels=7, bucket=32), x)[1]) < _rel(x, _rt(QSGD(levels=7, bucket=0), x)[1])


def test_qsgd_parameter_errors():
    with pytest.raises(CompressorError, match=r"qsgd: parameter levels=200 must be an integer in \[1, 127\]"):
        compressors.build("qsgd(levels=200)")


# --------------------------------------------------------------------------- the reference scopes
def _qrt(spec: str, x: torch.Tensor) -> torch.Tensor:
    c = compressors.build(spec)
    info = TensorInfo(TensorRole.ACTIVATION, 0, 0, 0, x.shape, x.dtype, x.device, seed=0)
    return c.decompress(c.compress(x, info), info)


@pytest.mark.parametrize(
    "scale, dims", [("channel", (0, 1)), ("feature", (0,)), ("sample", (1, 2)), ("tensor", (0, 1, 2))]
)
def test_absmax_matches_the_fixpoint_formula_per_scope(scale, dims):
    """AQ-SGD's fixpoint quantizer: s = amax|x| over ``dims``, code = clip(round(x / s * 2**(b-1)))."""
    torch.manual_seed(0)
    x = torch.randn(4, 6, 10)
    y = _qrt(f"quant(bits=4, range=absmax, scale={scale})", x)
    flat = x if scale != "feature" else x.reshape(4, -1)
    s = flat.abs().amax(dims, keepdim=True)
    ref = ((flat / s * 8).round().clip(-8, 7) / 8 * s).reshape(x.shape)
    torch.testing.assert_close(y, ref, atol=2e-3 * float(s.max()), rtol=0)  # scales travel as fp16
    assert float((y == 0).float().sum()) >= float((ref == 0).float().sum()) - 2  # zero stays (almost always) exact


def test_minmax_tensor_scope_is_the_studys_simple_quantizer():
    x = torch.rand(3, 5, 7) * 4 - 1
    y = _qrt("quant(bits=2, scale=tensor)", x)
    lo, hi = x.min(), x.max()
    ref = lo + torch.round((x - lo) / (hi - lo) * 3) / 3 * (hi - lo)
    torch.testing.assert_close(y, ref, atol=1e-5, rtol=0)
