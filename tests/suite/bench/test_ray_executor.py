"""``mpcbench run --executor ray`` on a local Ray cluster (this machine only, no network outside it).

One cluster for the test: two worker processes, the tiny task's smoke cells through it, and
the Ray worker running one cell SIGKILLed mid-cell. Afterwards the driver's store holds every
cell ok exactly once (the killed attempt is retried by Ray and stored once), it validates, and
its quality and bytes equal a serial run's.
"""

from __future__ import annotations

import io
from collections import Counter
from pathlib import Path

import pytest

from suite.bench.executors import SerialExecutor
from suite.bench.matrix import PlannedCell
from suite.bench.runner import run_cells
from suite.bench.store import ResultsStore, read_jsonl

ray = pytest.importorskip("ray", reason="the Ray executor's test needs ray (pip install -e '.[ray]')")

from suite.bench.ray_executor import RayExecutor  # noqa: E402 - after the skip

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
RUNTIMES = str(FIXTURES / "executor_runtimes.py")


@pytest.mark.distributed
def test_ray_run_survives_a_killed_worker_and_stores_each_cell_once(tiny_cell, tmp_path):
    cells = [PlannedCell(tiny_cell(plan=spec, tier="smoke")) for spec in ("none", "quant(bits=4)")]
    serial = ResultsStore(tmp_path / "serial.jsonl")
    run_cells(cells, serial, progress=False, stream=io.StringIO(), executor=SerialExecutor())

    kill_dir = tmp_path / "kill"
    kill_dir.mkdir()
    store = ResultsStore(tmp_path / "ray.jsonl")
    executor = RayExecutor(local_cpus=2, retries=2, env={"KILL_ONCE_DIR": str(kill_dir), "KILL_SEED": "0"})
    outcomes = run_cells(
        cells, store, progress=False, stream=io.StringIO(), runtime=f"{RUNTIMES}:kill_worker_once", executor=executor
    )
    assert (kill_dir / "killed").exists(), "no Ray worker was killed: the test did not test a retry"
    assert not ray.is_initialized()  # the local cluster it started is stopped again
    assert [o.status for o in outcomes] == ["ok", "ok"], [o.reason for o in outcomes]

    records = store.records()
    assert Counter(r["cell_key"] for r in records) == Counter(c.config.key() for c in cells)  # each once
    assert all(r["status"] == "ok" for r in records)
    want = {r["cell_key"]: (r["final_metric"], r["bytes"]) for r in serial.records()}
    assert {r["cell_key"]: (r["final_metric"], r["bytes"]) for r in records} == want
    res = records[0]["provenance"]["resources"]
    assert (res["executor"], res["cpu_threads"], res["torch_threads"], res["jobs"]) == ("ray", 1, 1, 2)
    assert read_jsonl(store.path)[1] == []  # what mpcbench validate checks in a store
