"""Measure the pipeline runtime's step-time overhead against the unsplit model.

    python -m suite.pipeline.overhead --task cifar10 --tier smoke --stages 2 --modes single torchrun

Trains the same cell three ways with ``none`` at every boundary: the unsplit reference
(``suite.pipeline.reference``: one autograd graph, same micro-batches), the single-process pipeline
and the torchrun pipeline; prints the mean step time of each (first step excluded; the
minimum over ``--repeat`` runs, which discounts interference from other processes) and the
overhead relative to the unsplit model. On a CPU-only machine the torchrun numbers include
the processes competing for the cores. Run it with ``OMP_NUM_THREADS=1`` to compare like
with like (torchrun ranks get one thread each on a 2-core machine).
"""

from __future__ import annotations

import argparse
import math
import statistics
from dataclasses import replace
from typing import Any

from suite.schedules import DEFAULT_SCHEDULE

from .config import CellConfig, CompressionPlan
from .reference import train_unsplit
from .runtime import run

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", default="cifar10")
    p.add_argument("--tier", default="smoke")
    p.add_argument("--stages", type=int, default=2)
    p.add_argument("--schedule", default=DEFAULT_SCHEDULE)
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--device", default="cpu")
    p.add_argument("--modes", nargs="+", default=["single", "torchrun"])
    p.add_argument("--plugins", nargs="*", default=[])
    p.add_argument("--repeat", type=int, default=1, help="runs per variant; the fastest counts")
    args = p.parse_args(argv)
    cfg = CellConfig(
        task=args.task,
        tier=args.tier,
        stages=args.stages,
        schedule=args.schedule,
        steps=args.steps,
        device=args.device,
        plan=CompressionPlan(),
        plugins=tuple(args.plugins),
        eval_uncompressed=False,
    ).validate()
    best: dict[str, tuple[float, Any]] = {}
    for _ in range(args.repeat):  # interleaved, so that a burst of interference hits all variants alike
        plain = train_unsplit(cfg)
        walls = plain.step_walls[1:] if len(plain.step_walls) > 2 else plain.step_walls
        if statistics.fmean(walls) < best.get("unsplit", (math.inf, None))[0]:
            best["unsplit"] = (statistics.fmean(walls), plain)
        for mode in args.modes:
            r = run(replace(cfg, mode=mode))
            if r.time.step_s < best.get(mode, (math.inf, None))[0]:
                best[mode] = (r.time.step_s, r)
    base, plain = best["unsplit"]
    print(
        f"{args.task}/{args.tier}: {len(plain.step_walls)} steps, {cfg.n_stages} stages, {args.schedule}, {args.device}, best of {args.repeat}"
    )
    print(f"  unsplit model         {base * 1e3:9.2f} ms/step")
    for mode in args.modes:
        _, r = best[mode]
        t = r.time
        print(
            f"  pipeline {mode:9s}    {t.step_s * 1e3:9.2f} ms/step  overhead {100 * (t.step_s / base - 1):+6.1f}%"
            f"   (compute {t.compute_s * 1e3:.2f}, compress {t.compress_s * 1e3:.2f}, comm {t.comm_s * 1e3:.2f} ms;"
            f" max loss diff vs unsplit {max(abs(a - b) for a, b in zip(r.losses, plain.losses)):.1e})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
