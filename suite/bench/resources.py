"""What one cell needs (processes, GPUs) and what it is given when cells run side by side.

A cell is one process (``mode="single"``) or one per pipeline rank and replica (torchrun). On
CUDA each process takes one GPU. When several cells share a machine (``mpcbench run -j N``,
``pytest suite -n N``, a Ray node), each is pinned: its GPUs through ``CUDA_VISIBLE_DEVICES``
and its share of the cores as a torch thread count, so N cells never oversubscribe the CPU.
The pinning travels to the cell in ``MPCBENCH_CELL_RESOURCES`` (JSON, read through
``suite.settings.cell_resources``): the cell sets its torch threads from it (torchrun ranks
split the cell's threads among themselves) and copies it into its record's
``provenance.resources``, so a record says what the cell had.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from suite import settings

if TYPE_CHECKING:  # torch-free at import: ``mpcbench run -j`` builds a slot before the fork server starts
    from suite.pipeline.config import CellConfig

__all__ = [
    "CellNeeds",
    "Slot",
    "LocalPool",
    "needs_of",
    "machine_cores",
    "default_jobs",
    "visible_gpus",
    "xdist_slot",
    "RESOURCES_ENV",
]

RESOURCES_ENV = "MPCBENCH_CELL_RESOURCES"


@dataclass(frozen=True)
class CellNeeds:
    """Processes a cell starts and GPUs it takes (one per process on CUDA, none on the CPU)."""

    processes: int
    gpus: int


def needs_of(config: CellConfig) -> CellNeeds:
    """The processes and GPUs of ``config`` (an unplannable config counts as one process)."""
    processes = 1
    if config.mode == "torchrun":
        from suite.schedules import pipeline_ranks

        try:
            processes = pipeline_ranks(config.schedule, config.n_stages) * config.dp // max(1, config.nnodes)
        except Exception:  # noqa: BLE001 - the cell itself reports a bad schedule/stages pair
            processes = 1
    return CellNeeds(processes, processes if config.device == "cuda" else 0)


def machine_cores() -> int:
    """The cores this process may run on (:func:`suite.settings.usable_cpus`)."""
    return settings.usable_cpus()


CELL_MEMORY_GIB = 3  # what a CPU cell of the quick tier may hold at its peak (MiniLM, ResNet-18 at 1/8 width)


def default_jobs() -> int:
    """Cells at once when ``-j`` is not given: one per core, as many as the memory holds at
    :data:`CELL_MEMORY_GIB` each (a cell's torch threads are then ``cores // jobs`` = 1)."""
    try:
        memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        memory_gib = float(CELL_MEMORY_GIB)
    return max(1, min(machine_cores(), int(memory_gib // CELL_MEMORY_GIB)))


def visible_gpus() -> list[str]:
    """The GPU ids this process may hand out: ``CUDA_VISIBLE_DEVICES`` if set, else every device
    NVML counts (no CUDA context is created), else none."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [g for g in (s.strip() for s in env.split(",")) if g and g != "-1"]
    try:
        import torch

        return [str(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []
    except Exception:  # noqa: BLE001 - a broken driver: no GPUs to hand out
        return []


def _omp_threads() -> int | None:
    value = os.environ.get("OMP_NUM_THREADS", "")
    return int(value) if value.isdigit() and int(value) > 0 else None


@dataclass(frozen=True)
class Slot:
    """What one running cell was given: torch threads, GPU ids, and by whom."""

    executor: str  # "local" (mpcbench run -j), "xdist" (pytest -n), "ray"
    jobs: int  # cells the executor runs at once on this machine (Ray: the cluster's CPU slots)
    cpu_threads: int
    gpus: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> dict[str, Any]:
        d = asdict(self)
        d["gpus"] = list(self.gpus)
        d.update(d.pop("extra"))
        return d

    def env(self) -> dict[str, str]:
        """The environment overrides that pin a cell to this slot."""
        out = {RESOURCES_ENV: json.dumps(self.describe(), sort_keys=True)}
        out["OMP_NUM_THREADS"] = out["MKL_NUM_THREADS"] = str(self.cpu_threads)
        if self.gpus or "CUDA_VISIBLE_DEVICES" in os.environ:
            out["CUDA_VISIBLE_DEVICES"] = ",".join(self.gpus)
        return out


class LocalPool:
    """The cores and GPUs of this machine, handed out to ``jobs`` cells at once.

    Each cell gets ``threads`` torch threads (default ``cores // jobs``, at most ``OMP_NUM_THREADS``
    when that is set: a run that asked serial cells for one thread gets the same numerics with
    ``-j``) and the GPUs its processes need; a cell needing more GPUs than are free waits
    (:meth:`acquire` returns None) until another cell releases them. Thread-safe."""

    def __init__(
        self,
        jobs: int,
        executor: str = "local",
        cores: int | None = None,
        gpus: list[str] | None = None,
        threads: int | None = None,
    ):
        if jobs < 1:
            raise ValueError(f"jobs must be at least 1, got {jobs}")
        if threads is not None and threads < 1:
            raise ValueError(f"--cpus-per-cell must be at least 1, got {threads}")
        self.jobs = jobs
        self.executor = executor
        self.cores = cores or machine_cores()
        self.threads = threads or max(1, min(self.cores // jobs, _omp_threads() or self.cores))
        self.all_gpus = list(visible_gpus() if gpus is None else gpus)
        self._free = list(self.all_gpus)
        self._lock = threading.Lock()

    def fits(self, needs: CellNeeds) -> bool:
        """Whether the machine has enough GPUs for ``needs`` at all (else it would wait forever)."""
        return needs.gpus <= len(self.all_gpus)

    def acquire(self, needs: CellNeeds) -> Slot | None:
        with self._lock:
            if needs.gpus > len(self._free):
                return None
            gpus, self._free = tuple(self._free[: needs.gpus]), self._free[needs.gpus :]
        return Slot(self.executor, self.jobs, self.threads, gpus)

    def release(self, slot: Slot) -> None:
        with self._lock:
            self._free.extend(g for g in slot.gpus if g not in self._free)


def xdist_slot(worker: str | None, count: str | int | None) -> Slot | None:
    """The slot of a pytest-xdist worker (``PYTEST_XDIST_WORKER`` ``gw<i>`` of
    ``PYTEST_XDIST_WORKER_COUNT`` n): ``cores // n`` threads and every n-th visible GPU from
    the i-th on; None outside xdist or with one worker. xdist workers are fixed processes, so
    the split is static: a cell needing more GPUs than its worker holds fails with a clear line
    (run such cells with ``mpcbench run -j`` or on Ray, which hand GPUs out per cell)."""
    if not worker or not worker.startswith("gw") or not worker[2:].isdigit():
        return None
    n = int(count or 1)
    if n <= 1:
        return None
    i = int(worker[2:])
    gpus = tuple(visible_gpus()[i::n])
    return Slot("xdist", n, max(1, machine_cores() // n), gpus, {"worker": worker})
