"""torchrun entry point: one process = one pipeline rank of one data-parallel replica.

    python -m torch.distributed.run --standalone --nproc-per-node=<pipeline ranks*dp> \\
        -m suite.pipeline.worker --config <cell.json> --out <run dir>

Each rank initializes the process group (gloo on CPU, NCCL on CUDA, timeout =
``comm_timeout_s``), loads the config's plugins, trains its stage(s) (``suite.pipeline.placement``: one, or
several for interleaved schedules), and sends its report to rank 0, which summarizes them and hands
the result back to every rank; each host's local rank 0 writes ``<run dir>/result.json`` on its own
file system (hosts share no file system). A rank that fails writes one line to
``<run dir>/errors/rank<r>.txt`` and exits non-zero; torchrun then stops the others.
Workers die with their parent (PR_SET_PDEATHSIG) so that nothing outlives a killed run.
"""

from __future__ import annotations

import logging
import os
import signal
import sys

from suite import settings

_T0 = __import__("time").perf_counter()


def _trace(msg: str) -> None:
    """``MPCBENCH_TRACE=1``: print phase timestamps (start-up cost diagnosis)."""
    if settings.trace():
        print(f"[{os.environ.get('RANK', '?')}] +{__import__('time').perf_counter() - _T0:.2f}s {msg}", flush=True)


def _die_with_parent() -> None:
    """Linux: get SIGKILL when the torchrun agent dies (no orphaned workers)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - not Linux: the launcher's sweep still applies
        pass


_die_with_parent()  # before the heavy imports below

import argparse
import json
import traceback
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from suite.schedules import pipeline_ranks

from .accounting import ByteMeter
from .config import CellConfig, ConfigError
from .data_parallel import make_dp_groups
from .placement import Placement
from .summary import summarize
from .trainer import resolve_device, train
from .transport import DistTransport
from .wire_check import counters_iface, kernel_check, read_counters

__all__ = ["main"]


def _one_line(e: BaseException) -> str:
    lines = [l.strip() for l in str(e).splitlines() if l.strip()]
    return f"{type(e).__name__}: {lines[0] if lines else ''}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", required=True, help="cell config JSON (CellConfig.to_dict)")
    p.add_argument("--out", required=True, help="run directory: result.json and errors/")
    args = p.parse_args(argv)
    out = Path(args.out)
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
    where = f"rank {rank}"
    _trace("imported")
    progress = logging.getLogger("mpcbench.train")  # the trainer's progress lines, into the cell's log
    if not progress.handlers:
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(logging.Formatter(f"%(asctime)s rank {rank}: %(message)s", datefmt="%H:%M:%S"))
        progress.addHandler(handler)
        progress.setLevel(logging.INFO)
        progress.propagate = False
    try:
        cfg = CellConfig.from_dict(json.loads(Path(args.config).read_text())).validate()  # loads plugins
        S, D, T = cfg.n_stages, cfg.dp, cfg.tp
        P = pipeline_ranks(cfg.schedule, S)
        if world != P * D * T:
            raise ConfigError(f"world size {world} != tp {T} x pipeline ranks {P} x dp {D}")
        placement = Placement.of_rank(rank, S, P, D, T)
        node = int(os.environ.get("GROUP_RANK", "0"))
        where = (
            f"rank {rank} (stage {','.join(map(str, placement.stages))}, replica {placement.dp_rank}"
            + (f", tp rank {placement.tp_rank}" if T > 1 else "")
            + (f", node {node})" if cfg.nnodes > 1 else ")")
        )
        # emulated hosts (cfg.link) share this machine's cores: every rank of the job counts; a cell
        # run beside others (-j, pytest -n, Ray) splits the threads its executor gave it
        cores = settings.cell_resources().get("cpu_threads") or os.cpu_count() or 1
        torch.set_num_threads(max(1, int(cores) // (world if cfg.link else local_world)))
        device = resolve_device(cfg.device, local_rank, local_world)
        backend = "nccl" if device.type == "cuda" else "gloo"
        if device.type == "cuda":
            torch.cuda.set_device(device)
        _trace("config loaded")
        dist.init_process_group(backend, timeout=timedelta(seconds=cfg.comm_timeout_s))
        _trace("process group up")
        dp_groups = make_dp_groups(placement) if D > 1 else None
        control = dist.new_group(backend="gloo") if backend != "gloo" else None  # for Python objects
        meter = ByteMeter()
        transport = DistTransport(meter, device, rank)
        iface = counters_iface()
        before = read_counters(iface) if iface and local_rank == 0 else None  # one reader per host
        report = train(cfg, placement, device, transport, dp_groups)
        if iface:  # every send has arrived (isend returns while bytes still sit in socket buffers and qdiscs)
            dist.barrier(group=control)
        after = read_counters(iface) if before is not None else None
        report["meter"] = meter.to_list()
        report["dp_size"], report["iface"] = D, iface
        if before is not None and after is not None:
            report["kernel"] = {"node": node, "iface": iface, "tx": after[0] - before[0], "rx": after[1] - before[1]}
        _trace("trained")
        gathered: list | None = [None] * world if rank == 0 else None
        dist.gather_object(report, gathered, dst=0, group=control)
        box: list = [None]
        if rank == 0:
            assert gathered is not None
            result = summarize(cfg, gathered)
            if cfg.nnodes > 1 or iface:
                result.network["kernel_bytes"] = kernel_check(gathered)
            box[0] = result.to_dict()
        # the result travels over the process group: every host writes it locally (no shared file system)
        dist.broadcast_object_list(box, src=0, group=control)
        if local_rank == 0:
            tmp = out / "result.json.tmp"
            tmp.write_text(json.dumps(box[0]))
            tmp.rename(out / "result.json")
        dist.barrier(group=control)
        dist.destroy_process_group()
        _trace("done")
        return 0
    except BaseException as e:  # noqa: BLE001 - every failure becomes one line for the launcher
        (out / "errors").mkdir(parents=True, exist_ok=True)
        (out / "errors" / f"rank{rank}.txt").write_text(f"{where}: {_one_line(e)}\n")
        traceback.print_exc()
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(1)  # skip process-group teardown, which can block on dead peers


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # The result is written and every rank passed the final barrier: leave without interpreter
    # teardown. Destroying gloo's C++ objects (pairs, their I/O threads) during Python's exit
    # intermittently aborted a finished rank with "terminate called without an active
    # exception" (SIGABRT), which torchrun then reported as a failed cell.
    os._exit(code)
