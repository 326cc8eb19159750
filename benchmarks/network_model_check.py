"""Measured vs modeled step time: the network model (suite.results.network) against emulated links.

    python benchmarks/network_model_check.py [--stages 2,4] [--links 100Mbps,20Mbps] [--rounds 1]
                                             [--dp-size 1] [--tp 1] [--task cifar10] [--tier quick]
                                             [--steps 12] [--dp-spec 'none;ef(topk(ratio=0.015))']
                                             [--sync 'step;outer(h=5)'] [--out f.json]

Per pipeline depth, the cifar10 quick cell (``none``, 1F1B; ``--task``/``--tier`` another) runs
under torchrun:

1. ``loopback``: every rank on this machine, no link. Modeled on an ideal network from the run's
   own inputs: the error that is the machine's, not the network's (scheduler wake-ups after
   blocking receives, ranks sharing cores when there are more ranks than cores);
2. per link: each rank on its own emulated host (``--link``: a network namespace whose traffic
   is limited by ``tbf`` both ways, ``suite/pipeline/netns.py``; needs root). Modeled for the link
   as emulated (its rate, no latency) from the run's own inputs, with the stored robust costs
   (thread CPU seconds, a low quantile) and with the wall-clock means.

With ``--dp-size 2`` each stage has two replicas (stages x 2 hosts): the data-parallel
all-reduce then shares the NICs with the pipeline's last messages.

``--dp-spec`` / ``--sync`` (';'-separated lists) add data-parallel cell kinds: a compressed
gradient every step, or the DiLoCo-style outer loop whose compressed all-reduce comes every ``h``
steps (``suite.pipeline.outer_loop``; modeled blocking, after the step, with its local work).

With ``--tp 2`` (a transformer task, e.g. ``--task shakespeare``; a list such as ``1,2`` runs both
and alternates them) every stage is two tensor-parallel ranks on one emulated host (``nnodes`` =
stages x dp, so one namespace holds a stage's TP group): TP all-reduces run over the namespace's
loopback, unlimited, and are modeled over the ``ideal`` intra-host link, as the runtime's own
``modeled.as_emulated`` is; only pipeline traffic crosses the tbf-limited links. Each row also
carries the record's own ``modeled`` (``record_modeled_s``), the measured compute / comm split of
the critical stage, each rank's CPU share of its step wall (``cpu_per_wall``), the run's timing
inputs (to re-model it later) and the model re-run with all processes on this machine's cores
(``ratio_*_shared_cores``, ``benchmarks/shared_cores.py``: what the emulation adds, not the network).

Runs of one round alternate depths and links so load changes hit all alike; every row reports
the 1-minute load average before and after; ``--out`` saves them with the commit and the
machine (``benchmarks/results/network-model-check-*.json``). The issue's target is measured /
modeled within 1 +/- 0.15 at 100 and 20 Mbit/s for a 2-stage and a 4-stage cell.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import shared_cores  # noqa: E402

from suite.results.network import IDEAL, INTRA_HOST, NetworkProfile, TimingInputs, model_run  # noqa: E402
from suite.results.network.model import run_step_times  # noqa: E402


def cell(
    stages: int,
    steps: int,
    link: str | None,
    dp: int = 1,
    tp: int = 1,
    task: str = "cifar10",
    tier: str = "quick",
    dp_spec: str = "none",
    sync: str = "step",
):
    from suite.pipeline.config import CellConfig, CompressionPlan
    from suite.pipeline.sync import parse_sync

    return CellConfig(
        task=task,
        tier=tier,
        stages=stages,
        dp=dp,
        tp=tp,
        plan=CompressionPlan(dp=dp_spec),
        sync=parse_sync(sync),
        mode="torchrun",
        link=link,
        nnodes=stages * dp if link else 1,  # one emulated host per pipeline rank: its TP ranks share it
        steps=steps,
        data_dir=os.environ.get("MPCBENCH_DATA_DIR"),
        eval_uncompressed=False,
    ).validate()


def check(
    stages: int,
    steps: int,
    link: str | None,
    dp: int = 1,
    tp: int = 1,
    task: str = "cifar10",
    tier: str = "quick",
    dp_spec: str = "none",
    sync: str = "step",
) -> dict:
    """One run and its measured / modeled step times."""
    from suite.pipeline.runtime import run

    load_before = os.getloadavg()[0]
    r = run(cell(stages, steps, link, dp, tp, task, tier, dp_spec, sync))
    load_after = os.getloadavg()[0]
    inputs = TimingInputs.from_dict(r.timing_inputs)
    if link is None:
        measured, net = r.time.step_s, IDEAL
    else:  # the TP ranks of a host share its namespace: loopback between them, the ideal intra-host link
        measured = r.network["measured"]["step_s"]
        net = NetworkProfile(link, r.network["rate_bps"], 0.0, INTRA_HOST["ideal"])
    row = {"task": f"{task}/{tier}", "stages": stages, "dp": dp, "tp": tp, "link": link or "loopback"}
    row.update(dp_spec=dp_spec, sync=sync)
    row["measured_s"] = measured
    for statistic in ("robust", "mean"):
        modeled = measured_steps_mean(inputs, net, statistic)
        row[f"modeled_{statistic}_s"] = modeled
        row[f"ratio_{statistic}"] = measured / modeled
        # the same with every process of the run on this machine's cores (the emulation's own limit)
        shared = shared_cores.step_s(inputs, net, os.cpu_count() or 1, statistic)
        row[f"modeled_{statistic}_shared_cores_s"] = shared
        row[f"ratio_{statistic}_shared_cores"] = measured / shared
    row.update(load=[round(load_before, 2), round(load_after, 2)], robust_clock=inputs.measurement.get("robust_clock"))
    row.update(
        measured_compute_s=r.time.compute_s,
        measured_compress_s=r.time.compress_s,
        measured_comm_s=r.time.comm_s,
        cpu_per_wall=inputs.measurement.get("cpu_per_wall"),
        modeled_ideal_s=model_run(inputs, {"ideal": IDEAL})["ideal"]["step_s"],
        stage_times=r.stage_times,
        timing_inputs=r.timing_inputs,  # to re-model the run later
    )
    if link is not None:
        row["record_modeled_s"] = (r.network.get("modeled", {}).get("as_emulated") or {}).get("step_s")
        row["kernel_over_wire"] = [round(k["tx_over_wire"], 4) for k in r.network.get("kernel_bytes", [])]
    return row


def measured_steps_mean(inputs: TimingInputs, net: NetworkProfile, statistic: str) -> float:
    """The modeled step averaged over the steps the measured mean covers (all but the first,
    ``suite.pipeline.summary``): with an outer loop the synchronizing steps are 1 in h, so the
    two means must cover the same steps."""
    times = [t for t, (_, n) in zip(run_step_times(inputs, net, statistic), inputs.runs()) for _ in range(n)]
    measured = times[1:] if len(times) > 2 else times
    return sum(measured) / len(measured)


def show(row: dict) -> None:
    print(
        f"{row['task']} {row['stages']} stages x dp {row['dp']} x tp {row['tp']} {row.get('sync', 'step')} "
        f"dp={row.get('dp_spec', 'none')}  {row['link']:9s} measured {row['measured_s'] * 1e3:7.1f} ms  "
        f"modeled {row['modeled_robust_s'] * 1e3:7.1f} ms (robust) {row['modeled_mean_s'] * 1e3:7.1f} ms (mean)  "
        f"ratio {row['ratio_robust']:.2f} / {row['ratio_mean']:.2f}  "
        f"shared cores {row['ratio_robust_shared_cores']:.2f} / {row['ratio_mean_shared_cores']:.2f}  "
        f"load {row['load'][0]:.1f}-{row['load'][1]:.1f}",
        flush=True,
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--stages", default="2,4", help="pipeline depths, comma-separated")
    p.add_argument("--links", default="100Mbps,20Mbps", help="emulated links (profiles or rates), comma-separated")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--dp-size", type=int, default=1, help="data-parallel replicas per stage")
    p.add_argument("--tp", default="1", help="tensor-parallel ranks per stage, comma-separated (one host each stage)")
    p.add_argument("--task", default="cifar10")
    p.add_argument("--tier", default="quick")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--dp-spec", default="none", help="data-parallel compressor specs, ';'-separated (each a cell kind)")
    p.add_argument("--sync", default="step", help="data-parallel synchronizations, ';'-separated: step, outer(h=5)")
    p.add_argument("--no-loopback", action="store_true", help="skip the runs without a link")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    from suite.pipeline.netns import missing_requirements

    why = missing_requirements()
    links: list[str | None] = [] if args.no_loopback else [None]
    if why is None:
        links += args.links.split(",")
    else:
        print(f"emulated links skipped: {why}")
    rows = []
    for _ in range(args.rounds):
        for link in links:
            for stages in [int(s) for s in args.stages.split(",")]:
                for tp in [int(t) for t in args.tp.split(",")]:
                    for sync in args.sync.split(";"):
                        for dp_spec in args.dp_spec.split(";"):
                            rows.append(
                                check(stages, args.steps, link, args.dp_size, tp, args.task, args.tier, dp_spec, sync)
                            )
                            show(rows[-1])
    if args.out:
        from datetime import datetime, timezone

        from suite.bench.provenance import git_info, machine_info

        meta = {"created": datetime.now(timezone.utc).isoformat(timespec="seconds"), **git_info()}
        meta.update(machine=machine_info(), argv=sys.argv[1:])
        Path(args.out).write_text(json.dumps({"provenance": meta, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
