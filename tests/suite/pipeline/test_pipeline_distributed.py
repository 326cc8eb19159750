"""The pipeline runtime under torchrun (gloo, CPU): the same numbers as one process, bytes
counted exactly as handed to torch.distributed, data parallelism, and failure handling."""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from compressors import available
from suite.pipeline.config import CellConfig, CompressionPlan
from suite.pipeline.errors import RunError, RunTimeout
from suite.pipeline.result import RunResult
from suite.pipeline.runtime import run
from tests.tasks._taskdata import require_data

pytestmark = pytest.mark.distributed

LOSSY = "quant(bits=4)" if "quant" in available() else "fp8"
LEARNED = "ae(dim=8)" if "ae" in available() else "fixture_learned"


def _assert_same_run(a: RunResult, b: RunResult) -> None:
    assert len(a.losses) == len(b.losses)
    assert max(abs(x - y) for x, y in zip(a.losses, b.losses)) <= 1e-6
    assert a.bytes == b.bytes and a.bytes_per_boundary == b.bytes_per_boundary and a.eval_bytes == b.eval_bytes
    assert a.wire_bytes_by_step == b.wire_bytes_by_step
    assert [p.metric for p in a.curve] == pytest.approx([p.metric for p in b.curve], abs=1e-9)


def _logged(directory: Path) -> dict[str, dict[str, int]]:
    """rank file -> op -> bytes, from tests/fixtures/record_sends.py."""
    out: dict[str, dict[str, int]] = {}
    for f in directory.glob("rank*.log"):
        ops = out.setdefault(f.stem, {})
        for line in f.read_text().splitlines():
            op, n = line.split()
            ops[op] = ops.get(op, 0) + int(n)
    return out


def test_two_ranks_gpipe_lossy_and_variable_size_match_one_process(tiny_cell, fixture_paths, tmp_path, monkeypatch):
    monkeypatch.setenv("MPCBENCH_RECORD_SENDS", str(tmp_path))
    cfg = tiny_cell(
        plan={"forward": LOSSY, "backward": "fixture_varsize"},
        stages=2,
        schedule="gpipe",
        plugins=(fixture_paths["record_sends"],),
    )
    single = run(cfg)
    multi = run(replace(cfg, mode="torchrun"))
    assert multi.mode == "torchrun" and single.mode == "single"
    _assert_same_run(single, multi)
    assert len(set(multi.wire_bytes_by_step["backward"])) > 1  # payload sizes varied from step to step
    logged = _logged(tmp_path)
    # every byte handed to torch.distributed is accounted for, and nothing else
    assert logged["rank0"]["send"] == multi.bytes["forward"].wire + multi.eval_bytes.wire
    assert logged["rank1"]["send"] == multi.bytes["backward"].wire


def test_four_ranks_1f1b_none_lossy_and_learned_boundaries_match_one_process(tiny_cell):
    plan = {
        "forward": "none",
        "backward": "none",
        "per_boundary": {1: {"forward": LOSSY, "backward": LOSSY}, 2: {"forward": LEARNED, "backward": "none"}},
    }
    cfg = tiny_cell(plan=plan, stages=4, schedule="1f1b")
    single, multi = run(cfg), run(replace(cfg, mode="torchrun"))
    _assert_same_run(single, multi)
    b = multi.bytes_per_boundary
    assert b["b0.forward"].wire > b["b0.forward"].raw  # none: payload + headers
    assert b["b1.forward"].wire < b["b1.forward"].raw / 3 and b["b1.backward"].wire < b["b1.backward"].raw / 3
    assert b["b2.forward"].wire < b["b2.forward"].raw
    assert len(multi.stage_times) == 4 and multi.time.step_s > 0


def test_pp2_dp2_with_compressed_gradient_hook(tiny_cell, fixture_paths, tmp_path, monkeypatch):
    monkeypatch.setenv("MPCBENCH_RECORD_SENDS", str(tmp_path))
    cfg = tiny_cell(
        plan={"forward": "fp8", "backward": "none", "dp": "fixture_varsize"},
        stages=2,
        dp=2,
        mode="torchrun",
        schedule="1f1b",
        compress_warmup_steps=1,
        plugins=(fixture_paths["record_sends"],),
    )
    r = run(cfg)
    assert r.dp == 2 and all(l == l for l in r.losses)  # finite
    # step 0 is uncompressed (warm-up): plain all-reduce of both stages' gradients on both replicas
    params = (16 * 32 + 32 + 32 * 32 + 32) + (32 * 32 + 32 + 32 * 4 + 4)
    dp_steps = r.wire_bytes_by_step["dp"]
    assert dp_steps[0] == 2 * 4 * params
    assert all(0 < w < dp_steps[0] for w in dp_steps[1:])  # compressed, variable-size all-gather
    assert r.bytes["dp"].raw == 6 * 2 * 4 * params and r.bytes["dp"].wire == sum(dp_steps)
    assert r.timing_inputs["steps"][1]["dp"][0]["allgather_bytes"] > 0
    assert r.modeled["80Mbps"]["step_s"] > r.modeled["100Gbps"]["step_s"]
    logged = _logged(tmp_path)
    total = sum(sum(ops.values()) for ops in logged.values())
    assert total == r.bytes["forward"].wire + r.bytes["backward"].wire + r.bytes["dp"].wire + r.eval_bytes.wire
    # the warm-up step averaged exact gradients: step 1 matches one process on the global batch
    ref = run(
        replace(cfg, plan=replace(cfg.plan, dp="none"), dp=1, mode="single", tier="full", steps=6, microbatches=8)
    )
    assert r.losses[:2] == pytest.approx(ref.losses[:2], abs=1e-5)


