"""topk, randomk, threshold and the sparse index encodings."""

from __future__ import annotations

import math

import pytest
import torch

import compressors
from compressors import CompressorError, TensorInfo, TensorRole, payload_nbytes
from compressors.builtins._common import counter_hash, counter_key, hash32
from compressors.builtins.sparsification import (
    BITMAP,
    DELTA,
    RandomK,
    Threshold,
    TopK,
    decode_into,
    encode_positions,
    stratum_positions,
)


def _info(x: torch.Tensor, seed: int = 0) -> TensorInfo:
    return TensorInfo(TensorRole.WEIGHT_GRAD, 0, 0, 0, x.shape, x.dtype, x.device, seed=seed)


def _randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _rt(c, x, seed=0, receiver=None):
    info = _info(x, seed)
    p = c.compress(x, info)
    return p, (receiver or c).decompress(p, info)


def _delta_nbytes(pos: torch.Tensor) -> int:
    """Independent size of the delta encoding: k gaps of bit_length(max gap) bits."""
    gaps = [b - a - 1 for a, b in zip([-1] + pos.tolist()[:-1], pos.tolist())]
    w = max(1, max(gaps).bit_length())
    planes = [8] * (w // 8) + [p for p in (4, 2, 1) if (w % 8) & p]  # bitpack's layout
    return sum(math.ceil(len(gaps) * p / 8) for p in planes)


# --------------------------------------------------------------------------- encodings
@pytest.mark.parametrize(
    "case",
    ["contiguous", "dense_random", "sparse_random", "strided", "wide_gaps", "single", "all"],
)
def test_index_encoding_is_the_cheapest_and_exact(case):
    n = 100_000
    g = torch.Generator().manual_seed(1)
    pos = (
        {
            "contiguous": torch.arange(500, 30_500),
            "dense_random": torch.randperm(n, generator=g)[: n // 2],
            "sparse_random": torch.randperm(n, generator=g)[:1000],
            "strided": torch.arange(0, n, 7),
            "wide_gaps": torch.tensor([3, 40_000, 99_999]),  # w = 16 bits > 8: the wide path
            "single": torch.tensor([77]),
            "all": torch.arange(n),
        }[case]
        .sort()
        .values
    )
    index, tag = encode_positions(pos, n)
    bitmap, delta = math.ceil(n / 8), _delta_nbytes(pos)
    assert index.dtype == torch.uint8 and tag.dtype == torch.uint8 and tag.numel() == 2
    assert index.numel() == min(bitmap, delta), (case, index.numel(), bitmap, delta)
    assert int(tag[0]) == (BITMAP if bitmap < delta else DELTA)
    values = torch.arange(1, pos.numel() + 1, dtype=torch.float32)
    dense = decode_into(values, index, tag, n)
    expected = torch.zeros(n).index_put_((pos,), values)
    assert torch.equal(dense, expected)


def test_both_encodings_are_reachable():
    n = 4096
    dense = torch.arange(0, n, 2)  # 50%: gaps of 1 -> 1 bit each = n/2 bits < n bits: delta
    assert int(encode_positions(dense, n)[1][0]) == DELTA
    g = torch.Generator().manual_seed(0)
    rnd = torch.randperm(n, generator=g)[: n // 2].sort().values  # random 50%: bitmap wins
    assert int(encode_positions(rnd, n)[1][0]) == BITMAP


# --------------------------------------------------------------------------- topk
def test_topk_keeps_exactly_the_largest():
    x = _randn(4, 8, 25)
    c = TopK(ratio=0.1, granularity="tensor")
    p, y = _rt(c, x, receiver=TopK(ratio=0.1, granularity="tensor"))
    k = math.ceil(0.1 * x.numel())
    assert p[0].numel() == k
    top = x.abs().flatten().topk(k).indices
    expected = torch.zeros(x.numel()).index_put_((top,), x.flatten()[top]).view_as(x)
    assert torch.equal(y, expected)
    assert float(y[y != 0].abs().min()) >= float(x.abs().flatten().kthvalue(x.numel() - k).values)


def test_topk_per_sample_gives_every_sample_its_budget():
    x = _randn(6, 40)
    x[0] *= 100  # whole-tensor topk would spend the budget on sample 0
    _, y = _rt(TopK(ratio=0.1), x)  # granularity=sample is the default
    assert ((y != 0).sum(1) == 4).all()
    _, y_global = _rt(TopK(ratio=0.1, granularity="tensor"), x)
    assert int((y_global[0] != 0).sum()) == 24
    for b in range(6):
        top = x[b].abs().topk(4).indices
        assert torch.equal(y[b, top], x[b, top])


def test_topk_per_token_keeps_the_budget_of_every_token_with_lowest_position_ties():
    x = _randn(3, 5, 20)
    x[0, 0] *= 100  # a loud token: per-sample topk would spend sample 0's budget on it
    _, y = _rt(TopK(ratio=0.1, granularity="token"), x)
    assert ((y != 0).sum(-1) == 2).all()
    for b in range(3):
        for t in range(5):
            top = x[b, t].abs().topk(2).indices
            assert torch.equal(y[b, t, top], x[b, t, top])
    ties = torch.tensor([[[1.0, -1.0, 1.0, 1.0], [0.5, 2.0, 0.5, 0.5]]])
    _, y = _rt(TopK(ratio=0.5, granularity="token"), ties)
    assert torch.equal(y, torch.tensor([[[1.0, -1.0, 0.0, 0.0], [0.5, 2.0, 0.0, 0.0]]]))


def test_topk_granularities_agree_on_a_single_vector():
    x = _randn(100)  # rank 1 (a gradient bucket): every granularity is the whole tensor
    ys = [_rt(TopK(ratio=0.1, granularity=g), x)[1] for g in ("tensor", "sample", "token")]
    assert torch.equal(ys[0], ys[1]) and torch.equal(ys[0], ys[2])


def test_topk_payload_is_values_plus_cheapest_index_bytes():
    x = _randn(8, 64, 32, 32)
    p, y = _rt(compressors.build("topk"), x)
    values, index, tag = p
    k = 8 * math.ceil(0.1 * x[0].numel())  # per sample (the default granularity)
    assert values.dtype == torch.float32 and values.numel() == k
    pos = (y.flatten() != 0).nonzero().squeeze(1)
    assert index.numel() == min(math.ceil(x.numel() / 8), _delta_nbytes(pos))
    assert payload_nbytes(p) < x.numel() * 4 * 0.15  # values 10% + index < 12.5%


def test_topk_keeps_the_input_dtype_for_values():
    x = _randn(4, 100).to(torch.bfloat16)
    p, y = _rt(TopK(ratio=0.2), x)
    assert p[0].dtype == torch.bfloat16 and y.dtype == torch.bfloat16


# --------------------------------------------------------------------------- randomk
def test_randomk_sends_only_values_and_receiver_finds_the_positions():
    x = _randn(8, 64, 8)
    sender, receiver = RandomK(ratio=0.1), RandomK(ratio=0.1)
    p, y = _rt(sender, x, seed=3, receiver=receiver)
    assert len(p) == 1 and p[0].numel() == math.ceil(0.1 * x.numel())
    kept = y != 0
    assert int(kept.sum()) == p[0].numel() and torch.equal(y[kept], x[kept])
    _, y2 = _rt(sender, x, seed=4)
    assert not torch.equal(y2 != 0, kept)  # a new seed, new positions


def test_randomk_is_linear_for_data_parallel():
    a, b = _randn(4096, seed=1), _randn(4096, seed=2)
    c = RandomK(ratio=0.25)
    info = _info(a, seed=9)
    pa, pb = c.compress(a, info), c.compress(b, info)
    assert RandomK.linear
    summed = c.decompress((pa[0] + pb[0],), info)
    assert torch.allclose(summed, c.decompress(pa, info) + c.decompress(pb, info), rtol=1e-6, atol=1e-6)


def test_randomk_inclusion_probability_and_unbiased_scaling():
    x = _randn(1000) + 2
    hits = torch.zeros(1000)
    means = torch.zeros(1000)
    for s in range(200):
        hits += (_rt(RandomK(ratio=0.1), x, seed=s)[1] != 0).float()
        means += _rt(RandomK(ratio=0.1, unbiased=True), x, seed=s)[1]
    assert float((hits / 200).mean()) == pytest.approx(0.1, abs=1e-6)  # exactly k per draw
    assert float((hits / 200 - 0.1).abs().max()) < 0.1  # every position reachable, roughly uniform
    assert float(((means / 200) - x).mean().abs()) < 0.05  # unbiased
    # unscaled: E||x - C(x)||^2 = (1 - ratio) ||x||^2
    errs = [float((x - _rt(RandomK(ratio=0.1), x, seed=s)[1]).pow(2).sum() / x.pow(2).sum()) for s in range(50)]
    assert sum(errs) / 50 == pytest.approx(0.9, abs=0.02)


def test_randomk_handles_sizes_not_divisible_by_k():
    x = _randn(1003)
    p, y = _rt(RandomK(ratio=0.3), x)
    assert p[0].numel() == math.ceil(0.3 * 1003) and int((y != 0).sum()) == p[0].numel()


_M32 = 0xFFFFFFFF


def _fmix32(x: int) -> int:
    """murmur3's 32-bit finalizer on a Python int (the reference for the tensor version)."""
    x ^= x >> 16
    x = (x * 0x85EBCA6B) & _M32
    x ^= x >> 13
    x = (x * 0xC2B2AE35) & _M32
    return x ^ (x >> 16)


def _reference_hash(key: int, counter: int) -> int:
    """counter_hash's documented formula on Python integers (arbitrary precision: no overflow)."""
    x = ((counter & _M32) * 0x9E3779B9 + (key & _M32)) & _M32
    return _fmix32(_fmix32(x) ^ (key >> 32))


def _reference_positions(seed: int, n: int, k: int) -> list[int]:
    """RandomK's documented selection on Python integers."""
    key = counter_key(seed, 0x52)
    return [i * n // k + ((_reference_hash(key, i) * ((i + 1) * n // k - i * n // k)) >> 32) for i in range(k)]


def _randomk_positions(c: RandomK, n: int, seed: int, device: str = "cpu") -> torch.Tensor:
    x = torch.zeros(n, device=device)
    return c._positions(_info(x, seed), x.device)[0]


def test_counter_hash_matches_the_python_reference():
    """Only exact integer ops: equal to the formula on Python ints, hence on every device."""
    assert _fmix32(1) == 0x514E28B7 and _fmix32(0) == 0  # murmur3 fmix32 known values
    counters = [0, 1, 2, 3, 77, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**32 + 5, 2**40 + 7]
    keys = [0, 1, _M32, 2**64 - 1, counter_key(0), counter_key(12345, 0x52), counter_key(2**63 - 1, 7)]
    for key in keys:
        want = [_reference_hash(key, c) for c in counters]
        got = counter_hash(key, torch.tensor(counters))  # CPU: the NumPy uint32 twin
        assert got.dtype == torch.int64 and got.tolist() == want, key
        assert torch.equal(counter_hash(key, torch.tensor(counters)), got)  # deterministic
        assert hash32(torch.tensor(counters), key & _M32, key >> 32).tolist() == want  # the CUDA path, on CPU
    assert all(0 <= counter_key(s, t) < 2**64 for s in (0, 1, 2**63 - 1, -5) for t in (0, 0x52))
    assert len({counter_key(s, 0x52) for s in range(1000)}) == 1000


@pytest.mark.parametrize("n, ratio", [(1000, 0.1), (1003, 0.3), (4097, 0.01), (10, 1.0), (7, 0.5)])
def test_randomk_positions_follow_the_documented_formula_one_per_stratum(n, ratio):
    c = RandomK(ratio=ratio)
    k = math.ceil(ratio * n - 1e-9)
    for seed in (0, 1, 2**62 + 3):
        pos = _randomk_positions(c, n, seed)
        assert pos.tolist() == _reference_positions(seed, n, k)
        stratum = torch.arange(k)
        assert bool(((pos >= stratum * n // k) & (pos < (stratum + 1) * n // k)).all())  # inside stratum i


def test_stratum_positions_int64_path_equals_the_numpy_path(monkeypatch):
    """The int64 tensor path (CUDA eager, compiled twins) run on CPU gives the NumPy path's positions."""
    edges = torch.arange(1_000_001) * 10_000_019 // 1_000_000  # strata of 10 and 11
    key = counter_key(77, 0x52)
    args = (edges[:-1], torch.diff(edges), key & _M32, key >> 32)
    numpy_path = stratum_positions.eager(*args)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)  # selects the tensor path
    assert torch.equal(stratum_positions.eager(*args), numpy_path)


def test_randomk_keeps_each_element_with_probability_k_over_n():
    """Chi-square over 3000 seeds: each offset in a stratum is uniform, strata are independent."""
    n, k, seeds = 1003, 301, 3000  # strata of 3 and 4 elements
    c = RandomK(ratio=0.3)
    pos = torch.stack([_randomk_positions(c, n, s) for s in range(seeds)])  # (seeds, k)
    start = torch.arange(k) * n // k
    size = (torch.arange(1, k + 1) * n // k - start).double()
    hits = torch.bincount(pos.reshape(-1), minlength=n).double()  # (n,) times each element was kept
    expected = (seeds / size).repeat_interleave(size.long())  # (n,) seeds * P(element kept)
    chi2 = float(((hits - expected) ** 2 / expected).sum())
    dof = float((size - 1).sum())  # 702
    assert abs(chi2 - dof) < 6 * math.sqrt(2 * dof), (chi2, dof)  # chi2 ~ dof +- sqrt(2 dof)
    assert float((hits / seeds - 1 / size.repeat_interleave(size.long())).abs().max()) < 0.05
    # neighbouring strata draw independently: offsets (in units of the stratum) uncorrelated
    u = ((pos - start).double() + 0.5) / size  # (seeds, k) in (0, 1)
    r = torch.corrcoef(torch.stack([u[:, :-1].reshape(-1), u[:, 1:].reshape(-1)]))[0, 1]
    assert abs(float(r)) < 0.02


def test_randomk_positions_depend_on_the_seed_only():
    n = 10_000
    a, b = RandomK(ratio=0.05), RandomK(ratio=0.05)  # two instances: sender and receiver
    assert torch.equal(_randomk_positions(a, n, 11), _randomk_positions(b, n, 11))
    assert torch.equal(_randomk_positions(a, n, 11), _randomk_positions(a, n, 11))  # cached strata
    others = [_randomk_positions(a, n, s) for s in (12, 13, 2**40)]
    base = _randomk_positions(a, n, 11)
    for p in others:
        assert float((p == base).double().mean()) < 0.2  # strata of 20: ~5% coincide by chance


def test_randomk_refuses_strata_beyond_the_32_bit_counter():
    with pytest.raises(CompressorError, match="randomk: .* out of the supported range"):
        RandomK(ratio=1.0)._strata(2**33, 2**33, torch.device("cpu"))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("compile_mode", ["auto", "0"])  # compiled twin on CUDA, and eager
def test_randomk_positions_on_cuda_equal_cpu_bit_for_bit(monkeypatch, compile_mode):
    monkeypatch.setenv("MPCBENCH_COMPILE", compile_mode)
    for n, ratio in [(1003, 0.3), (3 * 2**20 + 17, 0.1), (8 * 2048 * 2048, 0.1)]:
        c = RandomK(ratio=ratio)
        for seed in (0, 5, 2**63 - 1):
            cuda = _randomk_positions(c, n, seed, "cuda")
            assert cuda.device.type == "cuda"
            assert torch.equal(cuda.cpu(), _randomk_positions(c, n, seed)), (n, seed)
    x = _randn(8, 64, 256, seed=9)
    info = _info(x, seed=5)
    cpu = RandomK(ratio=0.1, unbiased=True).compress(x, info)[0]
    xc = x.cuda()
    gpu = RandomK(ratio=0.1, unbiased=True).compress(xc, _info(xc, seed=5))[0]
    assert torch.equal(gpu.cpu(), cpu)


# --------------------------------------------------------------------------- threshold
def test_threshold_payload_size_varies_with_the_data():
    c = Threshold(ratio=0.01, sample=0.01)
    sizes = []
    for seed in range(3):
        x = _randn(200_000, seed=seed)
        p, y = _rt(c, x, seed=seed)
        sizes.append(p[0].numel())
        kept = y != 0
        # a threshold: every kept value is at least as large as every dropped one
        assert float(x[kept].abs().min()) >= float(x[~kept].abs().max())
        assert torch.equal(y[kept], x[kept])
    assert len(set(sizes)) > 1, sizes
    assert all(1000 < s < 3000 for s in sizes), sizes  # ~1% of 200k, sampled estimate


def test_threshold_caps_a_bad_estimate_with_exact_topk():
    x = torch.ones(50_000)  # every magnitude ties with the sampled threshold
    p, y = _rt(Threshold(ratio=0.01), x)
    assert p[0].numel() == 500  # capped to the target, not all 50k
    assert int((y != 0).sum()) == 500


def test_threshold_of_zeros_sends_nothing():
    x = torch.zeros(10_000)
    p, y = _rt(Threshold(), x)
    assert p[0].numel() == 0 and torch.equal(y, x)
    assert payload_nbytes(p) == 2  # the tag only


def test_threshold_sample_is_reproducible():
    x = _randn(100_000)
    a, _ = _rt(Threshold(), x, seed=5)
    b, _ = _rt(Threshold(), x, seed=5)
    assert all(torch.equal(u, v) for u, v in zip(a, b))


@pytest.mark.parametrize("shape, granularity", [((5000,), "sample"), ((4, 8, 16), "sample"), ((4, 8, 16), "tensor")])
def test_topk_bits_quantizes_the_kept_values_to_two_bit_levels(shape, granularity):
    """SparseLoCo's code: top-k positions, values on 2**bits symmetric levels of one absmax scale."""
    x = _randn(*shape)
    plain = compressors.build(f"topk(ratio=0.05, granularity={granularity})")
    c = compressors.build(f"topk(ratio=0.05, granularity={granularity}, bits=2)")
    info = _info(x)
    p_plain, p = plain.compress(x, info), c.compress(x, info)
    y, y_plain = c.decompress(p, info), plain.decompress(p_plain, info)
    assert torch.equal(y != 0, y_plain != 0)  # the same positions
    scale = x.abs().max()
    kept = y[y != 0].abs()
    levels = kept / scale * 3  # |values| are scale / 3 or scale
    assert torch.allclose(levels, levels.round(), atol=1e-4) and set(levels.round().tolist()) <= {1.0, 3.0}
    k = int((y_plain != 0).sum())
    assert payload_nbytes(p) == payload_nbytes(p_plain) - 4 * k + math.ceil(k / 4) + 4  # 2 bits a value + scale
    with pytest.raises(CompressorError, match="bits"):
        compressors.build("topk(bits=9)")
