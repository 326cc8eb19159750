"""Tensor parallelism (suite/pipeline/tensor_parallel.py): tp = 2 trains exactly as tp = 1 with
compression off, the TP byte count matches its closed form, a plugin that does not declare the
TP roles is refused with one line, and (distributed) torchrun equals single mode in losses and
bytes, with pipeline stages and with data-parallel replicas."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from compressors.registry import load_plugin
from compressors.spec import parse_spec
from suite.pipeline.accounting import ByteMeter
from suite.pipeline.boundary import Micro
from suite.pipeline.config import CellConfig, CompressionPlan, ConfigError
from suite.pipeline.placement import Placement
from suite.pipeline.runtime import run
from suite.pipeline.tensor_parallel import TPGroup, shard_stage
from suite.pipeline.timing import Clock
from suite.pipeline.transport import PREFIX_NBYTES, LocalTransport
from tasks.gpt import Block, GPTConfig

TINY_TRANSFORMERS_PATH = str(Path(__file__).resolve().parents[2] / "fixtures" / "tiny_transformers.py")

load_plugin(TINY_TRANSFORMERS_PATH)
TOL = 1e-5


def cell(task: str, **fields) -> CellConfig:
    fields.setdefault("plugins", (TINY_TRANSFORMERS_PATH,))
    return CellConfig(task=task, tier="smoke", **fields)


def max_diff(a: list[float], b: list[float]) -> float:
    assert len(a) == len(b) == 10
    return max(abs(x - y) for x, y in zip(a, b))


@pytest.mark.parametrize("task", ["tiny_gpt", "tiny_bert"])
@pytest.mark.parametrize("stages", [1, 2])
def test_tp2_equals_tp1_single_process(task, stages):
    one = run(cell(task, stages=stages))
    two = run(cell(task, stages=stages, tp=2))
    assert max_diff(one.losses, two.losses) < TOL
    # the pipeline tensor goes to both TP ranks of the next stage: twice tp=1's bytes
    if stages == 2:
        assert two.bytes["forward"].raw == 2 * one.bytes["forward"].raw
    assert "tp_forward" not in one.bytes and two.bytes["tp_forward"].raw > 0


def test_tp_byte_count_matches_the_closed_form_for_one_block():
    """One GPT block, T ranks simulated in one process, uncompressed: each of the block's two
    reductions sends every rank's (B, L, d) fp32 contribution to the T - 1 others, forward and
    backward; the first message of each (src, dst) stream is framed (prefix + 11-word header)."""
    T, B, L, d = 4, 2, 8, 16
    cfg = GPTConfig(vocab_size=16, block_size=L, n_layer=1, n_head=4, n_embd=d, dropout=0.0)
    torch.manual_seed(0)
    holder = torch.nn.ModuleList([Block(cfg, None)])
    meter = ByteMeter()
    transport = LocalTransport(meter, torch.device("cpu"))
    placement = Placement.all_local(1, 1, T)
    none = parse_spec("none")
    group = TPGroup(
        0,
        T,
        placement.tp_ranks,
        lambda t: placement.rank(0, tp_rank=t),
        transport,
        {"forward": none, "backward": none},
        torch.device("cpu"),
        0,
        Clock(torch.device("cpu")),
    )
    assert shard_stage(holder, group) == 1
    for m in range(2):  # two micro-batches of one shape: framed the first time, bare the second
        group.micro = Micro(0, m, torch.arange(B), torch.zeros(B, L, dtype=torch.long), True, True)
        x = torch.randn(B, L, d, requires_grad=True)
        holder[0](x).sum().backward()
    body = B * L * d * 4
    header = PREFIX_NBYTES + 4 * (5 + 1 + 5)  # orig (dtype, ndim, 3 dims), count, one tensor's description
    per_direction = 2 * T * (T - 1) * (2 * body + header)
    totals = meter.by_direction()
    assert totals["tp_forward"].wire == totals["tp_backward"].wire == per_direction
    assert totals["tp_forward"].raw == 2 * T * (T - 1) * 2 * body
    assert totals["tp_forward"].messages == 2 * T * (T - 1) * (2 + 1)  # framed: 2 messages, bare: 1
    assert transport.pending() == 0


def test_tp_cell_compresses_tp_traffic_only_where_the_plan_says():
    plan = CompressionPlan(tp_forward="quant(bits=8)", tp_backward="topk(ratio=0.25)")
    r = run(cell("tiny_gpt", stages=1, tp=2, plan=plan))
    assert r.bytes["tp_forward"].raw / r.bytes["tp_forward"].wire > 3  # 8-bit codes + scales (per row: tiny rows)
    assert r.bytes["tp_backward"].raw / r.bytes["tp_backward"].wire > 1.5
    assert all(math.isfinite(x) for x in r.losses)


def test_learned_code_on_tp_activations_trains():
    r = run(cell("tiny_gpt", stages=1, tp=2, plan=CompressionPlan(tp_forward="ae(ratio=0.5)")))
    assert r.bytes["tp_forward"].raw / r.bytes["tp_forward"].wire > 1.9
    assert all(math.isfinite(x) for x in r.losses)


REFUSALS = {
    "plugin without the TP roles": (
        dict(tp=2, plan=CompressionPlan(tp_forward="aqsgd")),
        "tp_forward compressor 'aqsgd' cannot compress the tp_forward direction (tp_activation)",
    ),
    "learned code on TP gradients": (
        dict(tp=2, plan=CompressionPlan(tp_backward="ae")),
        "tp_backward compressor 'ae' cannot compress the tp_backward direction (tp_activation_grad)",
    ),
    "TP spec without TP": (
        dict(plan=CompressionPlan(tp_forward="fp16")),
        "tp_forward compressor 'fp16' needs tensor parallelism; set tp >= 2 (--tp 2)",
    ),
}


@pytest.mark.parametrize("case", REFUSALS, ids=str)
def test_refused_with_one_line(case):
    fields, line = REFUSALS[case]
    with pytest.raises(ConfigError) as e:
        cell("tiny_gpt", **fields).validate()
    assert line in str(e.value) and "\n" not in str(e.value)


def test_task_without_blocks_is_refused(tiny_task):
    with pytest.raises(ConfigError, match="no transformer block to split"):
        run(CellConfig(task="tiny", tier="smoke", tp=2, plugins=(tiny_task,)))


def test_heads_must_divide():
    with pytest.raises(ConfigError, match="cannot split 2 attention heads over tp=4"):
        run(cell("tiny_gpt", tp=4))


def test_plan_round_trips_the_tp_entry():
    plan = CompressionPlan.from_dict({"forward": "none", "tp_forward": "quant(bits=4)"})
    assert (plan.tp_forward, plan.tp_backward) == ("quant(bits=4)", "none")
    assert CompressionPlan.from_dict(plan.to_dict()) == plan
    assert "tp_forward" not in CompressionPlan().to_dict()  # old plans keep their keys (and cell keys)


def test_placement_puts_tp_innermost():
    seen = set()
    for rank in range(2 * 2 * 2):
        p = Placement.of_rank(rank, 2, 2, dp_size=2, tp_size=2)
        assert p.address(p.pp_ranks[0]) == rank
        assert rank == (p.dp_rank * 2 + p.pp_ranks[0]) * 2 + p.tp_rank
        seen.add((p.dp_rank, p.pp_ranks[0], p.tp_rank))
    assert len(seen) == 8


@pytest.mark.distributed
@pytest.mark.parametrize(
    "task,plan",
    [
        ("tiny_gpt", CompressionPlan()),
        ("tiny_bert", CompressionPlan()),
        ("tiny_gpt", CompressionPlan(tp_forward="ae(ratio=0.5)", tp_backward="topk(ratio=0.25)")),
    ],
    ids=["gpt", "bert", "gpt-ae-topk"],
)
def test_torchrun_equals_single_process(task, plan):
    single = run(cell(task, stages=2, tp=2, plan=plan))
    dist = run(cell(task, stages=2, tp=2, plan=plan, mode="torchrun"))
    assert max_diff(single.losses, dist.losses) < TOL
    assert {k: (v.raw, v.wire, v.messages) for k, v in single.bytes.items()} == {
        k: (v.raw, v.wire, v.messages) for k, v in dist.bytes.items()
    }


@pytest.mark.distributed
def test_tp2_equals_tp1_with_data_parallel_replicas():
    one = run(cell("tiny_gpt", stages=1, dp=2, mode="torchrun"))
    two = run(cell("tiny_gpt", stages=1, dp=2, tp=2, mode="torchrun"))
    assert max_diff(one.losses, two.losses) < TOL
    assert two.bytes["dp"].raw > 0 and two.bytes["tp_forward"].raw > 0
