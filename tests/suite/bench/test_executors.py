"""``mpcbench run -j N`` (suite.bench.executors.LocalExecutor) and the slots it pins cells to.

The store a parallel run writes equals a serial run's cell for cell (quality and bytes); each
record says what its cell had; an interrupted run stores only finished cells and a rerun
finishes the rest, each cell once. Slot arithmetic (threads, GPU hand-out, xdist split) is
checked without processes.
"""

from __future__ import annotations

import io
from collections import Counter
from pathlib import Path

import pytest

from suite.bench.executors import LocalExecutor, SerialExecutor, make_executor
from suite.bench.matrix import PlannedCell
from suite.bench.resources import CellNeeds, LocalPool, Slot, needs_of, xdist_slot
from suite.bench.runner import ALREADY_IN_STORE, run_cells
from suite.bench.store import ResultsStore, read_jsonl
from suite.pipeline.config import CellConfig

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
RUNTIMES = str(FIXTURES / "executor_runtimes.py")
TINY_TASK = str(FIXTURES / "tiny_task.py")
SPECS = ("none", "topk(ratio=0.5)", "quant(bits=4)")


def compare_stores(a: ResultsStore, b: ResultsStore) -> None:
    """Same cells, each ok exactly once, equal quality and bytes."""
    ra, rb = a.records(), b.records()
    for records in (ra, rb):
        assert all(r["status"] == "ok" for r in records), [r.get("error") for r in records]
        assert max(Counter(r["cell_key"] for r in records).values()) == 1, "a cell stored twice"
    by_key = {r["cell_key"]: r for r in rb}
    assert set(by_key) == {r["cell_key"] for r in ra}
    for r in ra:
        other = by_key[r["cell_key"]]
        assert (r["final_metric"], r["bytes"], r["curve"][-1]["metric"]) == (
            other["final_metric"],
            other["bytes"],
            other["curve"][-1]["metric"],
        ), r["cell_id"]


@pytest.fixture(scope="module", autouse=True)
def kill_dir(tmp_path_factory):
    """``KILL_ONCE_DIR`` for the whole module: one environment, so every test's cells fork from
    one fork server (a changed variable restarts it: seconds of torch import)."""
    path = tmp_path_factory.mktemp("kill")
    mp = pytest.MonkeyPatch()
    mp.setenv("KILL_ONCE_DIR", str(path))
    yield path
    mp.undo()


@pytest.fixture(scope="module")
def serial_store(tmp_path_factory, request) -> ResultsStore:
    """The tiny smoke cells run one at a time: the reference the executors must reproduce."""
    cells = [PlannedCell(c) for c in request.getfixturevalue("module_cells")]
    store = ResultsStore(tmp_path_factory.mktemp("serial") / "store.jsonl")
    run_cells(cells, store, progress=False, stream=io.StringIO(), executor=SerialExecutor())
    return store


@pytest.fixture(scope="module")
def module_cells() -> list[CellConfig]:
    """The tiny task's smoke cells, one per spec of ``SPECS`` (about a second each)."""
    from compressors.registry import load_plugin
    from suite.pipeline.config import CompressionPlan

    load_plugin(TINY_TASK)
    return [
        CellConfig(task="tiny", tier="smoke", plan=CompressionPlan.from_dict(s), plugins=(TINY_TASK,)) for s in SPECS
    ]


@pytest.mark.distributed
def test_parallel_run_stores_what_a_serial_run_stores(serial_store, module_cells, kill_dir, tmp_path):
    """-j 2, one cell process SIGKILLed mid-cell: only that cell fails; the rerun finishes it, and
    the ok records equal the serial run's, each cell once."""
    store = ResultsStore(tmp_path / "store.jsonl")
    stream = io.StringIO()
    cells = [PlannedCell(c) for c in module_cells]
    outcomes = run_cells(cells, store, stream=stream, runtime=f"{RUNTIMES}:kill_worker_once", executor=LocalExecutor(2))
    assert (kill_dir / "killed").exists()
    assert sorted(o.status for o in outcomes) == ["failed", "ok", "ok"]
    assert "SIGKILL" in next(o.reason for o in outcomes if o.status == "failed")
    again = run_cells(cells, store, stream=io.StringIO(), executor=LocalExecutor(2))
    assert sorted(o.status for o in again) == ["ok", "skipped", "skipped"]
    ok = ResultsStore(tmp_path / "ok.jsonl")
    for r in store.records():
        if r["status"] == "ok":
            ok.append(r)
    compare_stores(serial_store, ok)
    for r in ok.records():  # what the cell had, and that it used it
        res = r["provenance"]["resources"]
        assert (res["executor"], res["jobs"], res["gpus"]) == ("local", 2, [])
        assert res["torch_threads"] == res["cpu_threads"] >= 1
    assert "running" in stream.getvalue() and "ETA" in stream.getvalue()  # progress: done / running / left
    assert [r["provenance"]["resources"]["executor"] for r in serial_store.records()] == ["serial"] * 3


