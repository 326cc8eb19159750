"""Fast paths of the built-ins (compressors/builtins/_fast.py, topk_positions, bitpack lanes)
match their references: exact selection with documented ties, table lookups equal casts,
compiled twins equal their eager bodies (the compile itself is ``slow``: tens of seconds)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

from compressors import TensorInfo, TensorRole, build
from compressors.builtins import sparsification
from compressors.builtins._fast import Fused, abs_ge, dequant, fp8_decode, nonzero_1d, quant_codes, row_minmax
from compressors.builtins.sparsification import (
    Threshold,
    TopK,
    rowwise_topk_mask,
    rowwise_topk_positions,
    stratum_positions,
    topk_positions,
)


def _reference_topk(x: torch.Tensor, k: int) -> torch.Tensor:
    """The documented selection: k largest |x|, ties -> lowest positions, sorted."""
    order = torch.sort(-x.abs().float(), stable=True).indices  # descending |x|, ties by position
    return order[:k].sort().values


def _randn(n: int, seed: int = 0, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(n, generator=torch.Generator().manual_seed(seed)).to(dtype)


# --------------------------------------------------------------------------- topk selection
@pytest.mark.parametrize("n", [1, 100, 20_000, 100_000])  # small path and sampled path (n >= 16384)
@pytest.mark.parametrize("ratio", [1e-4, 0.1, 0.5, 0.97])
def test_topk_positions_are_exactly_the_k_largest(n, ratio):
    x = _randn(n, seed=n)
    k = max(1, math.ceil(ratio * n))
    assert torch.equal(topk_positions(x, k), _reference_topk(x, k))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_topk_ties_keep_the_lowest_positions(dtype):
    x = _randn(100_000, dtype=dtype)  # bf16: hundreds of values tie at the threshold
    for k in (1, 777, 10_000):
        pos = topk_positions(x, k)
        assert torch.equal(pos, _reference_topk(x, k)), k
    coarse = torch.tensor([1.0, -1.0, 0.5, 1.0, -0.5, 1.0, 0.0, -1.0] * 5_000)  # massive ties
    for k in (3, 10_000, 25_000):
        assert torch.equal(topk_positions(coarse, k), _reference_topk(coarse, k)), k


@pytest.mark.parametrize("bound", ["too_high", "zero"])
def test_topk_is_exact_when_the_sample_bound_is_wrong(monkeypatch, bound):
    x = _randn(100_000, seed=3)
    k = 10_000
    wrong = {"too_high": x.abs().max(), "zero": torch.tensor(0.0)}[bound]
    monkeypatch.setattr(sparsification, "_sample_lower_bound", lambda *a: wrong)
    bits = {"too_high": lambda b, k: (b & 0x7FFFFFFF).max(axis=1), "zero": lambda b, k: np.zeros(b.shape[0], b.dtype)}
    monkeypatch.setattr(sparsification, "_row_lower_bounds", bits[bound])
    assert torch.equal(topk_positions(x, k), _reference_topk(x, k))
    rows = x.view(10, -1)
    assert torch.equal(rowwise_topk_positions(rows, 1_000), _old_rowwise(rows, 1_000))


def _old_rowwise(rows: torch.Tensor, k: int) -> torch.Tensor:
    """The selection before the CPU path (issue 28): kthvalue per row + a tie mask, in torch."""
    return torch.nonzero(rowwise_topk_mask(rows, k).reshape(-1)).squeeze(1)


def _tied(shape: tuple[int, ...], seed: int, levels: int, dtype) -> torch.Tensor:
    """Values from a few magnitudes with both signs and zeros: heavy ties at every threshold."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-levels, levels + 1, shape, generator=g).to(dtype) / 4
    return x


_SHAPES = [(1, 5), (3, 7), (4, 1000), (2, 9000), (32, 64, 32), (8, 40_000), (3, 70_001), (1, 300_000), (700, 24)]


