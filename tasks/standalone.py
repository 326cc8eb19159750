"""Train a task on its own, in one process, with nothing compressed: ``python -m tasks.<name>``.

Uses only the task API, so it doubles as the reference for what the pipeline runtime does
(without the pipeline): every stage in sequence, M micro-batches accumulated per step
(loss / M, GPipe's arithmetic), one optimizer and scheduler per stage, evaluation every
``eval_every`` steps, the tier's precision (bf16 autocast) on the chosen device. Prints the
curve and the final metric: ``python -m tasks.cifar10 --tier gpu --device cuda`` is the
quickest way to check a tier's recipe on a GPU.
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import replace

import torch

from .api import TIERS, Batch, Task, autocast

__all__ = ["train", "evaluate", "main"]


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
    total, count = 0.0, 0.0
    device = next(stages[0].parameters()).device
    for batch in task.eval_batches():
        batch = batch.to(device)
        with autocast(device, task.budget.autocast_dtype):
            s, c = task.metric_sums(_forward(stages, batch), batch.targets)
        total, count = total + s, count + c
    for s in stages:
        s.train()
    return total / count


def train(task: Task, n_stages: int | None = None, log=print, device: str | torch.device = "cpu") -> dict[str, float]:
    """Train ``task`` for its budget on ``device``; return final metric, mean loss of the last
    interval, training seconds (evaluation excluded) and the seconds to the tier's target."""
    b = task.budget
    device = torch.device(device)
    stages = [s.to(device) for s in task.build_stages(n_stages or task.default_stages)]
    task.to_device(device)
    optimizers = [task.make_optimizer(list(s.parameters())) for s in stages]
    schedulers = [task.make_scheduler(o) for o in optimizers]
    log(f"{task.name}/{task.tier}: {sum(p.numel() for s in stages for p in s.parameters()):,} parameters, "
        f"{len(stages)} stages, {b.steps} steps x {b.batch_size} samples, M={b.microbatches}")
    train_s, losses, metric, to_target = 0.0, [], float("nan"), float("nan")
    hib = task.metric.higher_is_better
    t0 = time.perf_counter()
    for step, batch in enumerate(task.train_batches()):
        for micro in batch.to(device).split(b.microbatches):
            with autocast(device, task.budget.autocast_dtype):
                loss = task.loss(_forward(stages, micro), micro.targets)
            (loss / b.microbatches).backward()
            losses.append(loss.detach())  # read at evaluation: no device sync per micro-batch
        for opt, sched in zip(optimizers, schedulers):
            opt.step()
            opt.zero_grad(set_to_none=True)
            if sched is not None:
                sched.step()
        if (step + 1) % b.eval_every == 0 or step + 1 == b.steps:
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            train_s += time.perf_counter() - t0
            metric = evaluate(task, stages)
            if math.isnan(to_target) and (metric >= b.target if hib else metric <= b.target):
                to_target = train_s
            last_loss, losses = float(torch.stack(losses).float().mean()), []
            log(f"step {step + 1:5d}  train loss {last_loss:.4f}  {task.metric.name} {metric:.4f}  train {train_s:.1f}s")
            t0 = time.perf_counter()
    return {"metric": metric, "train_loss": last_loss, "train_s": train_s, "to_target_s": to_target}


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
    reached = "not reached" if math.isnan(out["to_target_s"]) else f"reached after {out['to_target_s']:.1f}s of training"
    print(f"final {task.metric.name} {out['metric']:.4f}  (train {out['train_s']:.1f}s, "
          f"target {task.budget.target} {reached}, total {time.perf_counter() - t:.1f}s)")
    return 0
