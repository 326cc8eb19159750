"""Run a list of planned cells into a results store: resume, isolation, progress.

Shared by ``mpcbench run`` and (per cell) by the pytest entry. Cells run on an executor
(``suite.bench.executors``: one at a time, ``-j N`` at once, or on Ray); this process, the
driver, alone appends their records. Every cell is attempted; a
failing cell is stored as failed and the loop goes on. A cell whose key already has an
``ok`` record in the store is skipped ("already in store"), so an interrupted matrix is
finished by running the same command again.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, TextIO

from suite.results.records import IDENTITY_KEYS, QUALITY_KEYS

from .cell import DEFAULT_RUNTIME, log_path_for
from .executors import Executor, SerialExecutor
from .matrix import PlannedCell
from .store import ResultsStore

__all__ = ["CellOutcome", "run_cells", "summarize_record", "cell_state", "ALREADY_IN_STORE"]

ALREADY_IN_STORE = "already in store"


def cell_state(cell: PlannedCell, done_keys: set[str]) -> str:
    """What a dry run says about ``cell``: its skip reason, ``broken: ...``, already in store, or to run."""
    if cell.skip:
        return cell.skip
    if cell.error:
        return f"broken: {cell.error}"
    return ALREADY_IN_STORE if cell.config.key() in done_keys else "to run"


@dataclass
class CellOutcome:
    """What happened to one cell: ``ok``, ``failed``, ``timeout`` or ``skipped`` (with reason)."""

    cell: PlannedCell
    status: str
    reason: str | None = None
    record: dict[str, Any] | None = None


def summarize_record(record: dict[str, Any]) -> dict[str, Any]:
    """The flat, JSON-able numbers of a record (pytest-benchmark ``extra_info``, progress lines)."""
    out: dict[str, Any] = {k: record.get(k) for k in (*IDENTITY_KEYS, *QUALITY_KEYS, "wall_s", "log")}
    out["specs"] = record.get("specs")
    out["compression_ratio"] = record.get("compression_ratio")
    out["bytes"] = record.get("bytes")
    out["bytes_per_step"] = record.get("bytes_per_step")
    out["time"] = record.get("time")
    modeled = record.get("modeled") or {}
    out["modeled_time_to_target_s"] = {p: m.get("time_to_target_s") for p, m in modeled.items()}
    out["modeled_step_s"] = {p: m.get("step_s") for p, m in modeled.items()}
    return out


def _fmt_duration(s: float) -> str:
    return f"{int(s // 60)}m{s % 60:04.1f}s" if s >= 60 else f"{s:.1f}s"


def _line(o: CellOutcome, elapsed: float | None) -> str:
    cid = o.cell.test_id or o.cell.config.cell_id
    if o.status == "ok" and o.record:
        r = o.record
        ratio = (r.get("compression_ratio") or {}).get("total")
        ratio_s = f"  ratio {ratio:.1f}x" if ratio else ""
        took = f"  {_fmt_duration(elapsed)}" if elapsed is not None else ""
        return f"ok       {cid}  {r['metric_name']}={r['final_metric']:.4g}{ratio_s}{took}"
    return f"{o.status:<8} {cid}  {o.reason}"


class _Rounds:
    """Which rounds of the breadth-first order are complete: a round is done when its cells and every
    earlier round's have finished (cells run out of order under ``-j N``)."""

    def __init__(self, cells: list[PlannedCell]) -> None:
        self.left: dict[int, int] = {}
        for c in cells:
            self.left[c.round] = self.left.get(c.round, 0) + 1
        self.order = sorted(self.left)
        self.last = self.order[-1] if self.order else 0

    def finished(self, cell: PlannedCell) -> list[int]:
        """The rounds that ``cell`` completes (none, or the next few in order)."""
        self.left[cell.round] -= 1
        done = []
        while self.order and self.left[self.order[0]] == 0:
            done.append(self.order.pop(0))
        return done