@pytest.mark.parametrize("shape", _SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("data", ["normal", "ties", "zeros"])
def test_rowwise_positions_equal_the_torch_selection_bit_for_bit(shape, dtype, data):
    """The CPU path (sampled bound, blocked scan, NumPy selection on magnitude bits) keeps
    exactly the positions the previous torch code kept, for many shapes, ratios and ties."""
    n_rows = shape[0]
    seed = sum(shape)
    if data == "normal":
        x = _randn(math.prod(shape), seed=seed, dtype=dtype)
    elif data == "ties":
        x = _tied(shape, seed, 3, dtype).reshape(-1)
    else:
        x = torch.zeros(math.prod(shape), dtype=dtype)
        x[::7] = -0.0
    rows = x.view(n_rows, -1)
    s = rows.shape[1]
    for ratio in (1e-4, 0.01, 0.1, 0.37, 0.9, 1.0):
        k = min(s, max(1, math.ceil(ratio * s)))
        got = rowwise_topk_positions(rows, k)
        assert got.dtype == torch.int64
        assert torch.equal(got, _old_rowwise(rows, k)), (ratio, k)
        if n_rows == 1:
            assert torch.equal(topk_positions(x, k), _reference_topk(x, k)), (ratio, k)


def test_topk_compressor_output_is_unchanged_per_sample_and_per_token():
    """Round trips of the CPU path equal a dense rebuild from the previous selection."""
    for x in (_randn(8 * 3 * 40 * 40, seed=11).view(8, 3, 40, 40), _tied((4, 9, 700), 12, 2, torch.bfloat16)):
        info = TensorInfo(TensorRole.ACTIVATION, 0, 0, 0, x.shape, x.dtype, x.device, seed=1)
        for gran in ("sample", "token", "tensor"):
            c = TopK(ratio=0.1, granularity=gran)
            rows = x.reshape(c._rows(x), -1)
            k = max(1, math.ceil(0.1 * rows.shape[1] - 1e-9))
            keep = rowwise_topk_mask(rows, k).reshape(x.shape)
            assert torch.equal(c.decompress(c.compress(x, info), info), torch.where(keep, x, torch.zeros_like(x))), gran


def test_topk_result_does_not_depend_on_the_sample_seed():
    x = _randn(100_000, seed=4)
    a = topk_positions(x, 1_234, torch.Generator().manual_seed(1))
    b = topk_positions(x, 1_234, torch.Generator().manual_seed(2))
    assert torch.equal(a, b)


def test_topk_compressor_per_sample_uses_the_same_selection():
    x = torch.tensor([[3.0, -3.0, 1.0, 3.0], [0.0, 0.0, 0.0, 0.0], [1.0, 2.0, -2.0, 2.0]])
    info = TensorInfo(TensorRole.ACTIVATION, 0, 0, 0, x.shape, x.dtype, x.device, seed=1)
    c = TopK(ratio=0.5, granularity="sample")
    y = c.decompress(c.compress(x, info), info)
    expected = torch.tensor([[3.0, -3.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0], [0.0, 2.0, -2.0, 0.0]])
    assert torch.equal(y, expected)


def test_threshold_cap_keeps_exactly_the_target_with_documented_ties():
    x = torch.ones(50_000)  # every value ties with the sampled threshold
    info = TensorInfo(TensorRole.WEIGHT_GRAD, 0, 0, 0, x.shape, x.dtype, x.device, seed=0)
    values, _, _ = Threshold(ratio=0.01).compress(x, info)
    y = Threshold(ratio=0.01).decompress(Threshold(ratio=0.01).compress(x, info), info)
    assert values.numel() == 500 and torch.equal(y.nonzero().squeeze(1), torch.arange(500))


# --------------------------------------------------------------------------- device picks
def test_nonzero_1d_matches_torch():
    m = _randn(10_001, seed=5) > 0.3
    assert torch.equal(nonzero_1d(m), torch.nonzero(m).squeeze(1))
    assert nonzero_1d(torch.zeros(0, dtype=torch.bool)).dtype == torch.int64


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_row_minmax_matches_aminmax_including_nan_and_inf(dtype):
    x = _randn(300 * 77, seed=6, dtype=dtype).view(300, 77)
    x[3, 5], x[7, 1], x[9, 2] = float("nan"), float("inf"), -float("inf")
    for got, want in zip(row_minmax(x), torch.aminmax(x, dim=1)):
        assert torch.equal(got.isnan(), want.isnan()) and torch.equal(got.nan_to_num(), want.nan_to_num())


def test_fp8_table_decode_equals_the_cast_for_every_code():
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8).reshape(16, 16)
    scale = torch.tensor([0.37])
    cast = (codes.view(torch.float8_e4m3fn).float() * scale).to(torch.bfloat16)
    assert torch.equal(fp8_decode(codes, scale, torch.bfloat16).isnan(), cast.isnan())
    assert torch.equal(fp8_decode(codes, scale, torch.bfloat16).nan_to_num(), cast.nan_to_num())


# --------------------------------------------------------------------------- compiled twins
def test_compile_mode_selects_devices(monkeypatch):
    f = Fused(lambda x: x + 1)
    monkeypatch.setenv("MPCBENCH_COMPILE", "auto")
    assert not f.use_compiled(torch.device("cpu")) and f.use_compiled(torch.device("cuda"))
    monkeypatch.setenv("MPCBENCH_COMPILE", "0")
    assert not f.use_compiled(torch.device("cuda"))
    monkeypatch.setenv("MPCBENCH_COMPILE", "1")
    assert f.use_compiled(torch.device("cpu"))
    monkeypatch.setenv("MPCBENCH_COMPILE", "sometimes")
    with pytest.raises(ValueError, match="MPCBENCH_COMPILE"):
        f.use_compiled(torch.device("cpu"))


