"""Determinism: the same cell with the same seed on CPU gives identical metrics and bytes.

Each cell runs twice through what a cell child runs (``suite.bench.cell.execute``) and the runner's
reading of it (``suite.bench.cell.interpret``), and the two records must agree exactly on
everything measured except wall-clock: final metric, the whole curve (metric, uncompressed
metric, training loss), bytes per direction, per boundary and per step, compression ratios,
compressor state. The compressors cover randomness drawn from ``info.seed`` (stochastic
rounding, random-k), data-dependent payload sizes (threshold) and sender/receiver state
(EF21, AQ-SGD). A different seed must change the numbers, so the comparison can fail.

(One process vs torchrun with the same seed is compared by tests/suite/pipeline/test_pipeline_distributed.py.)
"""

from __future__ import annotations

import pytest
from reliability_support import run_in_process, tiny_config

SPECS = [
    "none",
    "quant(bits=4, rounding=stochastic)",
    "randomk(ratio=0.25)",
    "threshold(ratio=0.1)",
    "ef21(topk(ratio=0.25))",
    "aqsgd",
]
TIMING = ("wall_s",)  # measured wall-clock: the only thing allowed to differ in a curve point


def _measured(rec: dict) -> dict:
    assert rec["status"] == "ok", rec["error"]
    out = {
        k: rec[k]
        for k in (
            "cell_key",
            "final_metric",
            "final_metric_uncompressed",
            "reached_target_step",
            "bytes",
            "bytes_per_boundary",
            "bytes_per_step",
            "compression_ratio",
            "wire_bytes_by_step",
            "eval_bytes",
            "compressor_state_bytes",
            "warnings",
        )
    }
    out["curve"] = [{k: v for k, v in p.items() if k not in TIMING} for p in rec["curve"]]
    return out


@pytest.mark.parametrize("spec", SPECS)
def test_same_seed_same_numbers(faulty_registry, tmp_path, spec):
    cfg = tiny_config(spec, steps=4)
    a = _measured(run_in_process(cfg, tmp_path / "a"))
    b = _measured(run_in_process(cfg, tmp_path / "b"))
    assert a == b
    assert a["bytes"]["forward"]["wire"] > 0 and len(a["curve"]) >= 1


def test_a_different_seed_gives_different_numbers(faulty_registry, tmp_path):
    spec = "quant(bits=4, rounding=stochastic)"
    a = _measured(run_in_process(tiny_config(spec, steps=4, seed=0), tmp_path / "a"))
    b = _measured(run_in_process(tiny_config(spec, steps=4, seed=1), tmp_path / "b"))
    assert a["cell_key"] != b["cell_key"]
    assert [p["train_loss"] for p in a["curve"]] != [p["train_loss"] for p in b["curve"]]
