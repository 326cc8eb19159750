"""One cell in an isolated child process: every kind of failure fails only that cell, in one line.

The faults are injected through the runtime entry point (``run_cell(runtime=...)``, a test
seam) so each failure mode is exercised exactly; a compressor plugin failing under the real
runtime is covered in test_cli.py and test_pytest_plugin.py. Faults that need a real process
(crash, exit, hang) run in child processes, concurrently (a child spends most of its
start-up importing torch); the rest go through ``execute`` / ``interpret`` in-process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from suite.bench.cell import execute, interpret, run_cell
from suite.bench.store import ResultsStore, read_jsonl
from suite.pipeline.config import CellConfig, CompressionPlan
from suite.results.records import validate_record

TINY = str(Path(__file__).resolve().parents[2] / "fixtures" / "tiny_task.py")

FAKE_RUNTIME = textwrap.dedent(
    '''
    """Fake runtimes for test_cell.py: each misbehaves in one way."""
    import ctypes, os, subprocess, sys, time
    PIDFILE = "@PIDFILE@"
    from suite.pipeline.result import ByteCounts, EvalPoint, RunResult, TimeSplit

    def _result(metric=0.5):
        return RunResult(
            final_metric=metric, final_metric_uncompressed=0.5, metric_name="accuracy",
            higher_is_better=True, target=0.4, reached_target_step=2,
            curve=[EvalPoint(2, metric, 0.5, 1.0, 0.1)],
            bytes={"forward": ByteCounts(400, 100, 4), "backward": ByteCounts(400, 200, 4), "dp": ByteCounts()},
            bytes_per_boundary={"b0.forward": ByteCounts(400, 100, 4), "b0.backward": ByteCounts(400, 200, 4)},
            bytes_per_step={"forward": 50.0, "backward": 100.0, "dp": 0.0},
            time=TimeSplit(0.01, 0.005, 0.001, 0.001, 0.05, 0.01),
            modeled={"1Gbps": {"step_s": 0.01, "total_s": 0.05, "time_to_target_s": 0.02, "comm_s_per_step": 0.0}},
            steps=2, n_stages=2, dp=1, microbatches=2, schedule="1f1b", mode="single", device="cpu")

    def ok(config):
        print("training output goes to the log")
        return _result()

    def nan_metric(config):
        return _result(float("nan"))

    def garbage(config):
        return {"final_metric": 1.0}

    def negative_bytes(config):
        r = _result()
        r.bytes["forward"].wire = -5
        return r

    def raises(config):
        raise ValueError("bad value\\nsecond line of the message")

    def hard_exit(config):
        os._exit(3)

    def segfault(config):
        ctypes.string_at(0)

    def system_exit(config):
        sys.exit(4)

    def hang(config):
        p = subprocess.Popen(["sleep", "600"])  # a grandchild that must not outlive the cell
        path = PIDFILE
        with open(path + ".tmp", "w") as f:
            f.write(str(p.pid))
        os.replace(path + ".tmp", path)  # readers never see a half-written file
        time.sleep(600)
    '''
)

# faults that need a real child process: name -> (status, substrings of the one-line error)
CHILD_CASES = {
    "raises": ("failed", ["ValueError: bad value second line of the message"]),
    "hard_exit": ("failed", ["exited with code 3 without a result"]),
    "segfault": ("failed", ["crashed with SIGSEGV"]),
    "hang": ("timeout", ["time limit of 8 s"]),
}
HANG_LIMIT_S = 8.0  # counted from the fork: the child only loads the tiny plugin before hanging


def _config(seed: int = 0) -> CellConfig:
    return CellConfig(task="tiny", seed=seed, plan=CompressionPlan("fp16", "fp16"), plugins=(TINY,))


def _fake_runtime(directory: Path, pidfile: Path) -> str:
    path = directory / f"fake_runtime_{pidfile.stem}.py"
    path.write_text(FAKE_RUNTIME.replace("@PIDFILE@", str(pidfile)))
    return str(path)


@pytest.fixture(scope="module")
def fake_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("fake")


@pytest.fixture(scope="module")
def outcomes(fake_dir):
    """Run the child fault cases and the runner-death scenario concurrently. The fake runtimes
    are loaded from a file path, so the runner's environment (and fork server) is unchanged."""
    pidfile = fake_dir / "grandchild.pid"
    runtime = _fake_runtime(fake_dir, pidfile)
    store = ResultsStore(fake_dir / "store.jsonl")

    def one(item):
        i, name = item
        if name == "runner_killed":
            return name, _kill_runner_mid_cell(fake_dir)
        limit = HANG_LIMIT_S if name == "hang" else 300.0
        t0 = time.perf_counter()
        rec = run_cell(_config(i), log_dir=store.log_dir, time_limit_s=limit, runtime=f"{runtime}:{name}")
        store.append(rec)
        return name, (rec, time.perf_counter() - t0)

    jobs = [*CHILD_CASES, "runner_killed"]
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        results = dict(pool.map(one, enumerate(jobs)))
    orphan = results.pop("runner_killed")
    return results, store, pidfile, orphan


