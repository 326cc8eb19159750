"""Issue 23: nothing a plugin starts outlives its cell (``mpcbench run``), even a double-forked daemon
in its own session, which the cell's process-group kill does not reach."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

TINY = str(Path(__file__).resolve().parents[2] / "fixtures" / "tiny_task.py")

DAEMON_PLUGIN = '''
import os, time
import torch
from compressors import Compressor, register

PIDFILE = {pidfile!r}


@register("daemon_starter")
class DaemonStarter(Compressor):
    """Honest identity compressor that leaves a daemon behind on its first call."""

    started = False

    def compress(self, x, info):
        if not DaemonStarter.started:
            DaemonStarter.started = True
            if os.fork() == 0:
                os.setsid()
                if os.fork() == 0:
                    with open(PIDFILE, "w") as f:
                        f.write(str(os.getpid()))
                    time.sleep(300)
                    os._exit(0)
                os._exit(0)
        return (x.detach().contiguous(),)

    def decompress(self, payload, info):
        return payload[0]
'''


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc")
def test_a_daemon_a_plugin_starts_dies_with_its_cell(tmp_path):
    from suite.bench.cell import run_cell
    from suite.pipeline.config import CellConfig, CompressionPlan

    pidfile = tmp_path / "daemon.pid"
    plugin = tmp_path / "daemon_plugin.py"
    plugin.write_text(DAEMON_PLUGIN.format(pidfile=str(pidfile)))
    cfg = CellConfig(
        task="tiny",
        tier="smoke",
        plan=CompressionPlan("daemon_starter", "none"),
        stages=2,
        steps=2,
        plugins=(TINY, str(plugin)),
        time_limit_s=300,
    )
    rec = run_cell(cfg, log_dir=tmp_path / "logs")
    assert rec["status"] == "ok", rec["error"]
    for _ in range(50):
        if pidfile.exists() and pidfile.read_text():
            break
        time.sleep(0.1)
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    alive = _alive(pid)
    if alive:
        os.kill(pid, 9)
    assert not alive, "the plugin's daemon outlived its cell"
