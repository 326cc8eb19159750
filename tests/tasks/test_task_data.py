"""Shared data helpers (no real data needed): sampling order, subsets, cache, errors, schedules."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tasks import DataMissingError
from tasks.cifar10 import random_crop_flip
from tasks.data import SampleOrder, cached_arrays, fixed_subset, require
from tasks.schedules import warmup_cosine, warmup_linear


def test_sample_order_covers_each_epoch_once():
    pool = torch.arange(100, 130)  # 30 samples
    order = SampleOrder(pool, batch_size=10, seed=3)
    epoch0 = torch.cat([order.indices(s) for s in range(3)])
    assert sorted(epoch0.tolist()) == list(range(100, 130))
    epoch1 = torch.cat([order.indices(s) for s in range(3, 6)])
    assert sorted(epoch1.tolist()) == list(range(100, 130))
    assert not torch.equal(epoch0, epoch1), "each epoch is reshuffled"


def test_sample_order_batch_straddling_epochs():
    order = SampleOrder(torch.arange(7), batch_size=5, seed=0)
    stream = torch.cat([order.indices(s) for s in range(7)])  # 35 = 5 epochs of 7
    for e in range(5):
        assert sorted(stream[7 * e : 7 * e + 7].tolist()) == list(range(7))


def test_sample_order_deterministic_and_seeded():
    pool = torch.arange(1000)
    a, b, c = SampleOrder(pool, 16, 0), SampleOrder(pool, 16, 0), SampleOrder(pool, 16, 1)
    assert all(torch.equal(a.indices(s), b.indices(s)) for s in range(5))
    assert not torch.equal(a.indices(0), c.indices(0))


def test_dp_shards_partition_the_global_batch():
    pool = torch.arange(1000)
    whole = SampleOrder(pool, batch_size=12, seed=5)
    shard = SampleOrder(pool, batch_size=4, seed=5)
    for step in range(4):
        parts = [shard.indices(step, r, 3) for r in range(3)]
        assert torch.equal(torch.cat(parts), whole.indices(step))


def test_fixed_subset_is_seed_independent_and_sorted():
    s = fixed_subset(1000, 50)
    assert torch.equal(s, fixed_subset(1000, 50)) and len(s.unique()) == 50
    assert torch.equal(s, s.sort().values)
    assert not torch.equal(s, fixed_subset(1000, 50, salt=1))
    assert torch.equal(fixed_subset(10, None), torch.arange(10))


def test_cached_arrays_builds_once(tmp_path, monkeypatch):
    monkeypatch.setenv("MPCBENCH_CACHE_DIR", str(tmp_path))
    calls = []

    def build():
        calls.append(1)
        return {"x": np.arange(6, dtype=np.uint8).reshape(2, 3), "y": np.array([1, 2])}

    a = cached_arrays("thing", "k1", build)
    b = cached_arrays("thing", "k1", build)
    assert len(calls) == 1
    np.testing.assert_array_equal(a["x"], b["x"])
    assert b["x"].dtype == np.uint8 and not b["x"].flags.writeable  # memory-mapped, read-only
    cached_arrays("thing", "k2", build)  # another key (changed source) rebuilds
    assert len(calls) == 2


def test_cache_without_meta_is_rebuilt(tmp_path, monkeypatch):
    monkeypatch.setenv("MPCBENCH_CACHE_DIR", str(tmp_path))
    (tmp_path / "thing-k").mkdir()
    (tmp_path / "thing-k" / "x.npy").write_bytes(b"garbage from an interrupted run")
    out = cached_arrays("thing", "k", lambda: {"x": np.ones(3)})
    np.testing.assert_array_equal(out["x"], np.ones(3))


def test_require_names_path_and_fix(tmp_path):
    with pytest.raises(DataMissingError, match=r"data\.txt not found.*MPCBENCH_DATA_DIR.*or download it"):
        require(tmp_path / "data.txt", "download it")


def test_random_crop_flip_matches_a_reference_loop():
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (6, 3, 5, 7), generator=g, dtype=torch.uint8)
    dy = torch.tensor([0, 8, 4, 2, 8, 0])
    dx = torch.tensor([0, 8, 4, 5, 0, 3])
    flip = torch.tensor([False, True, False, True, True, False])
    out = random_crop_flip(images, dy, dx, flip, pad=4)
    padded = torch.nn.functional.pad(images, (4, 4, 4, 4))
    for i in range(6):
        ref = padded[i, :, dy[i] : dy[i] + 5, dx[i] : dx[i] + 7]
        if flip[i]:
            ref = ref.flip(-1)
        assert torch.equal(out[i], ref), f"sample {i}"
    assert torch.equal(out[2], images[2]), "offset (pad, pad) without flip is the identity"


def _lrs(sched, opt, n):
    out = []
    for _ in range(n):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


def test_schedules_warm_up_and_decay():
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=1.0)
    lrs = _lrs(warmup_cosine(opt, steps=10, warmup=2, final_frac=0.1), opt, 10)
    assert lrs[0] == pytest.approx(0.5) and lrs[1] == pytest.approx(1.0)
    assert lrs[-1] == pytest.approx(0.1) and all(a >= b for a, b in zip(lrs[1:], lrs[2:]))
    opt = torch.optim.SGD([p], lr=1.0)
    lrs = _lrs(warmup_linear(opt, steps=10, warmup=0), opt, 10)
    assert lrs[0] == pytest.approx(1.0) and lrs[-1] == pytest.approx(0.1)
