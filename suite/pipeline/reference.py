"""The unsplit reference: the same task trained with plain autograd, no pipeline.

The stages are composed sequentially in one autograd graph, fed the same micro-batches
(loss scaled by 1/M, gradients accumulated) and stepped by the same per-stage optimizers.
A pipeline with ``none`` at every boundary must reproduce its loss trajectory; it is also
the baseline for the pipeline's step-time overhead.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import torch

from tasks import autocast, build_task

from .config import CellConfig
from .trainer import resolve_device

__all__ = ["UnsplitRun", "train_unsplit"]


@dataclass
class UnsplitRun:
    losses: list[float]  # mean micro-batch loss per step
    step_walls: list[float]  # seconds per step


def train_unsplit(config: CellConfig) -> UnsplitRun:
    """Train ``config``'s task and stages as one model in this process."""
    cfg = config.validate()
    device = resolve_device(cfg.device)
    task = build_task(cfg.task, cfg.tier, seed=cfg.seed, data_dir=cfg.data_dir)
    if cfg.steps is not None:
        task.budget = replace(task.budget, steps=cfg.steps)
    M = cfg.microbatches or task.budget.microbatches
    torch.manual_seed(cfg.seed)
    stages = [m.to(device) for m in task.build_stages(cfg.n_stages)]
    task.to_device(device)
    dtype = task.budget.autocast_dtype
    optimizers = [task.make_optimizer(list(m.parameters())) for m in stages]
    schedulers = [task.make_scheduler(o) for o in optimizers]
    losses, walls = [], []
    for step, batch in enumerate(task.train_batches(0, 1)):
        if step >= task.budget.steps:
            break
        t0 = time.perf_counter()
        step_losses = []
        for mb in batch.to(device).split(M):
            with autocast(device, dtype):
                x = mb.inputs
                for m in stages:
                    x = m(x, mb.inputs)
                loss = task.loss(x, mb.targets)
            (loss / M).backward()
            step_losses.append(loss.detach())
        for o, s in zip(optimizers, schedulers):
            o.step()
            o.zero_grad(set_to_none=True)
            if s is not None:
                s.step()
        losses.append(float(torch.stack(step_losses).mean()))
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        walls.append(time.perf_counter() - t0)
    return UnsplitRun(losses, walls)
