"""Where cells run: one after another, N at once on this machine, or on a Ray cluster.

An executor takes the cells to run and yields events as they happen: ``("start", cell, None)``
when a cell is handed out (Ray: submitted) and ``("done", cell, record)`` when its record is back.
The runner (``suite.bench.runner.run_cells``, the driver) alone appends records to the store,
so every executor produces exactly one record per cell, and an interrupted run (Ctrl-C, the
consumer raising) stops and kills what is running: those cells are not stored and a rerun
does them again.

- :class:`SerialExecutor`: today's loop, one cell at a time with the machine to itself.
- :class:`LocalExecutor` (``mpcbench run -j N``): N cells at once, each pinned to a
  :class:`suite.bench.resources.Slot` (its share of the cores, its GPUs).
- ``suite.bench.ray_executor.RayExecutor`` (``--executor ray``): cells as Ray tasks.
"""

from __future__ import annotations

import concurrent.futures as cf
from collections import deque
from pathlib import Path
from typing import Any, Generator, Protocol

from .cell import kill_running, run_cell
from .matrix import PlannedCell
from .resources import LocalPool, Slot, needs_of

__all__ = ["Executor", "Event", "SerialExecutor", "LocalExecutor", "make_executor", "EXECUTORS"]

Event = tuple[str, PlannedCell, "dict[str, Any] | None"]
EXECUTORS = ("local", "ray")


class Executor(Protocol):
    """Runs cells and yields ``start`` / ``done`` events (see the module docstring)."""

    name: str
    slots: int  # cells it runs at once (for the progress line's estimate)

    def run(self, cells: list[PlannedCell], *, log_dir: Path, runtime: str) -> Generator[Event, None, None]: ...


def _sweep(cell: PlannedCell) -> None:
    if cell.config.link is not None:  # a killed cell cannot remove its emulated hosts: its parent does
        from suite.pipeline.netns import sweep_leftovers

        sweep_leftovers()


class SerialExecutor:
    """One cell at a time, unpinned: the cell has the machine (and its thread settings) to itself."""

    name, slots = "serial", 1

    def run(self, cells: list[PlannedCell], *, log_dir: Path, runtime: str) -> Generator[Event, None, None]:
        for cell in cells:
            yield "start", cell, None
            record = run_cell(cell, log_dir=log_dir, runtime=runtime)
            _sweep(cell)
            yield "done", cell, record


class LocalExecutor:
    """``jobs`` cells at once on this machine, each in its own process group as usual.

    Each cell is pinned through its slot: ``cores // jobs`` torch threads and the GPUs its
    processes need (``CUDA_VISIBLE_DEVICES``). A cell whose GPUs are not free yet waits while
    cells that fit start; the order of the matrix is kept otherwise."""

    name = "local"

    def __init__(self, jobs: int, pool: LocalPool | None = None) -> None:
        self.pool = pool or LocalPool(jobs)
        self.slots = self.pool.jobs

    def run(self, cells: list[PlannedCell], *, log_dir: Path, runtime: str) -> Generator[Event, None, None]:
        pending = deque(cells)
        running: dict[cf.Future, tuple[PlannedCell, Slot]] = {}
        pool = cf.ThreadPoolExecutor(max_workers=self.slots, thread_name_prefix="mpcbench-cell")
        try:
            while pending or running:
                for cell in list(pending):  # start what fits, in matrix order
                    if len(running) >= self.slots:
                        break
                    needs = needs_of(cell.config)
                    slot = self.pool.acquire(needs)
                    if slot is None and not self.pool.fits(needs):  # never fits: run it, it says why
                        slot = Slot(self.pool.executor, self.slots, self.pool.threads, tuple(self.pool.all_gpus))
                    if slot is None:
                        continue
                    pending.remove(cell)
                    future = pool.submit(run_cell, cell, log_dir=log_dir, runtime=runtime, env=slot.env())
                    running[future] = (cell, slot)
                    yield "start", cell, None
                finished, _ = cf.wait(running, return_when=cf.FIRST_COMPLETED)
                for future in finished:
                    cell, slot = running.pop(future)
                    self.pool.release(slot)
                    _sweep(cell)
                    yield "done", cell, future.result()
        finally:
            if running:  # interrupted: kill the cells still running, store nothing of them
                kill_running()
            pool.shutdown(wait=True, cancel_futures=True)


def make_executor(
    name: str = "local", jobs: int = 1, *, address: str | None = None, cpus_per_cell: int | None = None
) -> Executor:
    """The executor ``mpcbench run`` asks for: ``local`` with ``jobs`` (1: serial) or ``ray``."""
    if name not in EXECUTORS:
        raise ValueError(f"unknown executor {name!r}; valid: {', '.join(EXECUTORS)}")
    if name == "ray":
        from .ray_executor import RayExecutor

        return RayExecutor(address=address, cpus_per_cell=cpus_per_cell or 1, local_cpus=jobs if jobs > 1 else None)
    if jobs < 1:
        raise ValueError(f"-j/--jobs must be at least 1, got {jobs}")
    if jobs == 1 and cpus_per_cell is None:
        return SerialExecutor()
    # -j 1 --cpus-per-cell N: one cell at a time, still pinned to N threads (the serial loop
    # leaves a cell the machine's threads, so the option would be dropped without a word)
    return LocalExecutor(jobs, LocalPool(jobs, threads=cpus_per_cell))