def _kill_runner_mid_cell(fake_dir: Path) -> dict:
    pidfile = fake_dir / "orphan.pid"
    runtime = _fake_runtime(fake_dir, pidfile)
    script = textwrap.dedent(
        f"""
        from suite.bench.cell import run_cell
        from suite.pipeline.config import CellConfig
        run_cell(CellConfig(task="tiny", plugins=({TINY!r},)), log_dir={str(fake_dir / "orphan")!r},
                 time_limit_s=600, runtime={runtime + ":hang"!r})
        """
    )
    runner = subprocess.Popen([sys.executable, "-c", script])
    deadline = time.time() + 120
    while not pidfile.exists() and time.time() < deadline:
        time.sleep(0.1)
    started = pidfile.exists()
    os.kill(runner.pid, signal.SIGKILL)
    runner.wait()
    return {"started": started, "gone": started and _gone(int(pidfile.read_text()), 10.0)}


@pytest.mark.parametrize("name", list(CHILD_CASES))
def test_child_fault_fails_only_its_cell_with_one_line(outcomes, name):
    results, _, _, _ = outcomes
    rec, _ = results[name]
    status, parts = CHILD_CASES[name]
    assert rec["status"] == status, rec["error"]
    validate_record(rec)
    err = rec["error"]
    assert "\n" not in err and "Traceback" not in err
    for p in parts:
        assert p in err, err
    assert rec["final_metric"] is None and rec["bytes"] is None  # null metrics


def test_traceback_and_output_go_to_the_log(outcomes):
    results, store, _, _ = outcomes
    log = Path(results["raises"][0]["log"])
    assert log.parent == store.log_dir
    text = log.read_text()
    assert "Traceback (most recent call last)" in text and "ValueError: bad value" in text
    assert "Fatal Python error" in Path(results["segfault"][0]["log"]).read_text()  # faulthandler's stack


def test_store_stays_valid_with_every_fault(outcomes):
    _, store, _, _ = outcomes
    records, problems = read_jsonl(store.path)
    assert problems == []
    assert sorted(r["status"] for r in records) == sorted(s for s, _ in CHILD_CASES.values())


def test_timeout_kills_the_whole_process_group(outcomes):
    results, _, pidfile, _ = outcomes
    _, took = results["hang"]
    assert took < HANG_LIMIT_S + 120.0  # limit + kill grace (+ a fork-server start), not the 600 s it wanted
    pid = int(pidfile.read_text())
    assert _gone(pid, 5.0), "the cell's grandchild survived the timeout"


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def _gone(pid: int, within_s: float) -> bool:
    deadline = time.time() + within_s
    while time.time() < deadline and _alive(pid):
        time.sleep(0.1)
    return not _alive(pid)


