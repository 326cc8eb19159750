"""Run a list of planned cells into a results store: resume, isolation, progress.

Shared by ``mpcbench run`` and (per cell) by the pytest entry. Every cell is attempted; a
failing cell is stored as failed and the loop goes on. A cell whose key already has an
``ok`` record in the store is skipped ("already in store"), so an interrupted matrix is
finished by running the same command again.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, TextIO

from .cell import DEFAULT_RUNTIME, log_path_for, run_cell
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
    out: dict[str, Any] = {
        k: record.get(k)
        for k in (
            "cell_id",
            "cell_key",
            "record_id",
            "task",
            "tier",
            "seed",
            "compressor",
            "status",
            "error",
            "metric_name",
            "higher_is_better",
            "final_metric",
            "final_metric_uncompressed",
            "target",
            "reached_target_step",
            "wall_s",
            "log",
        )
    }
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


class _Eta:
    """Time left: the mean wall-clock of the cells run so far times the cells still to run."""

    def __init__(self, to_run: int) -> None:
        self.to_run, self.ran, self.spent, self.t0 = to_run, 0, 0.0, time.perf_counter()

    def finished(self, seconds: float) -> None:
        self.ran += 1
        self.spent += seconds

    def left(self) -> str:
        elapsed = _fmt_duration(time.perf_counter() - self.t0)
        if not self.ran:
            return f"  [{self.to_run} to run]"
        rest = (self.spent / self.ran) * (self.to_run - self.ran)
        return f"  [{self.ran}/{self.to_run} run, {elapsed} elapsed, ETA {_fmt_duration(rest)}]"


def run_cells(
    cells: list[PlannedCell],
    store: ResultsStore,
    *,
    progress: bool = True,
    stream: TextIO | None = None,
    runtime: str = DEFAULT_RUNTIME,
    on_outcome: Callable[[CellOutcome], None] | None = None,
) -> list[CellOutcome]:
    """Run every cell (skipping stored and not-applicable ones); append each record as it finishes."""
    from tqdm import tqdm

    stream = stream or sys.stderr
    done = store.done_keys()
    outcomes: list[CellOutcome] = []
    interactive = progress and hasattr(stream, "isatty") and stream.isatty()  # no \r noise in CI logs
    eta = _Eta(sum(1 for c in cells if c.skip is None and c.config.key() not in done))
    # the bar counts only the cells that run: after a resume, hundreds of instant skips would make
    # tqdm's rate (and so its time left) minutes for hours of work
    bar = tqdm(total=eta.to_run, unit="cell", disable=not interactive, file=stream, dynamic_ncols=True)
    try:
        for cell in cells:
            cid = cell.test_id or cell.config.cell_id
            bar.set_postfix_str(cid, refresh=True)
            t0 = time.perf_counter()
            if cell.skip is not None:
                o = CellOutcome(cell, "skipped", cell.skip)
            elif cell.config.key() in done:
                o = CellOutcome(cell, "skipped", ALREADY_IN_STORE)
            else:
                if not interactive:  # a line when a cell starts: a redirected log shows what is running
                    print(
                        f"[{len(outcomes) + 1}/{len(cells)}] start    {cid}  (log: "
                        f"{log_path_for(cell.config, store.log_dir)}){eta.left()}",
                        file=stream,
                        flush=True,
                    )
                record = run_cell(cell, log_dir=store.log_dir, runtime=runtime)
                if cell.config.link is not None:  # a killed cell cannot remove its emulated hosts: its parent does
                    from suite.pipeline.netns import sweep_leftovers

                    sweep_leftovers()
                store.append(record)
                eta.finished(time.perf_counter() - t0)
                o = CellOutcome(cell, record["status"], record.get("error"), record)
            outcomes.append(o)
            line = _line(o, time.perf_counter() - t0 if o.record else None)
            if interactive:
                bar.write(line, file=stream)
            else:
                print(f"[{len(outcomes)}/{len(cells)}] {line}{eta.left() if o.record else ''}", file=stream, flush=True)
            if on_outcome:
                on_outcome(o)
            if o.record:
                bar.update(1)
    finally:
        bar.close()
    return outcomes
