"""The launcher's one-line failure message: the root cause's rank and error, not its peers' fallout."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from suite.pipeline.config import CellConfig
from suite.pipeline.launch import _absolute_plugins, _Agent, _failure_line


@pytest.mark.parametrize(
    "errors,log,expected",
    [
        # a rank's own error beats its peers' connection errors, whatever their order
        (
            {
                "rank0": "rank 0 (stage 0, replica 0): TransportError: rank 0: receiving from rank 1 failed (peer died or stalled?): x",
                "rank1": "rank 1 (stage 1, replica 0): CompressorError: bad code",
            },
            "",
            "rank 1 (stage 1, replica 0): CompressorError: bad code",
        ),
        # a silent death is named from torchrun's summary, followed by the peer's view
        (
            {
                "rank0": "rank 0 (stage 0, replica 0): TransportError: receiving from rank 1 failed (peer died or stalled?): closed"
            },
            "Root Cause (first observed failure):\n[0]:\n  rank      : 1 (local_rank: 1)\n  exitcode  : -9 (pid: 7)\n",
            "rank 1 died (signal 9) without a Python error (SIGKILL); then rank 0",
        ),
        ({}, "Traceback...\nImportError: no module named foo\n", "ImportError: no module named foo"),
        # under load torchrun's SIGTERM reaches a survivor before its receive fails, and torchrun may
        # list that survivor first: the rank that exited is still the one named
        (
            {},
            "Root Cause (first observed failure):\n[0]:\n  rank      : 0 (local_rank: 0)\n  exitcode  : -15 (pid: 7)\n"
            "Other Failures:\n[1]:\n  rank      : 1 (local_rank: 1)\n  exitcode  : 3 (pid: 8)\n",
            "rank 1 died (exit code 3) without a Python error",
        ),
    ],
)
def test_the_failure_line_names_the_root_cause(tmp_path, errors, log, expected):
    (tmp_path / "errors").mkdir()
    for i, (name, line) in enumerate(errors.items()):
        f = tmp_path / "errors" / f"{name}.txt"
        f.write_text(line + "\n")
        os.utime(f, (1000 + i, 1000 + i))
    (tmp_path / "torchrun.log").write_text(log)
    agent = _Agent("torchrun", [], {}, tmp_path, proc=SimpleNamespace(returncode=1))
    msg = _failure_line([agent], agent, [])
    assert msg.startswith(f"torchrun run failed: {expected}") and "\n" not in msg


def test_a_host_killed_from_outside_is_named_over_its_peers_errors(tmp_path):
    agents = []
    for i, rc in enumerate((1, -9)):
        (tmp_path / f"node{i}" / "errors").mkdir(parents=True)
        agents.append(
            _Agent(f"node {i} (namespace ns{i})", [], {}, tmp_path / f"node{i}", proc=SimpleNamespace(returncode=rc))
        )
    (tmp_path / "node0" / "errors" / "rank0.txt").write_text(
        "rank 0 (stage 0, replica 0, node 0): TransportError: peer died or stalled\n"
    )
    msg = _failure_line(agents, agents[1], [agents[1]])
    assert (
        msg.startswith("torchrun run failed: node 1 (namespace ns1): its torchrun died (signal 9)") and "\n" not in msg
    )


def test_plugin_paths_are_made_absolute_for_the_workers(tmp_path, monkeypatch):
    (tmp_path / "plug.py").write_text("")
    monkeypatch.chdir(tmp_path)
    cfg = _absolute_plugins(CellConfig(task="tiny", plugins=("plug.py", "some.module")))
    assert cfg.plugins == (str(tmp_path / "plug.py"), "some.module")


# issue 12, A16: torchrun's summary of a 4-stage cell whose rank 1 was SIGKILLed lists the survivors it
# SIGTERMed itself, rank 0 first; the message named "rank 0 died (signal 15)"
FOUR_STAGE_KILL = "".join(
    f"[{i}]:\n  rank      : {r} (local_rank: {r})\n  exitcode  : {c} (pid: {100 + r})\n"
    for i, (r, c) in enumerate([(0, -15), (1, -9), (2, -15), (3, -15)])
)


def test_a16_the_sigkilled_rank_is_named_not_a_rank_torchrun_terminated(tmp_path):
    (tmp_path / "errors").mkdir()
    (tmp_path / "torchrun.log").write_text("Root Cause (first observed failure):\n" + FOUR_STAGE_KILL)
    agent = _Agent("torchrun", [], {}, tmp_path, proc=SimpleNamespace(returncode=1))
    msg = _failure_line([agent], agent, [])
    assert msg.startswith("torchrun run failed: rank 1 died (signal 9) without a Python error (SIGKILL)"), msg


def test_a16_a_stopped_rank_is_named_as_stalled_not_as_killed(tmp_path):
    """SIGSTOP: the peers time out, then torchrun SIGKILLs the stopped rank (exit -9), which read as a crash."""
    (tmp_path / "errors").mkdir()
    (tmp_path / "errors" / "rank0.txt").write_text(
        "rank 0 (stage 0, replica 0): TransportError: rank 0: receiving from rank 1 failed (peer died or stalled?): timed out\n"
    )
    (tmp_path / "torchrun.log").write_text("[0]:\n  rank      : 1 (local_rank: 1)\n  exitcode  : -9 (pid: 7)\n")
    agent = _Agent("torchrun", [], {}, tmp_path, proc=SimpleNamespace(returncode=1), stopped={"1": 12.0})
    msg = _failure_line([agent], agent, [])
    assert msg.startswith("torchrun run failed: rank 1 was stopped (SIGSTOP or a debugger) and stalled the run"), msg
    assert "died (signal 9)" not in msg and "\n" not in msg
