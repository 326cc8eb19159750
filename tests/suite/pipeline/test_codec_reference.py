"""The codec reference (``Clock.codec``): a compressor's work as a multiple of a copy of the same bytes,
measured beside it, so a row's modeled time does not move with the machine's load (issue 44)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from suite.pipeline.config import CellConfig, CompressionPlan
from suite.pipeline.runtime import run
from suite.results.network import PROFILES
from suite.results.time_model import model_times

# a path, not an import: importing the fixture at collection would register its tasks in this process
# under another module than the plugin loader's, and every later cell of a plugin task would miss them
WIDE_TASK_PATH = str(Path(__file__).resolve().parents[2] / "fixtures" / "wide_task.py")

SPIN = "import time\nend = time.time() + 300\nwhile time.time() < end: pass\n"


@pytest.fixture(autouse=True)
def one_thread():
    """As the runner gives a cell on this machine (a cell per core): thread CPU seconds hold all its work."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _cell() -> CellConfig:
    return CellConfig(
        task="wide",
        tier="smoke",
        plugins=(WIDE_TASK_PATH,),
        stages=2,
        plan=CompressionPlan("quant(bits=4)", "quant(bits=4)"),
        mode="single",
        steps=16,
    )


CHILD = """
import json, sys, torch
torch.set_num_threads(1)
from suite.pipeline.config import CellConfig
from suite.pipeline.runtime import run
ti = run(CellConfig.from_dict(json.loads(sys.argv[1]))).timing_inputs
print(json.dumps(ti if isinstance(ti, dict) else ti.to_dict()))
"""


def test_every_codec_site_is_timed_against_a_copy_of_its_bytes():
    # in a child process: a plugin task loaded here would stay registered in this one and unsettle the
    # later tests that load the same fixture as a plugin
    out = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(_cell().to_dict())], capture_output=True, text=True, check=True
    )
    ti = json.loads(out.stdout.strip().splitlines()[-1])
    rec = {"timing_inputs": ti}
    codec = rec["timing_inputs"]["codec"]
    assert set(codec) == {f"b0.{d}.{op}" for d in ("forward", "backward") for op in ("compress", "decompress")}
    for site, c in codec.items():
        assert c["samples"] >= 10 and c["copy_s"] > 0 and c["codec_s"] > 0 and c["ratio_median"] > 0, site
        assert c["nbytes"] == 16 * 8192 * 4  # the raw (16, 8192) fp32 boundary tensor
        assert c["calls_per_step"] == 4  # one per micro-batch


@pytest.mark.data
def test_a_cell_run_as_it_comes_and_beside_four_busy_processes_models_within_10_percent():
    """Issue 44. A compressor the calibration has no row for (a plugin's case): its codec is priced by
    the multiples the cell measured itself, the compute by the setup's calibrated reference."""
    from suite.results.calibration import load_calibration

    cal = load_calibration()
    if cal is None:
        pytest.skip("no calibration file")
    cfg = CellConfig(
        task="shakespeare", tier="quick", stages=4, plan=CompressionPlan("quant(bits=3)", "quant(bits=3)"),
        mode="single", steps=12,
    )  # fmt: skip

    def record(res) -> dict:
        ti = res.timing_inputs if isinstance(res.timing_inputs, dict) else res.timing_inputs.to_dict()
        run_ = {"n_stages": 4, "schedule": "1f1b", "microbatches": ti["microbatches"], "device": "cpu"}
        return {"task": "shakespeare", "tier": "quick", "compressor": "quant(bits=3)", "run": run_,
                "config": {"tp": 1}, "timing_inputs": ti}  # fmt: skip

    quiet = record(run(cfg))
    spinners = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(4)]
    try:
        loaded = record(run(cfg))
    finally:
        for p in spinners:
            p.kill()
            p.wait()
    for profile in ("100Gbps", "1Gbps", "100Mbps"):
        a, basis = model_times(quiet, {profile: PROFILES[profile]}, cal)
        b, _ = model_times(loaded, {profile: PROFILES[profile]}, cal)
        assert basis.codec == "own multiples" and basis.compute == "calibrated", basis
        assert b[profile]["step_s"] == pytest.approx(a[profile]["step_s"], rel=0.10), profile
