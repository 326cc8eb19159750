"""topk, randomk, threshold and the sparse index encodings."""

from __future__ import annotations

import math

import pytest
import torch

import compressors
from compressors import TensorInfo, TensorRole, payload_nbytes
from compressors.builtins.sparsification import (
    BITMAP,
    DELTA,
    RandomK,
    Threshold,
    TopK,
    decode_into,
    encode_positions,
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
    pos = {
        "contiguous": torch.arange(500, 30_500),
        "dense_random": torch.randperm(n, generator=g)[: n // 2],
        "sparse_random": torch.randperm(n, generator=g)[:1000],
        "strided": torch.arange(0, n, 7),
        "wide_gaps": torch.tensor([3, 40_000, 99_999]),  # w = 16 bits > 8: the wide path
        "single": torch.tensor([77]),
        "all": torch.arange(n),
    }[case].sort().values
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
    c = TopK(ratio=0.1)
    p, y = _rt(c, x, receiver=TopK(ratio=0.1))
    k = math.ceil(0.1 * x.numel())
    assert p[0].numel() == k
    top = x.abs().flatten().topk(k).indices
    expected = torch.zeros(x.numel()).index_put_((top,), x.flatten()[top]).view_as(x)
    assert torch.equal(y, expected)
    assert float(y[y != 0].abs().min()) >= float(x.abs().flatten().kthvalue(x.numel() - k).values)


def test_topk_per_sample_gives_every_sample_its_budget():
    x = _randn(6, 40)
    x[0] *= 100  # whole-tensor topk would spend the budget on sample 0
    _, y = _rt(TopK(ratio=0.1, per_sample=True), x)
    assert ((y != 0).sum(1) == 4).all()
    _, y_global = _rt(TopK(ratio=0.1), x)
    assert int((y_global[0] != 0).sum()) == 24
    for b in range(6):
        top = x[b].abs().topk(4).indices
        assert torch.equal(y[b, top], x[b, top])


def test_topk_payload_is_values_plus_cheapest_index_bytes():
    x = _randn(8, 64, 32, 32)
    p, y = _rt(compressors.build("topk"), x)
    values, index, tag = p
    k = math.ceil(0.1 * x.numel())
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
