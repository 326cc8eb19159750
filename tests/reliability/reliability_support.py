"""Helpers of the reliability tests (issue 8): fixture paths, in-process cells, the tally.

Imported by ``conftest.py`` and the test modules (a plain module with a unique name: several
``conftest`` modules share one name, so tests must not import from them).

The tally counts, over the whole run of ``tests/reliability``, every fault a test injects,
whether the benchmark caught it (the test's assertions about the specific reason passed),
and, for every results store the tests check, how many cells ran and how many were lost
(no valid record in the store). ``conftest.py``
prints it at the end of the run and, with ``MPCBENCH_RELIABILITY_TALLY=path.json``, writes
it as JSON (docs/reliability.md quotes it)::

    MPCBENCH_RELIABILITY_TALLY=/tmp/tally.json pytest tests/reliability
"""

from __future__ import annotations

import contextlib
import io
import json
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from fixtures.processes import processes_with_env  # noqa: F401  (re-exported for the tests)

from suite.pipeline.config import CellConfig, CompressionPlan

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
TINY = str(FIXTURES / "tiny_task.py")
FAULTY = str(FIXTURES / "faulty_plugins.py")
UNIMPORTABLE = str(FIXTURES / "faulty_plugin_unimportable.py")
TALLY_ENV = "MPCBENCH_RELIABILITY_TALLY"
MARKER_ENV = "MPCBENCH_RELIABILITY_MARKER"  # tags every process a test starts (orphan check)


# --------------------------------------------------------------------------- the tally
class Tally:
    """Faults injected / caught (one row per injected fault) and cells run / lost (per store check)."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.stores: list[dict[str, Any]] = []

    @contextlib.contextmanager
    def fault(self, area: str, name: str) -> Iterator[dict[str, Any]]:
        """Count one injected fault; it counts as caught only if the block finishes (its
        assertions about the specific reason passed)."""
        row: dict[str, Any] = {"area": area, "fault": name, "caught": False}
        self.rows.append(row)
        yield row
        row["caught"] = True

    def cells(self, area: str, expected: int, stored: int) -> int:
        """Count a store check: ``expected`` cells were run, ``stored`` of them have a valid
        record. Returns the number of lost cells (the caller asserts it is zero)."""
        self.stores.append({"area": area, "cells": expected, "lost": max(0, expected - stored)})
        return expected - stored

    def summary(self) -> dict[str, Any]:
        areas: dict[str, dict[str, int]] = {}
        for r in self.rows:
            a = areas.setdefault(r["area"], {"injected": 0, "caught": 0, "cells": 0, "cells_lost": 0})
            a["injected"] += 1
            a["caught"] += int(r["caught"])
        for c in self.stores:
            a = areas.setdefault(c["area"], {"injected": 0, "caught": 0, "cells": 0, "cells_lost": 0})
            a["cells"] += c["cells"]
            a["cells_lost"] += c["lost"]
        return {
            "faults_injected": len(self.rows),
            "faults_caught": sum(r["caught"] for r in self.rows),
            "cells_checked": sum(c["cells"] for c in self.stores),
            "cells_lost": sum(c["lost"] for c in self.stores),
            "by_area": areas,
            "faults": self.rows,
        }


TALLY = Tally()  # one per test session


# --------------------------------------------------------------------------- cells
def tiny_config(spec: str | dict[str, Any] = "none", **fields: Any) -> CellConfig:
    """A cell of the tiny task with the faulty plugins available; 2 steps unless told otherwise."""
    fields.setdefault("steps", 2)
    plan = CompressionPlan.from_dict(spec)
    return CellConfig(task="tiny", plan=plan, plugins=(TINY, FAULTY), **fields)


def run_in_process(config: CellConfig, tmp: Path) -> dict[str, Any]:
    """The cell's record, produced in this process by exactly what the cell child runs
    (``suite.bench.cell.execute``: validate, import plugins, train) and what the runner does with
    its output (``suite.bench.cell.interpret``). Saves a child process start per cell."""
    from suite.bench.cell import execute, interpret

    tmp.mkdir(parents=True, exist_ok=True)
    cfg_file, out_file = tmp / "config.json", tmp / "result.json"
    cfg_file.write_text(json.dumps(config.to_dict()))
    err = io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stderr(err):  # the child's traceback goes to its log; here: discarded
        rc = execute(cfg_file, out_file)
    payload = json.loads(out_file.read_text())
    return interpret(config.validate(), payload, rc, wall_s=time.perf_counter() - t0, log=tmp / "cell.log")


# --------------------------------------------------------------------------- processes
def wait_until(cond: Callable[[], Any], timeout: float, every: float = 0.1) -> Any:
    """Poll ``cond`` until it returns something truthy (returned) or ``timeout`` passes (None)."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value or time.monotonic() > deadline:
            return value or None
        time.sleep(every)
