"""Interleaved 1F1B (two model chunks per rank) against 1F1B, one process and torchrun."""

from __future__ import annotations

from dataclasses import replace

import pytest

from compressors import available
from suite.pipeline.config import ConfigError
from suite.pipeline.runtime import run

LOSSY = "quant(bits=4)" if "quant" in available() else "fp8"
LEARNED = "ae(dim=8)" if "ae" in available() else "fixture_learned"
PLAN = {"forward": LOSSY, "backward": "fixture_varsize", "per_boundary": {2: {"forward": LEARNED, "backward": "none"}}}


def _same_numbers(a, b) -> None:
    assert len(a.losses) == len(b.losses)
    assert max(abs(x - y) for x, y in zip(a.losses, b.losses)) <= 1e-6
    assert a.bytes == b.bytes and a.bytes_per_boundary == b.bytes_per_boundary and a.eval_bytes == b.eval_bytes
    assert a.wire_bytes_by_step == b.wire_bytes_by_step


def test_interleaved_sends_the_same_messages_as_1f1b_in_one_process(tiny_cell):
    """Same stages, micro-batches and boundaries, other order: same losses and same bytes."""
    cfg = tiny_cell(plan=PLAN, stages=4, schedule="1f1b")
    plain, interleaved = run(cfg), run(replace(cfg, schedule="interleaved_1f1b"))
    assert interleaved.schedule == "interleaved_1f1b" and len(interleaved.stage_times) == 4
    _same_numbers(plain, interleaved)


def test_interleaved_layout_errors_are_config_errors(tiny_cell):
    with pytest.raises(ConfigError, match="interleaved_1f1b' runs 2 stages per rank on at least 2 ranks: 3 stages"):
        run(tiny_cell(stages=3, schedule="interleaved_1f1b"))
    with pytest.raises(ConfigError, match="multiple of 2, got 1"):
        run(tiny_cell(stages=4, schedule="interleaved_1f1b", microbatches=1))


@pytest.mark.distributed
def test_two_ranks_with_two_chunks_each_match_one_process(tiny_cell):
    cfg = tiny_cell(plan=PLAN, stages=4, schedule="interleaved_1f1b")
    single, multi = run(cfg), run(replace(cfg, mode="torchrun"))
    assert multi.mode == "torchrun" and len(multi.stage_times) == 4
    _same_numbers(single, multi)
    assert [p.metric for p in multi.curve] == pytest.approx([p.metric for p in single.curve], abs=1e-9)


@pytest.mark.distributed
def test_interleaved_with_data_parallel_matches_1f1b(tiny_cell):
    """pp 2 ranks x 2 chunks x dp 2 (4 processes): the dp groups are shared by a rank's chunks."""
    plan = {"forward": "fp8", "backward": "none", "dp": "fixture_varsize"}
    cfg = tiny_cell(plan=plan, stages=4, dp=2, mode="torchrun", schedule="interleaved_1f1b")
    inter = run(cfg)
    plain = run(replace(cfg, schedule="1f1b"))  # 8 processes
    _same_numbers(plain, inter)
    assert inter.bytes["dp"].wire > 0