@pytest.mark.distributed
def test_interrupted_parallel_run_stores_finished_cells_only_and_resumes(module_cells, tmp_path):
    """Ctrl-C after the first cell: the running (slow) cell is killed and not stored; the rerun
    skips the stored cell and runs the others, every cell ok once."""
    cells = [PlannedCell(c) for c in module_cells[:2]] + [
        PlannedCell(CellConfig(**{**_fields(module_cells[0]), "seed": 7}))
    ]
    store = ResultsStore(tmp_path / "store.jsonl")

    def interrupt(outcome) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_cells(
            [cells[2], cells[0], cells[1]],  # the slow cell starts first and is running at Ctrl-C
            store,
            stream=io.StringIO(),
            runtime=f"{RUNTIMES}:slow_seed",
            on_outcome=interrupt,
            executor=LocalExecutor(2),
        )
    first = store.records()
    assert len(first) == 1 and first[0]["status"] == "ok" and first[0]["seed"] == 0
    outcomes = run_cells(cells, store, stream=io.StringIO(), executor=LocalExecutor(2))
    assert sorted(o.reason or o.status for o in outcomes) == sorted([ALREADY_IN_STORE, "ok", "ok"])
    keys = Counter(r["cell_key"] for r in store.records())
    assert set(keys) == {c.config.key() for c in cells} and set(keys.values()) == {1}
    assert read_jsonl(store.path)[1] == []  # what mpcbench validate checks in a store


def _fields(config: CellConfig) -> dict:
    from dataclasses import fields

    return {f.name: getattr(config, f.name) for f in fields(config)}


# --------------------------------------------------------------------------- slots, no processes
def test_each_cell_gets_its_share_of_the_cores_and_its_own_gpus(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # serial cells asked for one thread: so do -j cells
    assert LocalPool(2, cores=8, gpus=[]).threads == 1
    assert LocalPool(2, cores=8, gpus=[], threads=3).threads == 3  # --cpus-per-cell
    monkeypatch.delenv("OMP_NUM_THREADS")
    pool = LocalPool(2, cores=8, gpus=["0", "1", "2", "3"])
    a = pool.acquire(CellNeeds(processes=2, gpus=2))
    b = pool.acquire(CellNeeds(processes=1, gpus=1))
    assert a is not None and b is not None
    assert (a.cpu_threads, b.cpu_threads) == (4, 4)
    assert set(a.gpus) | set(b.gpus) == {"0", "1", "2"} and not set(a.gpus) & set(b.gpus)
    assert pool.acquire(CellNeeds(processes=2, gpus=2)) is None  # one GPU left: waits
    pool.release(a)
    c = pool.acquire(CellNeeds(processes=2, gpus=2))
    assert c is not None and len(c.gpus) == 2 and not set(c.gpus) & set(b.gpus)
    env = b.env()
    assert env["CUDA_VISIBLE_DEVICES"] == ",".join(b.gpus) and env["OMP_NUM_THREADS"] == "4"
    assert not pool.fits(CellNeeds(processes=8, gpus=8))


def test_cpu_cells_need_no_gpu_and_count_their_ranks(tiny_cell):
    assert needs_of(tiny_cell(tier="smoke")) == CellNeeds(1, 0)
    assert needs_of(tiny_cell(tier="smoke", mode="torchrun", stages=2)) == CellNeeds(2, 0)
    assert needs_of(tiny_cell(tier="smoke", mode="torchrun", stages=2, device="cuda")) == CellNeeds(2, 2)


def test_xdist_workers_split_cores_and_gpus(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    assert xdist_slot(None, None) is None and xdist_slot("gw0", "1") is None
    s0, s1 = xdist_slot("gw0", "2"), xdist_slot("gw1", "2")
    assert isinstance(s0, Slot) and isinstance(s1, Slot)
    assert (s0.gpus, s1.gpus) == (("0", "2"), ("1", "3"))
    assert s0.describe()["worker"] == "gw0" and s0.executor == "xdist"


def test_bad_executor_arguments_are_one_line_usage_errors():
    with pytest.raises(ValueError, match="valid: local, ray"):
        make_executor("dask")
    with pytest.raises(ValueError, match="at least 1"):
        make_executor("local", 0)
    assert isinstance(make_executor("local", 1), SerialExecutor)
    one = make_executor("local", 1, cpus_per_cell=1)  # -j 1 --cpus-per-cell 1: pinned, not ignored
    assert isinstance(one, LocalExecutor) and one.pool.threads == 1 and one.slots == 1


def test_run_refuses_bad_executor_options_before_planning(capsys):
    from suite.bench.cli import main

    assert main(["run", "--tier", "smoke", "-j", "0"]) == 2
    assert "at least 1" in capsys.readouterr().err
    assert main(["run", "--tier", "smoke", "--address", "auto"]) == 2
    assert "--executor ray" in capsys.readouterr().err