def test_a_failing_compile_falls_back_to_eager_with_one_warning(monkeypatch):
    def broken_compile(fn, **kw):
        def run(*a, **k):
            raise RuntimeError("no C++ compiler")

        return run

    monkeypatch.setenv("MPCBENCH_COMPILE", "1")
    monkeypatch.setattr(torch, "compile", broken_compile)
    f = Fused(abs_ge.eager)
    x = _randn(100)
    with pytest.warns(RuntimeWarning, match="no C.. compiler"):
        assert torch.equal(f(x, torch.tensor(0.5)), x.abs() >= 0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the second call neither retries nor warns
        assert torch.equal(f(x, torch.tensor(0.5)), x.abs() >= 0.5)
    assert "no C++ compiler" in f.broken


def _kernel_cases(device: torch.device):
    g = torch.Generator().manual_seed(7)
    x = torch.randn(64, 1000, generator=g).to(device)
    lo, hi = torch.aminmax(x, dim=1)
    step = (hi - lo) / 255
    codes = torch.randint(0, 256, (64, 1000), generator=g, dtype=torch.uint8).to(device)
    thr = torch.tensor(0.8, device=device)
    edges = torch.arange(302, device=device) * 1003 // 301  # randomk's strata: sizes 3 and 4
    return [
        (abs_ge, (x, thr)),
        (abs_ge, (x.bfloat16(), thr.bfloat16())),
        (quant_codes, (x, lo, 1.0 / step, 255)),
        (quant_codes, (x.bfloat16(), lo, 1.0 / step, 15)),
        (dequant, (codes, lo, step, torch.float32)),
        (dequant, (codes, lo, step, torch.bfloat16)),
        (fp8_decode, (codes, torch.tensor([0.25], device=device), torch.float32)),
        (stratum_positions, (edges[:-1], torch.diff(edges), 0x9E3779B9, 0xFFFFFFFF)),
    ]


def _assert_twin_matches(f: Fused, args) -> None:
    eager = f.eager(*args)
    compiled = Fused(f.eager).compiled()(*args)  # a fresh twin: errors raise instead of falling back
    assert compiled.dtype == eager.dtype and compiled.shape == eager.shape
    if f is dequant:  # lo + c * step: an FMA may round once instead of twice
        torch.testing.assert_close(compiled.float(), eager.float(), rtol=2 * torch.finfo(eager.dtype).eps, atol=1e-6)
    else:
        assert torch.equal(compiled.nan_to_num(), eager.nan_to_num()), f.eager.__name__


@pytest.mark.slow
def test_compiled_twins_equal_eager_on_cpu():
    """Inductor's CPU backend (needs a C++ compiler; ~1-2 min cold, seconds when cached)."""
    try:
        Fused(abs_ge.eager).compiled()(torch.ones(4), torch.tensor(0.5))
    except Exception as e:
        pytest.skip(f"torch.compile unavailable on CPU here: {type(e).__name__}: {str(e)[:120]}")
    for f, args in _kernel_cases(torch.device("cpu")):
        _assert_twin_matches(f, args)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_compiled_twins_equal_eager_on_cuda():
    for f, args in _kernel_cases(torch.device("cuda")):
        _assert_twin_matches(f, args)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize(
    "spec", ["quant", "quant(bits=4)", "quant(scale=block)", "fp8", "topk", "topk(granularity=tensor)"]
)
def test_cuda_fast_paths_decode_like_cpu(spec):
    """Payloads made on CUDA (compiled twins on) decode to what CPU eager makes, within fp32 rounding."""
    x = _randn(8 * 64 * 256, seed=9).view(8, 64, 256)
    out = []
    for dev in ("cpu", "cuda"):
        xd = x.to(dev)
        info = TensorInfo(TensorRole.ACTIVATION, 0, 0, 0, xd.shape, xd.dtype, xd.device, seed=5)
        c = build(spec)
        out.append(c.decompress(c.compress(xd, info), info).cpu())
    torch.testing.assert_close(out[1], out[0], rtol=1e-6, atol=1e-6)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_topk_selection_on_cuda_equals_the_cpu_path_bit_for_bit(dtype):
    """CUDA keeps the torch selection (kthvalue / topk + tie mask); the CPU path (NumPy on
    magnitude bits) must keep the same positions, ties included."""
    for shape in [(8, 64, 256), (4, 70_001), (1, 300_000)]:
        for data in ("normal", "ties"):
            x = _randn(math.prod(shape), seed=7, dtype=dtype) if data == "normal" else _tied(shape, 7, 3, dtype)
            rows = x.reshape(shape[0], -1)
            k = math.ceil(0.1 * rows.shape[1])
            cpu = rowwise_topk_positions(rows, k)
            assert torch.equal(rowwise_topk_positions(rows.cuda(), k).cpu(), cpu), (shape, data)
            if shape[0] == 1:
                assert torch.equal(topk_positions(rows.reshape(-1).cuda(), k).cpu(), cpu), (shape, data)
