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

import os
from statistics import fmean
from typing import Any

from suite.results.network.model import model_run
from suite.results.network.timing_inputs import (
    PROTOCOLS,
    ActionCost,
    CodecSample,
    DPLoad,
    LinkLoad,
    StageCost,
    StepLoad,
    TimingInputs,
    TPLoad,
    encode_steps,
    interpolate_target_step,
    quantile,
)
from suite.schedules import pipeline_ranks, rank_of_stage

from .accounting import ByteMeter, boundary_key, dp_key
from .config import CellConfig
from .result import EvalPoint, RunResult, TimeSplit
from .timing import SECTIONS

__all__ = ["summarize", "timing_inputs", "stage_costs", "cpu_clock_usable", "ROBUST_QUANTILE", "CONTENDED_CPU_SHARE"]

ROBUST_QUANTILE = 0.25  # per-action costs for the model: a low quantile is what an unloaded machine does
CONTENDED_CPU_SHARE = 0.8  # a rank that got less CPU than this share of its wall time was waiting for a core


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


def cpu_clock_usable(reports: list[dict[str, Any]]) -> bool:
    """Whether every rank timed its actions in thread CPU seconds on one torch thread (then
    the thread's CPU time is all the compute; with more threads it would miss the others')."""
    return bool(reports) and all(
        r.get("torch_threads") == 1 and set(r.get("cpu_action_clocks") or {}) == set(r.get("action_clocks") or {})
        for r in reports
    )


def stage_costs(
    reports: list[dict[str, Any]], n_stages: int, steps: int, stat, clocks: str = "action_clocks"
) -> list[StageCost]:
    """Per stage and action kind, ``stat`` over (measured steps x micro-batches x replicas) of
    the action's decompress / compute / compress seconds; the optimizer per step likewise
    (``clocks``: ``action_clocks``, wall seconds, or ``cpu_action_clocks``, thread CPU seconds)."""
    out = []
    for s in range(n_stages):
        samples: dict[str, list[list[float]]] = {}
        opt: list[float] = []
        for r in reports:
            steps_of = r.get(clocks, {}).get(str(s))
            if steps_of is None:
                continue
            for i in _measured(steps):
                for label, row in steps_of[i].items():
                    samples.setdefault(label.rstrip("0123456789"), []).append(row)
                row = r["clocks"][str(s)][i]
                opt.append(
                    row.get("optimizer_cpu", row["optimizer"]) if clocks == "cpu_action_clocks" else row["optimizer"]
                )
        actions = {k: ActionCost(*(stat([row[j] for row in rows]) for j in range(3))) for k, rows in samples.items()}
        # the outer loop / one-replica code: every synchronization but the first (warm-up, compilation)
        syncs = [x for r in reports for x in (r.get("sync_clocks") or {}).get(str(s), [])[1:]]
        out.append(StageCost(actions, stat(opt) if opt else 0.0, stat(syncs) if syncs else 0.0))
    return out


def _measurement(reports: list[dict[str, Any]], steps: int) -> dict[str, Any]:
    """How loaded the machine was while the costs were measured: load averages, each rank's
    CPU seconds per wall second of its steps, and a ``contended`` flag."""
    shares = []
    for r in reports:
        idx = list(_measured(steps))
        wall = sum(r["step_walls"][i] for i in idx)
        cpu = sum(r.get("step_cpus", [0.0] * steps)[i] for i in idx)
        shares.append(cpu / wall if wall > 0 else 0.0)
    loads = [x for r in reports for x in r.get("loadavg", []) if x is not None]
    return {
        "loadavg": [min(loads), max(loads)] if loads else None,
        "cpu_per_wall": [round(x, 4) for x in shares],
        "cpus": os.cpu_count(),
        "processes": len(reports),
        # one rank at a time can leave its core idle (waiting for a peer), so only the busiest rank counts
        "contended": bool(shares) and max(shares) < CONTENDED_CPU_SHARE,
    }


def tp_step_key(stage: int, direction: str) -> str:
    """All tensor-parallel reductions of ``stage`` in ``direction`` (summary's own key)."""
    return f"tp.s{stage}.*.{direction}"