def _powersgd_step_bytes(stage: torch.nn.Module, rank: int) -> int:
    """Bytes one replica all-reduces per step with ``powersgd(rank=...)``: (n + m) * r values per
    parameter matrix worth compressing (torch's rule, min_compression_rate 2), every other value
    uncompressed; fp32."""
    values = 0
    for p in stage.parameters():
        n, m = p.shape[0], p.numel() // p.shape[0]
        r = min(rank, n, m)
        values += (n + m) * r if p.dim() >= 2 and (n + m) * r * 2 < n * m else p.numel()
    return 4 * values


@pytest.mark.data
def test_powersgd_dp_bytes_per_step_are_its_per_matrix_factors_on_cifar10(tiny_cell):
    require_data("cifar10")
    from tasks.cifar10 import Cifar10

    cfg = CellConfig(
        task="cifar10",
        tier="quick",
        stages=2,
        dp=2,
        mode="torchrun",
        schedule="1f1b",
        steps=3,
        compress_warmup_steps=1,
        eval_uncompressed=False,
        plan=CompressionPlan.from_dict({"forward": "none", "backward": "none", "dp": "powersgd(rank=4)"}),
        data_dir=os.environ.get("MPCBENCH_DATA_DIR"),
    )
    r = run(cfg)
    stages = Cifar10(tier="quick").build_stages(2)
    plain = 2 * 4 * sum(p.numel() for s in stages for p in s.parameters())
    compressed = 2 * sum(_powersgd_step_bytes(s, 4) for s in stages)  # both replicas
    assert r.wire_bytes_by_step["dp"] == [plain, compressed, compressed]
    assert compressed < plain / 2 and all(l == l for l in r.losses)


def test_a_dying_rank_ends_the_run_with_an_error_and_no_leftover_processes(tiny_cell, monkeypatch, processes_with_env):
    marker = uuid.uuid4().hex
    monkeypatch.setenv("MPCBENCH_TEST_MARKER", marker)
    cfg = tiny_cell(
        plan={"forward": "none", "backward": "fixture_fault(rank=1, step=2, how=exit)"},
        stages=2,
        mode="torchrun",
        comm_timeout_s=30,
        time_limit_s=120,
    )
    t0 = time.perf_counter()
    with pytest.raises(RunError) as err:
        run(cfg)
    assert time.perf_counter() - t0 < 90
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("torchrun run failed: rank 1 died (exit code 3)")
    assert processes_with_env("MPCBENCH_TEST_MARKER", marker) == []


def test_a_stalled_rank_times_out_its_peers(tiny_cell, monkeypatch, processes_with_env):
    marker = uuid.uuid4().hex
    monkeypatch.setenv("MPCBENCH_TEST_MARKER", marker)
    cfg = tiny_cell(
        plan={"forward": "none", "backward": "fixture_fault(rank=1, step=1, how=stall)"},
        stages=2,
        mode="torchrun",
        comm_timeout_s=3,
        time_limit_s=120,
    )
    t0 = time.perf_counter()
    with pytest.raises(RunError, match=r"rank 0 .*receiving from rank 1 failed \(peer died or stalled\?\)"):
        run(cfg)
    assert time.perf_counter() - t0 < 90
    assert processes_with_env("MPCBENCH_TEST_MARKER", marker) == []


def test_the_watchdog_kills_a_run_past_its_time_limit(tiny_cell, monkeypatch, processes_with_env):
    marker = uuid.uuid4().hex
    monkeypatch.setenv("MPCBENCH_TEST_MARKER", marker)
    cfg = tiny_cell(
        plan={"forward": "none", "backward": "fixture_fault(rank=1, step=0, how=stall)"},
        stages=2,
        mode="torchrun",
        comm_timeout_s=600,
        time_limit_s=4,
    )
    t0 = time.perf_counter()
    with pytest.raises(RunTimeout, match="time_limit_s=4"):
        run(cfg)
    assert time.perf_counter() - t0 < 20
    assert processes_with_env("MPCBENCH_TEST_MARKER", marker) == []
