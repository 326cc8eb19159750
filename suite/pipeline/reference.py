"""The unsplit reference of a cell: its task trained with plain autograd, no pipeline.

``train_unsplit(config)`` builds ``config``'s task and stages exactly as the runtime does
(same seed, tier, step count, micro-batches, device) and trains them with
``tasks.standalone.run_unsplit``, the one unsplit training loop: the stages composed in one
autograd graph, fed the same micro-batches (loss scaled by 1/M, gradients accumulated) and
stepped by the same per-stage optimizers. A pipeline with ``none`` at every boundary must
reproduce its loss trajectory; it is also the baseline for the pipeline's step-time overhead
(``suite.pipeline.overhead``, ``benchmarks/test_pipeline_overhead.py``).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from tasks import build_task
from tasks.standalone import UnsplitRun, run_unsplit

from .config import CellConfig, ConfigError
from .trainer import resolve_device

__all__ = ["UnsplitRun", "train_unsplit"]


def train_unsplit(config: CellConfig) -> UnsplitRun:
    """Train ``config``'s task and stages as one model in this process (no evaluation; every
    step timed)."""
    cfg = config.validate()
    if cfg.optimizer is not None or cfg.lr is not None:
        raise ConfigError(
            "the unsplit reference trains with the task's optimizer at the tier's rate; drop optimizer / lr"
        )
    device = resolve_device(cfg.device)
    task = build_task(cfg.task, cfg.tier, seed=cfg.seed, data_dir=cfg.data_dir, model_size=cfg.model_size)
    if cfg.steps is not None:
        task.budget = replace(task.budget, steps=cfg.steps)
    torch.manual_seed(cfg.seed)
    return run_unsplit(
        task, cfg.n_stages, device=device, microbatches=cfg.microbatches, evaluate_every=False, time_steps=True
    )