def timing_inputs(
    config: CellConfig,
    meter: ByteMeter,
    reports: list[dict[str, Any]],
    steps: int,
    micro: int,
    target_step: float | None = None,
) -> TimingInputs:
    """What the network model needs: the action lists, per-action costs, per-step per-link
    loads of one replica, the transport's protocol and the measurement conditions."""
    S, D, M = config.n_stages, config.dp, micro
    schedule = [list(acts) for acts in reports[0]["schedule"]]  # every rank reports the whole schedule
    # robust: a low quantile, of thread CPU seconds where those hold all the compute (they do
    # not grow while another process has the core); mean: wall seconds, what measured steps average
    cpu = cpu_clock_usable(reports)
    robust = stage_costs(
        reports, S, steps, lambda v: quantile(v, ROBUST_QUANTILE), "cpu_action_clocks" if cpu else "action_clocks"
    )
    mean = stage_costs(reports, S, steps, fmean)
    per = {}
    for b in range(S - 1):
        for d in ("forward", "backward"):
            k = boundary_key(b, d)
            per[k] = (meter.per_step(k, steps), meter.per_step(k, steps, field=2))
    for s in range(S):
        for kind in ("allreduce", "allgather"):
            k = dp_key(s, kind)
            per[k] = (meter.per_step(k, steps), meter.per_step(k, steps, field=2))
    T = config.tp
    if T > 1:  # every reduction of a stage, per direction: one TP rank's sends per micro-batch
        for s in range(S):
            for d in ("forward", "backward"):
                keys = [k for k in meter.keys() if k.startswith(f"tp.s{s}.") and k.endswith(f".{d}")]
                cols = [(meter.per_step(k, steps), meter.per_step(k, steps, field=2)) for k in keys]
                nbytes, messages = ([sum(c[f][i] for c in cols) for i in range(steps)] for f in (0, 1))
                per[tp_step_key(s, d)] = (nbytes, messages)
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
        tp = tuple(
            TPLoad(
                fwd_bytes=per[tp_step_key(s, "forward")][0][i] / (D * M * T),
                bwd_bytes=per[tp_step_key(s, "backward")][0][i] / (D * M * T),
                fwd_messages=per[tp_step_key(s, "forward")][1][i] / (D * M * T),
                bwd_messages=per[tp_step_key(s, "backward")][1][i] / (D * M * T),
            )
            for s in range(S)
            if T > 1
        )
        loads.append(StepLoad(links, dp, tp))
    warmup = min(config.compress_warmup_steps, steps)
    distinct, counts = encode_steps(loads, warmup)
    return TimingInputs(
        schedule=schedule,
        stages=robust,
        steps=distinct,
        microbatches=M,
        replicas=D,
        protocol=PROTOCOLS[reports[0].get("protocol", "length_prefix")],
        mean_stages=mean,
        warmup_steps=warmup,
        counts=counts,
        target_step=target_step,
        measurement={**_measurement(reports, steps), "robust_clock": "thread_cpu" if cpu else "wall"},
        codec=codec_samples(reports, steps * D),
    )


def codec_samples(reports: list[dict[str, Any]], replica_steps: int) -> dict[str, CodecSample]:
    """Every codec site's sampled calls against a copy (``Clock.codec``), summed over the processes
    and stages that ran it (replicas and TP ranks of one stage share its sites); calls per step of
    one replica = training calls / (steps x replicas)."""
    sums: dict[str, list[float]] = {}
    pairs: dict[str, list[tuple[float, float]]] = {}
    for r in reports:
        for per_site in (r.get("codec") or {}).values():
            for site, row in per_site.items():
                acc = sums.setdefault(site, [0.0] * 6)
                for i in range(6):
                    acc[i] += float(row[i])
        for per_site in (r.get("codec_samples") or {}).values():
            for site, got in per_site.items():
                pairs.setdefault(site, []).extend(got)
    out = {}
    for site, a in sorted(sums.items()):
        if a[2] <= 0:
            continue
        got = pairs.get(site, [])
        out[site] = CodecSample(
            codec_s=a[0],
            copy_s=a[1],
            samples=int(a[2]),
            nbytes=a[3] / a[2],
            calls_per_step=a[5] / max(1, replica_steps),
            codec_q25=quantile([c for c, _ in got], 0.25) if got else 0.0,
            copy_median=quantile([c for _, c in got], 0.5) if got else 0.0,
            # each sample's codec over the copy timed right after it (same conditions), the median
            ratio_median=quantile([c / r for c, r in got if r > 0], 0.5) if got else 0.0,
        )
    return out


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
        point = EvalPoint(k, p["metric"], p["metric_uncompressed"], fmean(losses[prev:k]), sum(walls[:k]))
        point.metrics = p.get("metrics")
        curve.append(point)
        prev = k
    target, hib = task["target"], task["higher_is_better"]
    reached = next((p.step for p in curve if (p.metric >= target if hib else p.metric <= target)), None)
    target_step = interpolate_target_step([(p.step, p.metric) for p in curve], target, hib)

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
    inputs = timing_inputs(config, meter, reports, steps, M, target_step)

    # --- bytes -------------------------------------------------------------------------------------------
    by_dir = meter.by_direction()
    by_step = {d: meter.per_step_direction(d, steps) for d in by_dir}
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
        modeled=model_run(inputs),
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
        compressor_stats={
            k: sum(r.get("compressor_stats", {}).get(k, 0) for r in reports)
            for k in sorted({k for r in reports for k in r.get("compressor_stats", {})})
        },
        eval_bytes=meter.eval_totals(),
        wire_bytes_by_step=by_step,
        timing_inputs=inputs.to_dict(),
        model_params=reports[0].get("model_params"),
    )
