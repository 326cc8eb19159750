"""Measured vs modeled step time: the network model (suite.results.network) against real runs.

    python benchmarks/network_model_check.py [--stages 2] [--rates 100,20] [--steps 12] [--out f.json]

1. ideal: the cell under torchrun on this machine (loopback); the model fed that run's own
   inputs (mean per-action costs) with the loopback's latency and no bandwidth limit;
2. per rate: the same cell with each rank in its own network namespace joined by a veth pair
   limited by ``tbf`` to that rate (needs root; tests/fixtures/netns_pair.py). Modeled twice:
   from the unlimited namespace run's inputs (prediction) and from the limited run's own
   inputs (re-modeling). The profile is the tbf rate (nominal; TCP/IP headers take ~4.5% of
   it) and the measured one-way latency of the pair.

Reports measured / modeled per case (the issue's target: 1 +/- 0.15), the load average and
CPU share next to every run. Only 2-rank cells (2 stages) run across namespaces here.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from suite.results.network import NetworkProfile, TimingInputs, model_record  # noqa: E402
from tests.fixtures.netns_pair import can_build, netns_pair  # noqa: E402


def cell(stages: int, steps: int, schedule: str, plan: str) -> dict:
    from suite.pipeline.config import CellConfig, CompressionPlan

    cfg = CellConfig(
        task="cifar10",
        tier="quick",
        stages=stages,
        schedule=schedule,
        plan=CompressionPlan.from_dict(plan),
        mode="torchrun",
        steps=steps,
        data_dir=os.environ.get("MPCBENCH_DATA_DIR"),
        eval_uncompressed=False,
    )
    return cfg.validate().to_dict()


def measured_step_s(result: dict) -> float:
    return result["time"]["step_s"]


def compare(result: dict, inputs: dict, net: NetworkProfile) -> dict:
    modeled = model_record(inputs, net, statistic="mean")["step_s"]
    m = measured_step_s(result)
    meas = TimingInputs.from_dict(result["timing_inputs"]).measurement
    return {
        "measured_s": m,
        "modeled_s": modeled,
        "inputs": inputs,
        "ratio": m / modeled,
        "loadavg": meas.get("loadavg"),
        "cpu_per_wall": meas.get("cpu_per_wall"),
    }


def show(name: str, row: dict) -> None:
    print(
        f"{name:24s} measured {row['measured_s'] * 1e3:7.1f} ms  modeled {row['modeled_s'] * 1e3:7.1f} ms  "
        f"ratio {row['ratio']:.3f}  load {row['loadavg']}  cpu/wall {row['cpu_per_wall']}",
        flush=True,
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--stages", type=int, default=2)
    p.add_argument("--rates", default="100,20", help="tbf rates in Mbit/s, comma-separated")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--schedule", default="1f1b")
    p.add_argument("--plan", default="none")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    from suite.pipeline.config import CellConfig
    from suite.pipeline.launch import launch

    cfg = cell(args.stages, args.steps, args.schedule, args.plan)
    rows: dict[str, dict] = {}
    local = launch(CellConfig.from_dict(cfg)).to_dict()
    rows["loopback"] = compare(local, local["timing_inputs"], NetworkProfile("loopback", float("inf"), 30e-6))
    show("loopback", rows["loopback"])
    why = can_build()
    if why is None and args.stages == 2:
        with netns_pair("m") as pair:
            lat = pair.one_way_latency_s()
            base = pair.run_cell(cfg)
            rows["veth"] = compare(base, base["timing_inputs"], NetworkProfile("veth", float("inf"), lat))
            show(f"veth (one-way latency {lat * 1e6:.0f} us)", rows["veth"])
            for rate in [float(r) for r in args.rates.split(",")]:
                pair.limit(rate)
                res = pair.run_cell(cfg)
                net = NetworkProfile(f"{rate:g}Mbit", rate * 1e6, lat)
                rows[f"{rate:g}Mbit predicted"] = compare(res, base["timing_inputs"], net)
                rows[f"{rate:g}Mbit remodeled"] = compare(res, res["timing_inputs"], net)
                for k in (f"{rate:g}Mbit predicted", f"{rate:g}Mbit remodeled"):
                    show(k, rows[k])
                pair.limit(None)
    else:
        print(f"namespace runs skipped: {why or 'only 2-stage cells run across namespaces'}")
    if args.out:
        Path(args.out).write_text(json.dumps({"config": cfg, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
