"""Train a task on its own, in one process, with nothing compressed: ``python -m tasks.<name>``.

Uses only the task API, so it is also the runtime's unsplit reference: :func:`run_unsplit` is
the one unsplit training loop (``suite.pipeline.reference.train_unsplit`` and the pipeline
overhead benchmark call it; the ``none`` pipeline must reproduce its losses). Every stage in
sequence in one autograd graph, M micro-batches accumulated per step (loss / M, GPipe's
arithmetic), one optimizer and scheduler per stage, evaluation every ``eval_every`` steps,
the tier's precision (bf16 autocast) on the chosen device. Prints the curve and the final
metric: ``python -m tasks.cifar10 --tier gpu --device cuda`` is the quickest way to check a
tier's recipe on a GPU.
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass, field, replace
from typing import Callable

import torch

from .api import TIERS, Batch, Task, autocast

__all__ = ["UnsplitRun", "run_unsplit", "train", "evaluate", "main"]


def _forward(stages: list[torch.nn.Module], batch: Batch) -> torch.Tensor:
    x = batch.inputs
    for stage in stages:
        x = stage(x, batch.inputs)
    return x


@torch.no_grad()
def evaluate(task: Task, stages: list[torch.nn.Module]) -> float:
    """The task's metric over its evaluation set (micro-batched like training)."""
    for s in stages:
        s.eval()
    sums = [0.0] * task.metric_stats_size()
    device = next(stages[0].parameters()).device
    for batch in task.eval_batches():
        batch = batch.to(device)
        with autocast(device, task.budget.autocast_dtype):
            part = task.metric_sums(_forward(stages, batch), batch.targets)
        sums = [a + float(b) for a, b in zip(sums, part, strict=True)]
    for s in stages:
        s.train()
    return next(iter(task.metric_values(sums).values()))


@dataclass
class UnsplitRun:
    """What :func:`run_unsplit` measured."""

    losses: list[float]  # mean micro-batch loss per step
    step_walls: list[float] = field(default_factory=list)  # seconds per step (``time_steps`` only)
    curve: list[tuple[int, float]] = field(default_factory=list)  # (step, metric) per evaluation
    train_s: float = 0.0  # training seconds, evaluation excluded
    to_target_s: float = float("nan")  # training seconds until the metric first reached the tier's target

    @property
    def metric(self) -> float:
        return self.curve[-1][1] if self.curve else float("nan")


def run_unsplit(
    task: Task,
    n_stages: int | None = None,
    *,
    device: str | torch.device = "cpu",
    microbatches: int | None = None,
    evaluate_every: bool = True,
    time_steps: bool = False,
    log: Callable[[str], None] | None = None,
) -> UnsplitRun:
    """Train ``task`` for its budget as one model: the unsplit training loop.

    The caller seeds ``torch`` (the stages are built here). ``microbatches`` overrides the
    tier's M; ``evaluate_every``: evaluate every ``eval_every`` steps and at the end;
    ``time_steps``: wait for the device at the end of every step and record its wall time
    (otherwise the loop never waits for the device between evaluations)."""
    b = task.budget
    M = b.resolve_microbatches(microbatches)
    device = torch.device(device)
    stages = [s.to(device) for s in task.build_stages(n_stages or task.default_stages)]
    task.to_device(device)
    optimizers = [task.make_optimizer(list(s.parameters())) for s in stages]
    schedulers = [task.make_scheduler(o) for o in optimizers]
    if log:
        log(
            f"{task.name}/{task.tier}: {sum(p.numel() for s in stages for p in s.parameters()):,} parameters, "
            f"{len(stages)} stages, {b.steps} steps x {b.batch_size} samples, M={M}"
        )
    run = UnsplitRun(losses=[])
    step_losses: list[torch.Tensor] = []  # per step: mean micro-batch loss, read when needed (no sync per step)
    hib = task.metric.higher_is_better
    t0 = time.perf_counter()
    for step, batch in enumerate(task.train_batches()):
        if step >= b.steps:
            break
        t_step = time.perf_counter()
        micro_losses = []
        for micro in batch.to(device).split(M):
            with autocast(device, b.autocast_dtype):
                loss = task.loss(_forward(stages, micro), micro.targets)
            (loss / M).backward()
            micro_losses.append(loss.detach())
        for opt, sched in zip(optimizers, schedulers):
            opt.step()
            opt.zero_grad(set_to_none=True)
            if sched is not None:
                sched.step()
        step_losses.append(torch.stack(micro_losses).mean())
        if time_steps:
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            run.step_walls.append(time.perf_counter() - t_step)
        done = step + 1
        if evaluate_every and (done % b.eval_every == 0 or done == b.steps):
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            run.train_s += time.perf_counter() - t0
            metric = evaluate(task, stages)
            run.curve.append((done, metric))
            if math.isnan(run.to_target_s) and (metric >= b.target if hib else metric <= b.target):
                run.to_target_s = run.train_s
            if log:
                recent = [float(l) for l in step_losses[len(run.losses) :]]
                log(
                    f"step {done:5d}  train loss {sum(recent) / len(recent):.4f}  {task.metric.name} {metric:.4f}  "
                    f"train {run.train_s:.1f}s"
                )
            run.losses += [float(l) for l in step_losses[len(run.losses) :]]
            t0 = time.perf_counter()
    if not evaluate_every:
        run.train_s = time.perf_counter() - t0
    run.losses += [float(l) for l in step_losses[len(run.losses) :]]
    return run


def train(task: Task, n_stages: int | None = None, log=print, device: str | torch.device = "cpu") -> dict[str, float]:
    """Train ``task`` for its budget on ``device``; return final metric, mean loss of the last
    interval, training seconds (evaluation excluded) and the seconds to the tier's target."""
    run = run_unsplit(task, n_stages, device=device, log=log)
    last = run.curve[-2][0] if len(run.curve) > 1 else 0
    tail = run.losses[last:]
    return {
        "metric": run.metric,
        "train_loss": sum(tail) / len(tail) if tail else float("nan"),
        "train_s": run.train_s,
        "to_target_s": run.to_target_s,
    }


def main(task_cls: type[Task], argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog=f"python -m tasks.{task_cls.name}", description=main.__doc__)
    p.add_argument("--tier", default="smoke", choices=[t for t in TIERS if t in task_cls.tiers])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-dir", default=None)
    p.add_argument("--stages", type=int, default=None, choices=task_cls.stage_choices)
    p.add_argument("--steps", type=int, default=None, help="override the tier's step count")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    args = p.parse_args(argv)
    task = task_cls(tier=args.tier, seed=args.seed, data_dir=args.data_dir)
    if args.steps:
        task.budget = replace(task.budget, steps=args.steps, eval_every=min(task.budget.eval_every, args.steps))
    torch.manual_seed(args.seed)  # dropout
    t = time.perf_counter()
    out = train(task, args.stages, device=args.device)
    t_target = out["to_target_s"]
    reached = "not reached" if math.isnan(t_target) else f"reached after {t_target:.1f}s of training"
    print(
        f"final {task.metric.name} {out['metric']:.4f}  (train {out['train_s']:.1f}s, "
        f"target {task.budget.target} {reached}, total {time.perf_counter() - t:.1f}s)"
    )
    return 0
