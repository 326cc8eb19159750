"""suite.bench.forkserver.prestart: the fork server starts before the runner imports torch, and the
first cell forks from that same server (issue 13, start-up)."""

from __future__ import annotations

import sys

import pytest

from suite.bench import forkserver


def test_prestart_does_nothing_where_cells_are_spawned(monkeypatch):
    monkeypatch.setenv("MPCBENCH_ISOLATION", "spawn")
    before = forkserver._SERVER
    assert forkserver.prestart(("cifar10",)) is None
    assert forkserver._SERVER is before  # no server was started or replaced


@pytest.mark.skipif(sys.platform != "linux", reason="the fork server is Linux-only")
def test_the_first_cell_reuses_the_prestarted_server(monkeypatch):
    monkeypatch.delenv("MPCBENCH_ISOLATION", raising=False)
    forkserver.shutdown()
    try:
        thread = forkserver.prestart(("cifar10", "no_such_task", "../evil"))
        assert thread is not None
        thread.join(timeout=300)
        server = forkserver._SERVER
        assert server is not None and server.alive
        assert "tasks.cifar10" in server._proc.args and not any(
            "evil" in a or "no_such" in a for a in server._proc.args
        )
        # the environment a cell is launched with is the one the server was started with: no restart
        assert forkserver.get_server(forkserver.cell_environment()) is server
    finally:
        forkserver.shutdown()
