"""Crash and resume: SIGKILL ``mpcbench run`` in the middle of a matrix, then run it again.

The store must stay valid (every line a valid record, nothing torn), the killed runner's
in-flight cell must not keep training (no orphaned process), and the rerun must run only
the cells that had no record yet, skipping the finished ones as "already in store".
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import uuid

import pytest
from reliability_support import MARKER_ENV, TINY, processes_with_env, wait_until

from suite.bench.cli import main
from suite.bench.store import read_jsonl
from suite.results.records import validate_record

pytestmark = pytest.mark.distributed  # several processes (runner + one child per cell)

SEEDS = 4  # cells: fp16 x seeds 0..3 (no baseline); killed with one or more finished, one in flight, some pending


def _args(store) -> list[str]:
    return [
        "run",
        "--task",
        "tiny",
        "--plugin",
        TINY,
        "--compressor",
        "fp16",
        "--no-baseline",
        "--seeds",
        str(SEEDS),
        "--steps",
        "2",
        "--results",
        str(store),
        "--no-progress",
    ]


def test_sigkill_mid_matrix_then_resume_runs_only_missing_cells(tmp_path, capsys, tally):
    store = tmp_path / "results" / "store.jsonl"
    logs = tmp_path / "results" / "store.logs"
    marker = uuid.uuid4().hex
    env = {**os.environ, MARKER_ENV: marker}
    with tally.fault("crash and resume", "SIGKILL of `mpcbench run` mid-matrix"):
        runner = subprocess.Popen(
            [sys.executable, "-m", "suite", *_args(store)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        try:
            # kill once one cell is stored and the next one's child has started (its log exists)
            def mid_matrix() -> bool:
                return len(read_jsonl(store)[0]) >= 1 and logs.is_dir() and len(list(logs.glob("*.log"))) >= 2

            assert wait_until(mid_matrix, timeout=180, every=0.02), runner.communicate(timeout=60)[0].decode()
            runner.send_signal(signal.SIGKILL)
            runner.wait(timeout=30)
        finally:
            if runner.poll() is None:
                runner.kill()
        assert runner.returncode == -signal.SIGKILL
        # the in-flight cell notices its runner is gone and kills its own process group
        assert wait_until(lambda: not processes_with_env(MARKER_ENV, marker), timeout=15), "orphaned cell process"

        # the store is valid: every line parses and validates; nothing half-written
        text = store.read_text()
        assert text.endswith("\n")
        for line in text.splitlines():
            validate_record(json.loads(line))
        before, problems = read_jsonl(store)
        assert problems == [] and 1 <= len(before) < SEEDS and all(r["status"] == "ok" for r in before)

        # rerun the same command (in this process: same code as the CLI, no second interpreter start)
        rc = main(_args(store))
        err = capsys.readouterr().err
        assert rc == 0, err
        m = re.search(r"(\d+) cells \((\d+) to run, (\d+) already in store", err)
        assert m, err
        total, to_run, skipped = map(int, m.groups())
        assert (total, to_run, skipped) == (SEEDS, SEEDS - len(before), len(before))  # only the missing cells run
        assert len(re.findall(r"\] skipped .*already in store", err)) == len(before), err
        assert len(re.findall(r"\] ok ", err)) == SEEDS - len(before), err
        after, problems = read_jsonl(store)
        assert problems == []
        assert after[: len(before)] == before  # finished records are kept verbatim, not rerun
        keys = [r["cell_key"] for r in after]
        assert tally.cells("crash and resume", SEEDS, len(set(keys))) == 0
        assert len(keys) == len(set(keys)) == SEEDS  # every cell exactly once: none lost, none run twice
        assert sorted(r["seed"] for r in after) == list(range(SEEDS)) and all(r["status"] == "ok" for r in after)
        # nothing the killed run started outlives it (its fork server, if any, exits with it)
        assert wait_until(lambda: not processes_with_env(MARKER_ENV, marker), timeout=15), "orphaned process"
