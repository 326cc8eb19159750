"""DGC as published (compressors/builtins/dgc.py): momentum correction, momentum factor masking,
local clipping, exponential sparsity warm-up."""

from __future__ import annotations

import math

import pytest
import torch

from compressors.api import CompressorError, TensorInfo, TensorRole
from compressors.builtins.dgc import warmup_density
from compressors.registry import build


def _info(x: torch.Tensor, step: int, replicas: int = 1, training: bool = True) -> TensorInfo:
    return TensorInfo(
        role=TensorRole.WEIGHT_GRAD, boundary=0, microbatch=0, step=step, shape=x.shape, dtype=x.dtype,
        device=x.device, seed=1000 + step, replicas=replicas, training=training,
    )  # fmt: skip


def test_at_density_one_every_position_is_masked_so_the_current_gradient_goes_out():
    """Momentum factor masking zeroes u and v wherever a value was sent: with everything sent each
    step, nothing carries over (as published: the momentum lives in what is held back)."""
    torch.manual_seed(0)
    c = build("dgc(ratio=1.0, momentum=0.9)")
    for step in range(3):
        g = torch.randn(64)
        out = c.decompress(c.compress(g.clone(), _info(g, step)), _info(g, step))
        assert torch.equal(out, g)


def test_unsent_coordinates_accumulate_momentum_and_sent_ones_are_masked():
    """Coordinate 0 is always large (sent every step); coordinate 1 is small and constant: it is
    held back, its velocity grows as momentum SGD's would (u = m u + g, v = v + u), and the step
    it goes out it carries v; afterwards both buffers restart from zero there."""
    n = 2000
    c = build("dgc(ratio=0.001, momentum=0.5, sample=1.0)")  # 2 of 2000 values a step
    g = torch.zeros(n)
    g[0], g[1] = 100.0, 1.0
    u1 = v1 = 0.0
    sent_at = None
    for step in range(40):
        out = c.decompress(c.compress(g.clone(), _info(g, step)), _info(g, step))
        assert out[0] == 100.0  # masked every step: its momentum never piles up
        u1 = 0.5 * u1 + 1.0
        v1 += u1
        if out[1] != 0:
            assert out[1] == pytest.approx(v1)
            sent_at = step
            break
    assert sent_at is not None and sent_at == 0  # 2 values a step: coordinate 1 is the second largest
    # now make coordinate 1 lose to a third one and check that it restarted from zero after being sent
    g[2] = 50.0
    out = c.decompress(c.compress(g.clone(), _info(g, 1)), _info(g, 1))
    assert out[1] == 0 and out[2] == 50.0
    assert c._v is not None and c._v[1].item() == pytest.approx(1.0)  # u = 0.5*0 + 1, v = 0 + 1


def test_local_clipping_scales_the_threshold_by_the_replicas():
    x = torch.full((10_000,), 1.0)  # norm 100
    c = build("dgc(ratio=1.0, momentum=0.0, clip=2.0)")
    out = c.decompress(c.compress(x.clone(), _info(x, 0, replicas=4)), _info(x, 0, replicas=4))
    assert float(torch.linalg.vector_norm(out)) == pytest.approx(2.0 / math.sqrt(4), rel=1e-5)
    small = torch.full((100,), 0.001)  # under the limit: untouched
    c.reset()
    out = c.decompress(c.compress(small.clone(), _info(small, 0, replicas=4)), _info(small, 0, replicas=4))
    assert torch.allclose(out, small)


def test_sparsity_warm_up_is_exponential_from_75_percent_as_published():
    # the paper's sequence for 99.9 %: 75 %, 93.75 %, 98.4375 %, 99.6 %, then 99.9 %
    seq = [warmup_density(s, 0.001, 40, 4) for s in (0, 10, 20, 30, 40, 100)]
    assert seq[0] == 0.25 and seq[4] == seq[5] == 0.001
    assert all(a / b == pytest.approx(seq[0] / seq[1]) for a, b in zip(seq[:4], seq[1:5]))
    assert warmup_density(5, 0.001, 0, 4) == 0.001  # no warm-up
    # what goes out follows it: many values in the first stage, the target after
    c = build("dgc(ratio=0.01, warmup_steps=8, sample=1.0)")
    sent = []
    for step in range(10):
        x = torch.randn(10_000, generator=torch.Generator().manual_seed(step))
        sent.append(int((c.decompress(c.compress(x, _info(x, step)), _info(x, step)) != 0).sum()))
    assert sent[0] > 2000 and sent[9] <= 200 and sent == sorted(sent, reverse=True)


def test_evaluation_calls_touch_no_state_and_bad_parameters_are_named():
    c = build("dgc(ratio=0.1)")
    x = torch.randn(100)
    c.compress(x, _info(x, 0, training=False))
    assert c._u is None and c.state_nbytes() == 0
    c.compress(x, _info(x, 0))
    assert c.state_nbytes() == 2 * 100 * 4
    with pytest.raises(CompressorError, match="dgc: parameter momentum=1.5"):
        build("dgc(momentum=1.5)")
    with pytest.raises(CompressorError, match="dgc: parameter warmup_steps=2.5"):
        build("dgc(warmup_steps=2.5)")
