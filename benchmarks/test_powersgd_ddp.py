"""Data-parallel PowerSGD against torch's own: the cifar10 quick ResNet on 2 gloo replicas.

Three ways, on the same model initialization and the same data order (per seed):

- ``allreduce``: DDP's plain all-reduce (the exact mean gradient);
- ``torch_powersgd``: ``torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook`` with
  ``PowerSGDState(matrix_approximation_rank=4, start_powerSGD_iter=2, use_error_feedback=True,
  warm_start=True)`` (2 is the smallest start torch allows with error feedback / warm start);
- ``mpcbench_powersgd``: mpcbench's DDP hook (``suite.pipeline.data_parallel.CompressedReduce``)
  with ``powersgd(rank=4)``, uncompressed for the first 2 steps as well.

Each replica trains the unsplit quick-tier network (``Cifar10.build_model``: ResNet-18 at an
eighth of the width) on its shard of the global batch (64 images per replica) with the task's
optimizer and learning-rate schedule, ``forward_sync_buffers=False`` (BatchNorm statistics stay
local, in all three), one torch thread per replica. Reported per method and seed (in
``extra_info`` and printed): the final loss (mean over both replicas of the last 5 steps'
training losses), the loss curve, the all-reduced bytes per replica of a compressed step
(plain: 4 bytes per parameter; torch: its compression statistics, ``(n + m) * r`` per compressed
matrix plus the uncompressed values; mpcbench: its byte meter) and the mean wall time of a step
after the first two. The assertion: mpcbench's final loss, averaged over seeds, is within the
seed noise of torch's hook (twice the larger standard deviation over seeds, at least 0.03).

Slow (three trainings of 30 steps per seed; 3 seeds by default): ``pytest benchmarks/
test_powersgd_ddp.py -m slow -s``. ``MPCBENCH_PSGD_SEEDS=0,1`` and ``MPCBENCH_PSGD_STEPS=30``
change the seeds and steps. Also runs as a script (prints the table). Skipped without CIFAR-10.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import tempfile
import time
from pathlib import Path
from statistics import fmean, pstdev
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import PowerSGDState, powerSGD_hook
from torch.nn.parallel import DistributedDataParallel

RANK = 4
START = 2  # uncompressed steps before PowerSGD (torch's start_powerSGD_iter; its minimum with EF / warm start)
LAST = 5  # the final loss averages this many last steps
METHODS = ("allreduce", "torch_powersgd", "mpcbench_powersgd")
REPLICAS = 2


def _settings() -> tuple[list[int], int]:
    seeds = [int(s) for s in os.environ.get("MPCBENCH_PSGD_SEEDS", "0,1,2").split(",") if s.strip()]
    return seeds, int(os.environ.get("MPCBENCH_PSGD_STEPS", "30"))


def _mpcbench_hook(state, bucket):  # no annotations: DDP checks them against its own types
    return state.run(bucket)


def _train(method: str, task: Any, batches: list, rank: int) -> dict[str, Any]:
    from suite.pipeline.accounting import ByteMeter
    from suite.pipeline.data_parallel import CompressedReduce
    from suite.pipeline.timing import Clock

    model = task.build_model()  # seeded by the task: identical on both replicas and for every method
    ddp = DistributedDataParallel(model, forward_sync_buffers=False)
    n_params = sum(p.numel() for p in model.parameters())
    state: Any = None
    meter = ByteMeter()
    if method == "torch_powersgd":
        state = PowerSGDState(
            process_group=None,
            matrix_approximation_rank=RANK,
            start_powerSGD_iter=START,
            use_error_feedback=True,
            warm_start=True,
            random_seed=task.seed,
        )
        ddp.register_comm_hook(state, powerSGD_hook)
    elif method == "mpcbench_powersgd":
        state = CompressedReduce(
            f"powersgd(rank={RANK})", 0, dist.group.WORLD, meter, Clock(torch.device("cpu")), task.seed
        )
        ddp.register_comm_hook(state, _mpcbench_hook)
    opt = task.make_optimizer(list(model.parameters()))
    sched = task.make_scheduler(opt)
    losses, walls, step_bytes = [], [], []
    for step, batch in enumerate(batches):
        if method == "mpcbench_powersgd":
            state.step, state.compressed = step, step >= START
        meter.step = step
        after_before = state.total_numel_after_compression if method == "torch_powersgd" else 0
        t0 = time.perf_counter()
        loss = task.loss(ddp(batch.inputs), batch.targets)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if sched is not None:
            sched.step()
        walls.append(time.perf_counter() - t0)
        losses.append(float(loss.detach()))
        if method == "allreduce" or (method == "torch_powersgd" and step < START):
            step_bytes.append(4 * n_params)
        elif method == "torch_powersgd":
            step_bytes.append(4 * (state.total_numel_after_compression - after_before))
    if method == "mpcbench_powersgd":
        step_bytes = meter.per_step("dp.s0.allreduce", len(batches))
    both = torch.tensor(losses, dtype=torch.float64)
    dist.all_reduce(both)  # the mean over replicas (not part of the measured traffic)
    curve = (both / REPLICAS).tolist()
    return {
        "final_loss": fmean(curve[-LAST:]),
        "curve": curve,
        "bytes_per_step": step_bytes[-1],
        "bytes_per_step_all": step_bytes,
        "raw_bytes_per_step": 4 * n_params,
        "step_s": fmean(walls[START:]) if len(walls) > START else fmean(walls),
    }


def _worker(rank: int, port: int, seeds: list[int], steps: int, data_dir: str, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    from tasks.cifar10 import Cifar10

    dist.init_process_group("gloo", rank=rank, world_size=REPLICAS)
    try:
        results: dict[str, dict[str, Any]] = {m: {} for m in METHODS}
        for seed in seeds:
            task = Cifar10(tier="quick", seed=seed, data_dir=data_dir)
            it = task.train_batches(rank, REPLICAS)
            batches = [next(it) for _ in range(steps)]  # the same batches for every method
            for method in METHODS:
                results[method][str(seed)] = _train(method, task, batches, rank)
        if rank == 0:
            Path(out).write_text(json.dumps(results))
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure(seeds: list[int], steps: int, data_dir: str) -> dict[str, Any]:
    """Train the three ways on 2 spawned gloo replicas; method -> seed -> numbers."""
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "result.json")
        mp.spawn(_worker, args=(_free_port(), seeds, steps, data_dir, out), nprocs=REPLICAS, join=True)
        return json.loads(Path(out).read_text())


def summarize(results: dict[str, Any]) -> dict[str, dict[str, float]]:
    out = {}
    for method, per_seed in results.items():
        finals = [r["final_loss"] for r in per_seed.values()]
        first = next(iter(per_seed.values()))
        out[method] = {
            "mean_final_loss": fmean(finals),
            "std_final_loss": pstdev(finals) if len(finals) > 1 else 0.0,
            "bytes_per_step": first["bytes_per_step"],
            "raw_bytes_per_step": first["raw_bytes_per_step"],
            "step_s": fmean(r["step_s"] for r in per_seed.values()),
        }
    return out


def table(results: dict[str, Any]) -> str:
    summary = summarize(results)
    seeds = list(next(iter(results.values())))
    head = f"{'method':<20}" + "".join(f"{'seed ' + s:>9}" for s in seeds)
    lines = [head + f"{'mean':>9}{'std':>8}{'bytes/step':>12}{'ratio':>7}{'step s':>8}"]
    for method, per_seed in results.items():
        s = summary[method]
        lines.append(
            f"{method:<20}"
            + "".join(f"{per_seed[k]['final_loss']:>9.4f}" for k in seeds)
            + f"{s['mean_final_loss']:>9.4f}{s['std_final_loss']:>8.4f}{s['bytes_per_step']:>12d}"
            + f"{s['raw_bytes_per_step'] / s['bytes_per_step']:>7.1f}{s['step_s']:>8.3f}"
        )
    return "\n".join(lines)


def _data_dir() -> str:
    from tasks import default_data_dir

    return str(os.environ.get("MPCBENCH_DATA_DIR") or default_data_dir())


@pytest.mark.slow
def test_powersgd_ddp_matches_torch_hook(benchmark):
    data_dir = _data_dir()
    if not (Path(data_dir) / "cifar10-jpg.tar.gz").exists() and not (Path(data_dir) / "cifar-10-batches-py").is_dir():
        pytest.skip(f"CIFAR-10 not in {data_dir} (set MPCBENCH_DATA_DIR)")
    seeds, steps = _settings()
    got: list[dict[str, Any]] = []
    benchmark.group = "powersgd-ddp"
    benchmark.pedantic(lambda: got.append(measure(seeds, steps, data_dir)), rounds=1, iterations=1)
    results = got[0]
    summary = summarize(results)
    benchmark.extra_info.update(
        seeds=seeds, steps=steps, rank=RANK, start=START, summary=summary, results=results, load=os.getloadavg()
    )
    print(f"\n{steps} steps, seeds {seeds}, load {os.getloadavg()}\n{table(results)}")
    torch_, mine = summary["torch_powersgd"], summary["mpcbench_powersgd"]
    assert mine["bytes_per_step"] == torch_["bytes_per_step"] < torch_["raw_bytes_per_step"] / 2
    noise = max(2 * max(torch_["std_final_loss"], mine["std_final_loss"]), 0.03)
    assert abs(mine["mean_final_loss"] - torch_["mean_final_loss"]) <= noise, table(results)


if __name__ == "__main__":
    seeds, steps = _settings()
    print(f"load {os.getloadavg()}", file=sys.stderr)
    print(table(measure(seeds, steps, _data_dir())))
