"""bf16 tiers: stages run under autocast, boundaries carry bf16, the unsplit reference agrees.

The tiny task's ``gpu`` tier is its smoke budget with ``precision="bf16"``; CPU autocast
supports bf16, so this runs everywhere.
"""

from __future__ import annotations

import torch

from suite.pipeline.reference import train_unsplit
from suite.pipeline.runtime import run
from suite.pipeline.transport import LocalTransport

ACT_BYTES = 4 * 32 * 4  # a tiny micro-batch activation (4, 32) in fp32


def test_bf16_tier_sends_bf16_activations_and_gradients(tiny_cell, monkeypatch):
    dtypes: list[torch.dtype] = []
    orig = LocalTransport._deliver

    def spy(self, payload, dst, shape, dtype):
        dtypes.append(dtype)
        return orig(self, payload, dst, shape, dtype)

    monkeypatch.setattr(LocalTransport, "_deliver", spy)
    r = run(tiny_cell(plan="none", stages=2, tier="gpu", eval_uncompressed=False))
    assert dtypes and set(dtypes) == {torch.bfloat16}
    messages = 6 * 4  # steps x micro-batches
    for d in ("forward", "backward"):
        assert r.bytes[d].raw == messages * ACT_BYTES // 2  # (4, 32) bf16 per micro-batch


def test_bf16_pipeline_equals_bf16_unsplit_training(tiny_cell):
    cfg = tiny_cell(plan="none", stages=4, schedule="1f1b", tier="gpu")
    piped, plain = run(cfg), train_unsplit(cfg)
    assert len(piped.losses) == len(plain.losses) == 6
    assert max(abs(a - b) for a, b in zip(piped.losses, plain.losses)) <= 1e-6
    fp32 = train_unsplit(tiny_cell(plan="none", stages=4, schedule="1f1b", tier="smoke"))
    assert piped.losses != fp32.losses  # autocast really changed the arithmetic


def test_bf16_tier_with_a_compressor_trains(tiny_cell):
    r = run(tiny_cell(plan="quant(bits=8)", stages=2, tier="gpu"))
    assert r.bytes["forward"].wire < r.bytes["forward"].raw  # compressed bf16 activations
    assert all(torch.isfinite(torch.tensor(r.losses)))
