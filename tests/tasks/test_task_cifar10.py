"""CIFAR-10 specifics: the gpu tier's layout options give the same numbers as the plain path."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from _taskdata import require_data

from tasks import build_task

pytestmark = pytest.mark.data


def _smoke(**extra):
    require_data("cifar10")
    task = build_task("cifar10", tier="smoke")
    task.budget = replace(task.budget, extra={**task.budget.extra, **extra})
    return task


def test_channels_last_batches_and_stages_compute_the_same():
    plain, nhwc = _smoke(), _smoke(channels_last=True)
    a, b = next(iter(plain.train_batches())), next(iter(nhwc.train_batches()))
    assert b.inputs.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(a.inputs, b.inputs) and torch.equal(a.targets, b.targets)
    e = next(iter(nhwc.eval_batches()))
    assert e.inputs.is_contiguous(memory_format=torch.channels_last)
    torch.manual_seed(0)
    s_plain, s_nhwc = plain.build_stages(4), nhwc.build_stages(4)
    assert s_nhwc[0].layers[0].weight.is_contiguous(memory_format=torch.channels_last)
    x, y = a.inputs, b.inputs
    for p, q in zip(s_plain, s_nhwc):
        x, y = p(x, a.inputs), q(y, b.inputs)
    torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-4)


def test_resident_pool_serves_the_training_set_rows():
    task = _smoke()
    images, labels, row = task._pool()
    pool = (row >= 0).nonzero().flatten()
    assert len(pool) == images.shape[0] == task.budget.train_samples
    i = int(pool[7])
    assert torch.equal(images[row[i]], torch.from_numpy(task.data["train_x"][i].copy()))
    assert int(labels[row[i]]) == int(task.data["train_y"][i])


@pytest.mark.parametrize("plan", ["none", "topk"])
def test_gpu_tier_options_train_through_the_pipeline(monkeypatch, plan):
    """bf16 autocast + channels_last + label smoothing + device-resident batches, end to end
    through the runtime, at smoke size (the gpu tier's settings on the smoke budget)."""
    require_data("cifar10")
    from suite.pipeline.config import CellConfig, CompressionPlan
    from suite.pipeline.reference import train_unsplit
    from suite.pipeline.runtime import run
    from tasks.cifar10 import Cifar10

    smoke, gpu = Cifar10.tiers["smoke"], Cifar10.tiers["gpu"]
    extra = {**smoke.extra, "channels_last": True, "label_smoothing": gpu.extra["label_smoothing"]}
    monkeypatch.setitem(Cifar10.tiers, "gpu", replace(smoke, precision="bf16", extra=extra))
    cfg = CellConfig(
        task="cifar10", tier="gpu", device="cpu", plan=CompressionPlan(plan, plan), eval_uncompressed=False
    )
    r = run(cfg)
    assert all(torch.isfinite(torch.tensor(r.losses))) and 0.0 <= r.final_metric <= 1.0
    assert r.bytes["forward"].raw == smoke.steps * sum(  # bf16 activations at the 3 boundaries of 4 stages
        smoke.batch_size * c * hw * hw * 2 for c, hw in ((8, 32), (16, 16), (32, 8))
    )
    if plan == "none":  # the pipeline computes what the unsplit model computes, in bf16 too
        plain = train_unsplit(cfg)
        assert max(abs(a - b) for a, b in zip(r.losses, plain.losses)) <= 1e-5
