"""Merge the per-process training reports into one RunResult (on the result-owning rank).

Conventions (docs/ARCHITECTURE.md, "Byte accounting" and "Time"):
- bytes are totals over every process of the run (all dp replicas);
- per-stage times are means over measured steps (the first step is warm-up and excluded
  when there are more than two), the max over dp replicas of that stage;
- ``time`` adds the stages up in single-process mode (one process does all the work) and
  under torchrun takes the slowest rank (the critical path), a rank's time being the sum
  of its stages' (several for interleaved schedules);
- the network model sees one replica's links: per-step bytes divided by dp and by M.
"""

from __future__ import annotations

from statistics import fmean
from typing import Any

from .accounting import ByteMeter, boundary_key, dp_key
from .config import CellConfig
from suite.results.network import DPLoad, LinkLoad, StageCost, StepLoad, TimingInputs, encode_steps, model_run
from .result import EvalPoint, RunResult, TimeSplit
from .schedules import pipeline_ranks, rank_of_stage
from .timing import SECTIONS

__all__ = ["summarize", "timing_inputs"]


def _measured(steps: int) -> range:
    return range(1, steps) if steps > 2 else range(steps)


def _stage_rows(reports: list[dict[str, Any]], n_stages: int, steps: int) -> list[dict[str, float]]:
    """Per stage: mean seconds per measured step of each section (max over dp replicas)."""
    rows = []
    for s in range(n_stages):
        clocks = [r["clocks"][str(s)] for r in reports if str(s) in r["clocks"]]
        if not clocks:
            raise ValueError(f"no report covers stage {s}")
        row = {"stage": float(s)}
        for k in (*SECTIONS, "step"):
            row[f"{k}_s"] = max(fmean(c[i][k] for i in _measured(steps)) for c in clocks)
        rows.append(row)
    return rows


def timing_inputs(config: CellConfig, meter: ByteMeter, rows: list[dict[str, float]], steps: int, micro: int) -> TimingInputs:
    """What the network model needs: per-stage costs and per-step per-link loads of one replica."""
    S, D, M = config.n_stages, config.dp, micro
    stage_costs = [StageCost(r["compute_s"] / M, r["compress_s"] / M, r["optimizer_s"]) for r in rows]
    per = {}
    for b in range(S - 1):
        for d in ("forward", "backward"):
            k = boundary_key(b, d)
            per[k] = (meter.per_step(k, steps), meter.per_step(k, steps, field=2))
    for s in range(S):
        for kind in ("allreduce", "allgather"):
            k = dp_key(s, kind)
            per[k] = (meter.per_step(k, steps), meter.per_step(k, steps, field=2))
    loads = []
    for i in range(steps):
        links = tuple(
            LinkLoad(
                fwd_bytes=per[boundary_key(b, "forward")][0][i] / (D * M),
                bwd_bytes=per[boundary_key(b, "backward")][0][i] / (D * M),
                fwd_messages=per[boundary_key(b, "forward")][1][i] / (D * M),
                bwd_messages=per[boundary_key(b, "backward")][1][i] / (D * M),
            )
            for b in range(S - 1)
        )
        dp = tuple(
            DPLoad(
                allreduce_bytes=per[dp_key(s, "allreduce")][0][i] / D,
                allreduce_ops=per[dp_key(s, "allreduce")][1][i] / D,
                allgather_bytes=per[dp_key(s, "allgather")][0][i] / D,
                allgather_ops=per[dp_key(s, "allgather")][1][i] / D,
            )
            for s in range(S)
        )
        loads.append(StepLoad(links, dp))
    warmup = min(config.compress_warmup_steps, steps)
    distinct, counts = encode_steps(loads, warmup)
    return TimingInputs(stage_costs, distinct, M, D, warmup_steps=warmup, counts=counts)


def summarize(config: CellConfig, reports: list[dict[str, Any]]) -> RunResult:
    """One RunResult from the reports of every process (one report in single mode)."""
    S, D = config.n_stages, config.dp
    steps, M = reports[0]["steps"], reports[0]["microbatches"]
    task = reports[0]["task"]
    meter = ByteMeter.from_lists(r["meter"] for r in reports)

    # --- losses (mean over replicas) and the curve (replica 0's last stage) -----------------------
    last = [r for r in reports if S - 1 in r["stages"]]
    per_replica = [r["losses"] for r in last]
    losses = [fmean(ls[i] for ls in per_replica) for i in range(steps)]
    walls = [max(r["step_walls"][i] for r in reports) for i in range(steps)]
    owner = next(r for r in last if r["dp_rank"] == 0)
    curve, prev = [], 0
    for p in owner["curve"]:
        k = p["step"]
        curve.append(EvalPoint(k, p["metric"], p["metric_uncompressed"], fmean(losses[prev:k]), sum(walls[:k])))
        prev = k
    target, hib = task["target"], task["higher_is_better"]
    reached = next((p.step for p in curve if (p.metric >= target if hib else p.metric <= target)), None)

    # --- time ----------------------------------------------------------------------------------------
    rows = _stage_rows(reports, S, steps)
    P = pipeline_ranks(config.schedule, S)

    def combine(seconds) -> float:
        per_rank = [sum(seconds(r) for r in rows if rank_of_stage(int(r["stage"]), P) == p) for p in range(P)]
        return sum(per_rank) if config.mode == "single" else max(per_rank)

    measured = _measured(steps)
    split = TimeSplit(
        step_s=fmean(walls[i] for i in measured),
        compute_s=combine(lambda r: r["compute_s"] + r["optimizer_s"]),
        compress_s=combine(lambda r: r["compress_s"]),
        comm_s=combine(lambda r: r["comm_s"]),
        total_train_s=sum(walls),
        total_eval_s=max(r["eval_s"] for r in reports),
    )
    inputs = timing_inputs(config, meter, rows, steps, M)

    # --- bytes -------------------------------------------------------------------------------------------
    by_dir = meter.by_direction()
    by_step = {d: meter.per_step_direction(d, steps) for d in ("forward", "backward", "dp")}
    return RunResult(
        final_metric=curve[-1].metric,
        final_metric_uncompressed=curve[-1].metric_uncompressed,
        metric_name=task["metric"],
        higher_is_better=hib,
        target=target,
        reached_target_step=reached,
        curve=curve,
        bytes=by_dir,
        bytes_per_boundary=meter.by_boundary(),
        bytes_per_step={d: c.wire / steps for d, c in by_dir.items()},
        time=split,
        modeled=model_run(inputs, reached_target_step=reached),
        steps=steps,
        n_stages=S,
        dp=D,
        microbatches=M,
        schedule=config.schedule,
        mode=config.mode,
        device=reports[0]["device"].split(":")[0],
        stage_times=rows,
        losses=losses,
        compressor_state_bytes=sum(r["compressor_state_bytes"] for r in reports),
        eval_bytes=meter.eval_totals(),
        wire_bytes_by_step=by_step,
        timing_inputs=inputs.to_dict(),
    )
