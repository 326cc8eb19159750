"""fp16 / bf16 casts: range and finiteness refused with a clear error, without a host sync on CUDA."""

from __future__ import annotations

import pytest
import torch

from compressors import build
from compressors.api import CompressorError, TensorInfo, TensorRole


def _info(x: torch.Tensor, step: int = 0) -> TensorInfo:
    return TensorInfo(TensorRole.ACTIVATION, 0, 0, step, x.shape, x.dtype, x.device)


@pytest.mark.parametrize("name", ["fp16", "bf16"])
def test_cast_round_trip_is_the_plain_cast(name):
    x = torch.randn(4, 33)
    c = build(name)
    (wire,) = c.compress(x, _info(x))
    assert wire.dtype == c.wire_dtype
    assert torch.equal(c.decompress((wire,), _info(x)), x.to(c.wire_dtype).to(x.dtype))


def test_fp16_refuses_values_beyond_its_range_on_cpu_at_once():
    x = torch.randn(4, 8)
    x[1, 2] = 7e4
    with pytest.raises(CompressorError, match=r"fp16: input activation at boundary 0 step 5 .*65504.*bf16 or fp8"):
        build("fp16").compress(x, _info(x, step=5))


@pytest.mark.parametrize("name", ["fp16", "bf16"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_casts_refuse_non_finite_input(name, bad):
    x = torch.randn(3, 5)
    x[0, 0] = bad
    with pytest.raises(CompressorError, match=f"{name}: .*NaN/Inf"):
        build(name).compress(x, _info(x))


def test_fp16_large_but_representable_values_pass_although_their_fp16_sum_overflows():
    x = torch.full((200_000,), 1000.0)  # every value fits fp16; their fp16 sum does not
    (wire,) = build("fp16").compress(x, _info(x))
    assert torch.equal(wire.float(), x)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_fp16_on_cuda_reports_overflow_at_the_next_call_without_syncing_the_first():
    c = build("fp16")
    bad = torch.full((1024,), 1e6, device="cuda")
    c.compress(bad, _info(bad, step=1))  # queued: no host read here
    good = torch.ones(1024, device="cuda")
    with pytest.raises(CompressorError, match="step 1"):
        c.compress(good, _info(good, step=2))
    c.compress(good, _info(good, step=3))  # the flag was consumed
    c._check.flush()