class _Progress:
    """Cells done / running / left, and the time left: the finished cells' throughput (cells per
    wall-clock second, so N cells at once count) applied to the cells still to run."""

    def __init__(self, to_run: int) -> None:
        self.to_run, self.ran, self.running, self.t0 = to_run, 0, 0, time.perf_counter()

    def started(self) -> None:
        self.running += 1

    def finished(self) -> None:
        self.ran += 1
        self.running -= 1

    def left(self) -> str:
        elapsed = time.perf_counter() - self.t0
        if not self.ran:
            return (
                f"  [{self.running} running, {self.to_run - self.running} left]"
                if self.running
                else f"  [{self.to_run} to run]"
            )
        rest = elapsed / self.ran * (self.to_run - self.ran)
        return (
            f"  [{self.ran}/{self.to_run} run, {self.running} running, {self.to_run - self.ran - self.running} left, "
            f"{_fmt_duration(elapsed)} elapsed, ETA {_fmt_duration(rest)}]"
        )


def run_cells(
    cells: list[PlannedCell],
    store: ResultsStore,
    *,
    progress: bool = True,
    stream: TextIO | None = None,
    runtime: str = DEFAULT_RUNTIME,
    on_outcome: Callable[[CellOutcome], None] | None = None,
    executor: Executor | None = None,
    on_round: Callable[[int, int], None] | None = None,
) -> list[CellOutcome]:
    """Run every cell (skipping stored and not-applicable ones) on ``executor`` (default: one at a
    time); append each record as it finishes. This process alone writes the store, one record per
    cell run; on an interruption the running cells are killed and not stored (rerun to resume).
    ``on_round(r, last)``: called once round ``r`` (``PlannedCell.round``) and every round before it
    have finished, for each round in which a cell ran (``last``: the highest round)."""
    from tqdm import tqdm

    executor = executor or SerialExecutor()
    stream = stream or sys.stderr
    done = store.done_keys()
    outcomes: list[CellOutcome] = []
    interactive = progress and hasattr(stream, "isatty") and stream.isatty()  # no \r noise in CI logs
    to_run = [c for c in cells if c.skip is None and c.config.key() not in done]
    # the bar counts only the cells that run: after a resume, hundreds of instant skips would make
    # tqdm's rate (and so its time left) minutes for hours of work
    bar = tqdm(total=len(to_run), unit="cell", disable=not interactive, file=stream, dynamic_ncols=True)
    prog = _Progress(len(to_run))
    started: dict[int, float] = {}
    rounds = _Rounds(to_run)

    def report(o: CellOutcome, elapsed: float | None) -> None:
        outcomes.append(o)
        line = _line(o, elapsed)
        if interactive:
            bar.write(line, file=stream)
        else:
            print(f"[{len(outcomes)}/{len(cells)}] {line}{prog.left() if o.record else ''}", file=stream, flush=True)
        if on_outcome:
            on_outcome(o)
        if o.record:
            bar.update(1)

    events = executor.run(to_run, log_dir=store.log_dir, runtime=runtime)
    try:
        for cell in cells:  # the ones not to run are reported first, in matrix order
            if cell.skip is not None:
                report(CellOutcome(cell, "skipped", cell.skip), None)
            elif cell.config.key() in done:
                report(CellOutcome(cell, "skipped", ALREADY_IN_STORE), None)
        for kind, cell, record in events:
            cid = cell.test_id or cell.config.cell_id
            if kind == "start":
                started[id(cell)] = time.perf_counter()
                prog.started()
                bar.set_postfix_str(cid, refresh=True)
                if not interactive:  # a line when a cell starts: a redirected log shows what is running
                    print(
                        f"[{len(outcomes) + prog.running}/{len(cells)}] start    {cid}  (log: "
                        f"{log_path_for(cell.config, store.log_dir)}){prog.left()}",
                        file=stream,
                        flush=True,
                    )
                continue
            assert record is not None
            store.append(record)
            prog.finished()
            report(
                CellOutcome(cell, record["status"], record.get("error"), record),
                time.perf_counter() - started.pop(id(cell)),
            )
            for finished_round in rounds.finished(cell):
                if on_round:
                    on_round(finished_round, rounds.last)
    finally:
        events.close()  # an interrupted executor kills its running cells
        bar.close()
    return outcomes