# in-process: what the child writes, and how the parent reads it -------------------------------
@pytest.mark.parametrize(
    "name, status, parts",
    [
        ("ok", "ok", []),
        ("garbage", "failed", ["TypeError: ", ":garbage returned dict, not a RunResult"]),
        ("system_exit", "failed", ["SystemExit: 4"]),
        ("nan_metric", "failed", ["invalid result: final_metric is not finite (nan)"]),
        ("negative_bytes", "failed", ["invalid result: bytes forward.wire must be a non-negative integer, got -5"]),
    ],
)
def test_execute_and_interpret(tmp_path, capsys, name, status, parts):
    runtime = _fake_runtime(tmp_path, tmp_path / "unused.pid")
    cfg_file, out_file = tmp_path / "config.json", tmp_path / "out.json"
    cfg_file.write_text(json.dumps(_config().to_dict()))
    rc = execute(cfg_file, out_file, runtime=f"{runtime}:{name}")
    payload = json.loads(out_file.read_text())
    assert payload["provenance"]["machine"]["python"]
    rec = interpret(_config().validate(), payload, rc, wall_s=1.0, log=tmp_path / "cell.log")
    validate_record(rec)
    assert rec["status"] == status, rec["error"]
    if status == "ok":
        assert rc == 0 and rec["error"] is None and rec["final_metric"] == 0.5
        assert rec["compression_ratio"] == {"forward": 4.0, "backward": 2.0, "dp": None, "total": 800 / 300}
        assert rec["bytes"]["forward"] == {"raw": 400, "wire": 100, "messages": 4}
        assert rec["provenance"]["plugin_hashes"]["fp16"]
        return
    assert "\n" not in rec["error"]
    for p in parts:
        assert p in rec["error"], rec["error"]
    assert "=== failed:" in (tmp_path / "cell.log").read_text()


def test_interpret_without_output_and_timeouts():
    cfg = _config()
    assert "exited with code 3" in interpret(cfg, None, 3)["error"]
    assert "crashed with SIGKILL" in interpret(cfg, None, -9)["error"]
    rec = interpret(cfg, None, -15, timed_out=True, limit=7)
    assert rec["status"] == "timeout" and "time limit of 7 s" in rec["error"]
    assert "unknown error" in interpret(cfg, {"ok": False}, 1)["error"]
    assert interpret(cfg, {"ok": True, "result": {"bogus": 1}}, 0)["error"].startswith("invalid result: ")


def test_broken_plugin_cell_is_recorded_without_running(tmp_path):
    from suite.bench.matrix import PlannedCell

    rec = run_cell(PlannedCell(_config(), error="plugin 'x.py' failed to import: ImportError: nope"), log_dir=tmp_path)
    assert rec["status"] == "failed" and rec["error"].startswith("plugin 'x.py' failed to import")
    assert "not run" in Path(rec["log"]).read_text()


def test_child_dies_with_the_runner(outcomes):
    """SIGKILL the runner mid-cell: the child notices and kills its own process group."""
    _, _, _, orphan = outcomes
    assert orphan["started"], "the cell never started"
    assert orphan["gone"], "training kept running after the runner was killed"


def test_spawn_isolation_without_the_fork_server(tmp_path, monkeypatch):
    """MPCBENCH_ISOLATION=spawn: a fresh interpreter per cell, same record."""
    monkeypatch.setenv("MPCBENCH_ISOLATION", "spawn")
    runtime = _fake_runtime(tmp_path, tmp_path / "unused.pid")
    rec = run_cell(_config(), log_dir=tmp_path, time_limit_s=300, runtime=f"{runtime}:raises")
    assert rec["status"] == "failed" and rec["error"] == "ValueError: bad value second line of the message"
    log = Path(rec["log"]).read_text()
    assert "Traceback" in log and "fork server" not in log


def test_fork_server_refuses_to_fork_after_cuda_initialized(monkeypatch):
    """A forked child of a CUDA-initialized process cannot use the GPU: the server says so
    (the runner then spawns the cell) instead of handing out a broken child."""
    import torch

    from suite.bench.forkserver import fork_unsafe_reason

    assert fork_unsafe_reason() is None  # the test process never touched CUDA
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    assert "CUDA was initialized" in fork_unsafe_reason()
