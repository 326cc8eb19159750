"""The compressed DDP communication hook, in-process on a one-replica gloo group: the three
reduction paths (custom reduce, linear all-reduce, all-gather), their byte counts, the
micro-batch accumulation trick (exactly one reduction per step, after the last backward), the
bucket layout handed to PowerSGD and the ordering of asynchronous collectives."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch import nn

from compressors import available, build
from compressors.api import TensorInfo, TensorRole
from suite.pipeline.accounting import ByteMeter
from suite.pipeline.data_parallel import CompressedReduce, _Sequencer, wrap_stage
from suite.pipeline.timing import Clock


def _hook(spec: str, meter: ByteMeter) -> CompressedReduce:
    return CompressedReduce(
        spec, stage=1, group=dist.group.WORLD, meter=meter, clock=Clock(torch.device("cpu")), seed=0
    )


@pytest.mark.parametrize(
    "spec,kind",
    [("none", "allreduce"), ("fp16", "allgather"), ("fixture_varsize", "allgather"), ("powersgd(rank=2)", "allreduce")],
)
def test_reduction_paths_and_their_bytes(world_of_one, tiny_task, spec, kind):
    if spec.split("(")[0] not in available():
        pytest.skip(f"{spec} not registered")
    meter = ByteMeter()
    hook = _hook(spec, meter)
    x = torch.randn(300)
    out = hook.reduce(x.clone(), bucket=0)
    assert out.shape == x.shape and torch.isfinite(out).all()
    info = TensorInfo(TensorRole.WEIGHT_GRAD, 0, 0, 0, x.shape, x.dtype, x.device)
    c = build(spec)
    if not spec.startswith("powersgd"):  # one replica: the mean is the decoded payload
        assert torch.allclose(out, c.decompress(c.compress(x, info), info))
    counts = meter.by_boundary() | {k: meter.totals(lambda key, k=k: key == k) for k in meter.keys()}
    key = f"dp.s1.{kind}"
    assert set(meter.keys()) == {key} and counts[key].raw == 1200 and counts[key].wire > 0
    if spec == "none":
        assert counts[key].wire == 1200 and counts[key].messages == 1
    if spec == "fp16":  # size exchange (8 B) + frame: 7-int32 header (2 x dtype, ndim, dim; n) + 600 B
        assert counts[key].wire == 8 + 28 + 600 and counts[key].messages == 2
    hook.compressed = False  # warm-up: plain all-reduce of the raw gradient
    meter2 = ByteMeter()
    hook.meter = meter2
    assert torch.equal(hook.reduce(x.clone(), bucket=0), x)
    assert meter2.by_direction()["dp"].wire == 1200


def test_ddp_reduces_once_per_step_after_accumulating_all_microbatches(world_of_one, tiny_task):
    torch.manual_seed(0)
    ref = nn.Linear(8, 4)
    module = nn.Linear(8, 4)
    module.load_state_dict(ref.state_dict())
    meter = ByteMeter()
    hook = _hook("none", meter)
    seen = []
    orig = hook.reduce_async
    hook.reduce_async = lambda x, bucket, segments=None: (seen.append(x.clone()), orig(x, bucket, segments))[1]  # type: ignore[method-assign]
    ddp, sync = wrap_stage(module, dist.group.WORLD, torch.device("cpu"), hook)
    xs = [torch.randn(2, 8) for _ in range(3)]
    for step in range(2):
        losses = []
        for x in xs:  # GPipe order: all forwards, then all backwards
            with sync.forward():
                losses.append(ddp(x).pow(2).mean() / 3)
        for m, loss in enumerate(losses):
            with sync.backward(last=m == 2):
                loss.backward()
        assert len(seen) == step + 1  # one bucket, reduced once, at the last backward
        for x in xs:
            (ref(x).pow(2).mean() / 3).backward()
        flat = torch.cat([ref.weight.grad.reshape(-1), ref.bias.grad.reshape(-1)])
        assert torch.allclose(seen[-1].sort().values, flat.sort().values, atol=1e-7)  # the accumulated gradient
        assert torch.allclose(module.weight.grad, ref.weight.grad, atol=1e-7)
        for p in (*module.parameters(), *ref.parameters()):
            p.grad = None
    assert meter.by_direction()["dp"].wire == 2 * 4 * (8 * 4 + 4)


def _conv_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, bias=False), nn.BatchNorm2d(16), nn.ReLU(), nn.Flatten(), nn.Linear(16 * 6 * 6, 10)
    )  # fmt: skip


def test_ddp_hands_powersgd_the_bucket_layout_and_counts_its_rounds(world_of_one, tiny_task):
    module = _conv_net()
    meter = ByteMeter()
    hook = _hook("powersgd(rank=2)", meter)
    seen = []
    orig = hook.reduce_async

    def spy(x, bucket, segments=None):
        seen.append(segments)
        return orig(x, bucket, segments)

    hook.reduce_async = spy  # type: ignore[method-assign]
    ddp, sync = wrap_stage(module, dist.group.WORLD, torch.device("cpu"), hook)
    for step in range(3):
        hook.step = meter.step = step
        with sync.forward():
            loss = ddp(torch.randn(4, 3, 8, 8)).square().mean()
        with sync.backward(last=True):
            loss.backward()
        assert all(torch.isfinite(p.grad).all() for p in module.parameters())
    shapes = sorted(tuple(p.shape) for p in module.parameters())
    assert len(seen) == 3 and all(sorted(map(tuple, segs)) == shapes for segs in seen)  # one bucket: every parameter
    # per step: conv (16, 27) and linear (10, 576) at rank 2, the BN vectors and the bias uncompressed
    per_step = 4 * ((16 + 27) * 2 + (10 + 576) * 2 + 16 + 16 + 10)
    assert meter.per_step("dp.s1.allreduce", 3) == [per_step] * 3
    st = hook.compressors()[0]._dp[0]
    assert st.e.numel() == 16 * 27 + 10 * 576 and st.q.numel() == (27 + 576) * 2  # error feedback, warm start


def test_the_sequencer_issues_a_later_bucket_only_after_the_earlier_one_finished():
    seq, issued = _Sequencer(), []
    a, b, c = seq.open(), seq.open(), seq.open()
    seq.submit(b, lambda: issued.append("b1"))  # b's launches wait for a
    seq.submit(a, lambda: issued.append("a1"))
    seq.submit(c, lambda: issued.append("c1"))
    seq.submit(b, lambda: issued.append("b2"))
    assert issued == ["a1"]
    seq.submit(a, lambda: issued.append("a2"))  # a later round of a (from a completion callback)
    seq.finish(c)  # c finished early (no collectives left): still after b
    assert issued == ["a1", "a2"]
    seq.finish(a)
    assert issued == ["a1", "a2", "b1", "b2"]
    seq.finish(b)
    assert issued == ["a1", "a2", "b1", "b2", "c1"]
    d = seq.open()
    seq.wait_turn(d)  # everything before d is finished: returns at once
