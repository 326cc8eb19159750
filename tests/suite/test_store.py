"""The results store: append-only, atomic, pandas-readable, survives SIGKILL mid-append."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import textwrap
import time

import pandas as pd
import pytest

from suite.pipeline.config import CellConfig, CompressionPlan
from suite.bench.record_builder import failed_record
from suite.bench.store import ResultsStore, StoreError, dump_record, read_jsonl


def _record(seed: int = 0, status: str = "failed", spec: str = "none") -> dict:
    cfg = CellConfig(task="cifar10", tier="smoke", seed=seed, plan=CompressionPlan(forward=spec, backward=spec))
    prov = {"git_commit": None, "git_dirty": None, "machine": {}}
    rec = failed_record(cfg, f"RuntimeError: boom {seed}", prov, status=status)
    return rec


def _ok_record(seed: int = 0) -> dict:
    rec = _record(seed)
    rec.update(
        status="ok",
        error=None,
        metric_name="accuracy",
        higher_is_better=True,
        final_metric=0.5 + seed / 100,
        curve=[{"step": 1, "metric": 0.3, "metric_uncompressed": float("nan"), "train_loss": 1.0, "wall_s": 0.1}],
        bytes={"forward": {"raw": 100, "wire": 50, "messages": 2}},
        bytes_per_step={"forward": 50.0},
        time={"step_s": 0.1},
        modeled={"1Gbps": {"step_s": 0.1, "total_s": 1.0, "time_to_target_s": None}},
        run={"steps": 1},
    )
    return rec


def test_append_and_read_back_with_pandas(tmp_path):
    store = ResultsStore(tmp_path / "sub" / "store.jsonl")
    assert store.records() == [] and store.done_keys() == set()
    store.append(_record(0))
    store.append(_ok_record(1))
    recs = store.records()
    assert [r["seed"] for r in recs] == [0, 1]
    assert store.done_keys() == {recs[1]["cell_key"]}  # only ok cells count as done
    frame = pd.read_json(store.path, lines=True)
    assert list(frame["seed"]) == [0, 1]
    assert list(frame["status"]) == ["failed", "ok"]
    # NaN became null: strict JSON on every line
    for line in store.path.read_text().splitlines():
        json.loads(line, parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))


def test_append_rejects_invalid_record_and_keeps_store(tmp_path):
    store = ResultsStore(tmp_path / "store.jsonl")
    store.append(_record(0))
    before = store.path.read_bytes()
    bad = _record(1)
    bad["error"] = "two\nlines"
    with pytest.raises(StoreError, match="one line"):
        store.append(bad)
    bad = _record(1)
    del bad["task"]
    with pytest.raises(StoreError, match="missing field 'task'"):
        store.append(bad)
    assert store.path.read_bytes() == before


def test_foreign_lines_are_kept_and_reported(tmp_path):
    path = tmp_path / "store.jsonl"
    path.write_text(dump_record(_record(0)) + "\n{not json\n" + json.dumps({"schema": "x"}))  # no final newline
    store = ResultsStore(path)
    store.append(_record(1))
    lines = path.read_text().splitlines()
    assert len(lines) == 4 and lines[1] == "{not json"  # verbatim, not dropped
    records, problems = read_jsonl(path)
    assert [r["seed"] for r in records] == [0, 1]
    assert len(problems) == 2
    assert problems[0].startswith("line 2: not valid JSON")
    assert problems[1].startswith("line 3: schema must be")


def test_store_path_must_be_a_file(tmp_path):
    with pytest.raises(StoreError, match="not a file"):
        ResultsStore(tmp_path)


def _appender(path: str, start: int, n: int) -> None:
    store = ResultsStore(path)
    for i in range(start, start + n):
        store.append(_record(i))


def test_concurrent_appenders_lose_nothing(tmp_path):
    path = str(tmp_path / "store.jsonl")
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_appender, args=(path, k * 100, 15)) for k in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    records, problems = read_jsonl(path)
    assert problems == []
    assert sorted(r["seed"] for r in records) == sorted(k * 100 + i for k in range(3) for i in range(15))


def test_sigkill_during_appends_leaves_a_valid_store(tmp_path):
    """Kill a process that appends in a tight loop at a random moment: the store stays valid."""
    path = tmp_path / "store.jsonl"
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(tmp_path)!r})
        from suite.bench.store import ResultsStore
        from test_store_helper import rec
        s = ResultsStore({str(path)!r})
        i = 0
        while True:
            s.append(rec(i)); i += 1
            if i == 5:
                print("ready", flush=True)
        """
    )
    # a valid failed record built without importing torch (fast start-up)
    template = _record(0)
    (tmp_path / "test_store_helper.py").write_text(
        f"TEMPLATE = {json.dumps(template)!r}\n"
        "import json\n"
        "def rec(i):\n"
        "    r = json.loads(TEMPLATE)\n"
        "    r.update(seed=i, error='RuntimeError: x' + 'y' * 1500)\n"
        "    return r\n"
    )
    for delay in (0.05, 0.21):
        proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(delay)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        records, problems = read_jsonl(path)
        assert problems == [], problems
        seeds = [r["seed"] for r in records]
        assert len(seeds) >= 5
        pd.read_json(path, lines=True)  # pandas reads it too
    # a later append still works (the lock was released by the kernel)
    ResultsStore(path).append(_record(999))
    assert read_jsonl(path)[0][-1]["seed"] == 999
