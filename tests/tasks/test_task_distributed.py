"""Each built-in task's smoke tier runs as a real pipeline under torchrun (one process per
stage, gloo) and reproduces the single-process run: same losses, same wire bytes."""

from __future__ import annotations

import math

import pytest
from _taskdata import require_data

from suite.pipeline.config import CellConfig, CompressionPlan
from suite.pipeline.runtime import run


@pytest.mark.distributed
@pytest.mark.data
@pytest.mark.parametrize("name", ["cifar10", "sst2", "shakespeare", "cola", "mrpc", "rte", "stsb", "wikitext2"])
def test_smoke_tier_under_torchrun_matches_single_process(name):
    require_data(name)
    cfg = CellConfig(task=name, tier="smoke", stages=2, steps=2, plan=CompressionPlan("quant(bits=4)", "fp8"))
    single = run(cfg)
    dist = run(CellConfig(**{**cfg.__dict__, "mode": "torchrun"}))
    assert dist.mode == "torchrun" and dist.n_stages == 2
    assert all(math.isfinite(v) for v in dist.losses) and len(dist.losses) == 2
    assert dist.losses == pytest.approx(single.losses, rel=1e-5, abs=1e-6)
    for direction in ("forward", "backward"):
        assert dist.bytes[direction].wire == single.bytes[direction].wire > 0
        assert dist.bytes[direction].raw == single.bytes[direction].raw
    assert math.isfinite(dist.final_metric)
