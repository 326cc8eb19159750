"""Does the modeled time depend on the machine's load? The same cell twice, alone and next to
a CPU hog (one busy process per core), compared on modeled step time at 1 Gbps.

    python benchmarks/load_robustness_check.py [--stages 2] [--steps 16] [--mode torchrun]

Prints, per statistic (robust = 25th percentile of per-action costs, mean), the modeled
1 Gbps step of both runs and their ratio (the issue's target for the robust one: within
10%), next to the measured step ratio, the load averages and each rank's CPU share. The
time-to-target is target_step x step time, and target_step does not depend on the load
(training is deterministic), so the step ratio is the time-to-target ratio.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from suite.results.network import PROFILES, TimingInputs, model_record  # noqa: E402


def _spin(stop_at: float) -> None:
    x = 0
    while time.monotonic() < stop_at:
        x += 1


def run_cell(stages: int, steps: int, mode: str) -> dict:
    from suite.pipeline.config import CellConfig, CompressionPlan
    from suite.pipeline.runtime import run

    cfg = CellConfig(
        task="cifar10",
        tier="quick",
        stages=stages,
        plan=CompressionPlan.from_dict("none"),
        mode=mode,
        steps=steps,
        data_dir=os.environ.get("MPCBENCH_DATA_DIR"),
        eval_uncompressed=False,
    ).validate()
    return run(cfg).to_dict()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--stages", type=int, default=2)
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--mode", default="torchrun", choices=["torchrun", "single"])
    args = p.parse_args()
    alone = run_cell(args.stages, args.steps, args.mode)
    hogs = [mp.Process(target=_spin, args=(time.monotonic() + 3600,), daemon=True) for _ in range(os.cpu_count() or 1)]
    for h in hogs:
        h.start()
    try:
        loaded = run_cell(args.stages, args.steps, args.mode)
    finally:
        for h in hogs:
            h.kill()
            h.join()
    net = PROFILES["1Gbps"]
    for name, r in (("alone", alone), ("with hog", loaded)):
        m = TimingInputs.from_dict(r["timing_inputs"]).measurement
        print(
            f"{name:9s} measured step {r['time']['step_s'] * 1e3:7.1f} ms  load {m['loadavg']}  cpu/wall {m['cpu_per_wall']}  contended {m['contended']}"
        )
    print(f"measured step ratio (hog / alone): {loaded['time']['step_s'] / alone['time']['step_s']:.3f}")
    for stat in ("robust", "mean"):
        a = model_record(alone["timing_inputs"], net, stat)["step_s"]
        b = model_record(loaded["timing_inputs"], net, stat)["step_s"]
        print(f"modeled 1Gbps step, {stat:6s}: alone {a * 1e3:7.1f} ms  with hog {b * 1e3:7.1f} ms  ratio {b / a:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
