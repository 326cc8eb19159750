"""Cells as Ray tasks: ``mpcbench run --executor ray [--address ADDRESS]``.

Each cell is one Ray task asking for ``--cpus-per-cell`` CPUs and one GPU per process on CUDA.
A cell whose ranks need several GPUs gets them on one node through a placement group (one
``STRICT_PACK`` bundle) and launches its ranks there with torchrun, exactly as on one machine.
On the worker the task runs the cell the usual way (``suite.bench.cell.run_cell``: a child
process group, its time limit, its log) and returns the record; the driver alone appends it
to the store, so a record is written once, when its task's result arrives.

A worker or node that dies mid-cell costs that cell's attempt only: Ray retries the task (at
most ``retries`` times; the cell's process group dies with its worker, the parent watch of
``suite.bench.cell``), and a cell that still gets no result is stored as ``failed`` with the
reason, to be rerun like any failed cell. Results never arrive twice: a task has one result.

Code, plugins and data reach the workers by a **shared path**: the checkout, plugin files
and the data directory must be at the same absolute paths on every node (one machine, NFS, or
one image). The driver passes ``PYTHONPATH`` (the checkout first) and its ``MPCBENCH_*`` /
``HF_*`` settings to the workers through the job's Ray runtime environment (``env_vars``).
Ray is an optional extra (``pip install -e ".[ray]"``); nothing else imports it.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any, Generator

from .forkserver import REPO_ROOT
from .matrix import PlannedCell
from .resources import Slot, machine_cores, needs_of

__all__ = ["RayExecutor", "runtime_env", "DEFAULT_RETRIES"]

DEFAULT_RETRIES = 2  # attempts after the first when a worker or node dies mid-cell
_PASSED_ENV = ("MPCBENCH_", "HF_", "TRANSFORMERS_", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def runtime_env() -> dict[str, Any]:
    """The job's Ray runtime environment: this checkout first on ``PYTHONPATH`` (a shared path on
    every node) and the driver's mpcbench / Hugging Face settings."""
    env = {k: v for k, v in os.environ.items() if k.startswith(_PASSED_ENV) and k != "MPCBENCH_CELL_RESOURCES"}
    env["PYTHONPATH"] = os.pathsep.join([REPO_ROOT, *filter(None, [os.environ.get("PYTHONPATH")])])
    return {"env_vars": env}


def _run_on_worker(
    config: dict[str, Any], log_dir: str, runtime: str, cpus: int, jobs: int, extra_env: dict[str, str]
) -> dict[str, Any]:
    """The Ray task: run one cell on this node, pinned to what Ray gave the task."""
    import ray

    from suite.pipeline.config import CellConfig

    from .cell import run_cell

    ctx = ray.get_runtime_context()
    gpus = tuple(str(g) for g in ray.get_gpu_ids())
    slot = Slot("ray", jobs, cpus, gpus, {"node": socket.gethostname(), "ray_node_id": ctx.get_node_id()[:12]})
    return run_cell(CellConfig.from_dict(config), log_dir=log_dir, runtime=runtime, env={**extra_env, **slot.env()})


class RayExecutor:
    """Runs cells as tasks on a Ray cluster (``address``) or on a local one it starts and stops.

    ``cpus_per_cell``: the CPUs each task asks for (and the cell's torch threads). ``local_cpus``:
    the size of a local cluster (default: this machine's cores). ``env``: extra variables for
    every cell (tests use it)."""

    name = "ray"

    def __init__(
        self,
        address: str | None = None,
        *,
        cpus_per_cell: int = 1,
        local_cpus: int | None = None,
        retries: int = DEFAULT_RETRIES,
        env: dict[str, str] | None = None,
    ) -> None:
        try:
            import ray  # noqa: F401
        except ImportError:
            raise ValueError("--executor ray needs Ray: pip install -e '.[ray]' (or pip install 'ray>=2.9')") from None
        if cpus_per_cell < 1:
            raise ValueError(f"--cpus-per-cell must be at least 1, got {cpus_per_cell}")
        self.address = address
        self.cpus_per_cell = cpus_per_cell
        self.local_cpus = local_cpus
        self.retries = retries
        self.env = dict(env or {})
        self.slots = local_cpus // cpus_per_cell if local_cpus else max(1, machine_cores() // cpus_per_cell)

    def _connect(self) -> bool:
        """Join (or start) the cluster; True when this call started it (and must stop it)."""
        import ray

        if ray.is_initialized():
            return False
        kwargs: dict[str, Any] = {"runtime_env": runtime_env(), "log_to_driver": False, "configure_logging": False}
        if self.address is None:  # a local cluster, small: it shares the machine with the cells
            kwargs.update(
                num_cpus=self.local_cpus or machine_cores(), include_dashboard=False, object_store_memory=80 * 2**20
            )
        ray.init(address=self.address, **kwargs)
        return True

    def run(
        self, cells: list[PlannedCell], *, log_dir: Path, runtime: str
    ) -> Generator[tuple[str, PlannedCell, Any], None, None]:
        import ray
        from ray.util.placement_group import placement_group, remove_placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        if not cells:
            return
        started_here = self._connect()
        cluster_cpus = int(ray.cluster_resources().get("CPU", 1))
        self.slots = max(1, cluster_cpus // self.cpus_per_cell)
        task = ray.remote(_run_on_worker)
        refs: dict[Any, tuple[PlannedCell, Any]] = {}
        try:
            for cell in cells:
                needs = needs_of(cell.config)
                options: dict[str, Any] = {
                    "num_cpus": self.cpus_per_cell,
                    "num_gpus": needs.gpus,
                    "max_retries": self.retries,
                    "retry_exceptions": False,  # a cell's own failure is a record, not a retry
                    "name": f"mpcbench:{cell.config.cell_id}",
                }
                group = None
                if needs.gpus > 1:  # all its ranks' GPUs on one node
                    group = placement_group([{"CPU": self.cpus_per_cell, "GPU": needs.gpus}], strategy="STRICT_PACK")
                    options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(group, 0)
                ref = task.options(**options).remote(
                    cell.config.to_dict(),
                    str(Path(log_dir).resolve()),
                    runtime,
                    self.cpus_per_cell,
                    self.slots,
                    self.env,
                )
                refs[ref] = (cell, group)
                yield "start", cell, None
            while refs:
                ready, _ = ray.wait(list(refs), num_returns=1)
                for ref in ready:
                    cell, group = refs.pop(ref)
                    try:
                        record = ray.get(ref)
                    except ray.exceptions.RayError as e:
                        record = self._lost(cell, e)
                    if group is not None:
                        remove_placement_group(group)
                    yield "done", cell, record
        finally:
            for ref, (_, group) in refs.items():  # interrupted: stop what is still queued or running
                ray.cancel(ref, force=True)
                if group is not None:
                    remove_placement_group(group)
            if started_here:
                ray.shutdown()

    def _lost(self, cell: PlannedCell, error: BaseException) -> dict[str, Any]:
        """The record of a cell whose task never returned one (worker or node lost every attempt,
        or the module could not be imported there)."""
        from .cell import one_line
        from .provenance import provenance
        from .record_builder import failed_record

        reason = one_line(error).split(" Traceback")[0]
        if "ModuleNotFoundError" in reason or "No module named" in reason:
            reason = (
                f"the Ray worker cannot import mpcbench ({reason}); the checkout, plugins and data must be at the same "
                f"paths on every node ({REPO_ROOT})"
            )
        else:
            reason = f"the Ray task of this cell failed {self.retries + 1} times without a result: {reason}"
        return failed_record(cell.config, reason, provenance(cell.config))
