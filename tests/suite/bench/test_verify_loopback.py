"""The loopback audit (issue 35): each re-run has its own network namespace with only ``lo``, and what
``lo`` carried during the re-run is held against the wire bytes the run counted. A plugin whose stages
pass the activation over a side socket (a 1-byte payload plus a side channel) fails verification."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from suite.bench.verify import code, loopback, report, rerun, sandbox

REPO = Path(__file__).resolve().parents[3]
TINY = REPO / "tests" / "fixtures" / "tiny_task.py"


def _box() -> sandbox.Containment:
    from tasks.api import default_data_dir

    needed = (Path(sys.executable), REPO, default_data_dir(), Path(tempfile.gettempdir()))
    return sandbox.containment(Path.home(), needed=needed)


def _needs_namespaces(box: sandbox.Containment) -> None:
    if not box.prefix:
        pytest.skip("no network namespace here (the report names the layer missing): " + "; ".join(box.missing))


def _record(wire: int, messages: int, **bytes_extra: dict) -> dict:
    half = {"raw": 4 * wire, "wire": wire // 2, "messages": messages // 2}
    return {
        "bytes": {
            "forward": dict(half),
            "backward": dict(half),
            "dp": {"raw": 0, "wire": 0, "messages": 0},
            **bytes_extra,
        },
        "eval_bytes": {"raw": 0, "wire": 0, "messages": 0},
        "config": {"stages": 2},
    }


def test_the_audit_holds_loopback_to_the_counted_wire_plus_glooss_overhead():
    rec = _record(1_000_000, 1000)
    ok = sandbox.Loopback(0, 0, int(1_000_000 * 1.5), 5000)  # honest: within the measured overhead
    assert loopback.audit(rec, ok)[0] == ""
    side = sandbox.Loopback(0, 0, 8_000_000, 9000)  # an activation past the count
    why, seen = loopback.audit(rec, side)
    assert why.startswith("side channel: lo carried 8000000 bytes, the wire counted 1000000") and "\n" not in why
    assert seen["audited"] and seen["allowed"] == loopback.allowance(rec) < 8_000_000
    assert loopback.audit(rec, None) == ("", {"audited": False, "why": loopback.audit(rec, None)[1]["why"]})
    collective = _record(1000, 10, dp={"raw": 100, "wire": 100, "messages": 1})
    assert loopback.audit(collective, side)[1]["audited"] is True  # collectives are audited too (issue 45)


PROBE = r"""
import socket, threading
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1)
def serve():
    c, _ = srv.accept()
    while c.recv(65536):
        pass
t = threading.Thread(target=serve); t.start()
s = socket.create_connection(srv.getsockname()); s.sendall(b"x" * 1_000_000); s.close(); t.join()
print("sent")
"""


def test_a_contained_run_says_what_its_own_loopback_carried():
    box = _box()
    _needs_namespaces(box)
    with tempfile.TemporaryDirectory() as tmp:
        env = rerun.rerun_environment(Path(tmp), "0" * 40, 1, Path(tmp))
        quiet = sandbox.contained_run(
            [sys.executable, "-c", "print(1)"], cwd=Path(tmp), env=env, box=box, timeout_s=60, cpu_s=60
        )
        busy = sandbox.contained_run(
            [sys.executable, "-c", PROBE], cwd=Path(tmp), env=env, box=box, timeout_s=60, cpu_s=60
        )
    assert quiet.loopback is not None and quiet.loopback.tx_bytes < 10_000  # nothing of the host's traffic
    assert busy.returncode == 0 and busy.stdout.strip() == "sent", busy.stderr
    assert busy.loopback is not None and 1_000_000 <= busy.loopback.tx_bytes < 1_200_000


UNIX_SERVER = r"""
import os, socket
path = os.path.join(os.environ["TMPDIR"], "sock")
try:
    s = socket.socket(socket.AF_UNIX)
    s.bind(path)
    print("bound", flush=True)
except OSError as e:
    print(type(e).__name__, flush=True)
"""
UNIX_CLIENT = r"""
import socket, sys
out = {}
for name, addr in (("file", sys.argv[1]), ("abstract", "\0mpcbench-probe")):
    try:
        socket.socket(socket.AF_UNIX).connect(addr)
        out[name] = "connected"
    except OSError as e:
        out[name] = type(e).__name__
print(out)
"""


@pytest.mark.skipif(
    sandbox._landlock_abi() < 6 or os.uname().machine != "x86_64",
    reason="needs Landlock ABI 6 (abstract sockets) and x86-64 (the seccomp filter); the report names the gap",
)
def test_stages_cannot_meet_on_a_unix_socket(tmp_path):
    """Unix sockets bypass loopback, so its audit would not see them: Landlock scopes abstract ones, and
    connect() to a socket file in another stage's folder is not a read Landlock refuses, so stages may
    not make AF_UNIX sockets at all (seccomp; socketpair stays)."""
    work = tmp_path / "work"
    (work / "run").mkdir(parents=True)
    (work / "run" / "config.json").write_text("{}")
    jail = {"read": rerun._jail_reads(REPO), "work": str(work)}
    env = {**rerun.rerun_environment(REPO, "0" * 40, 1, work, jail), "LOCAL_RANK": "0"}
    server = subprocess.run(
        [sys.executable, "-c", UNIX_SERVER], env={**env, "RANK": "0"}, capture_output=True, text=True, cwd=REPO
    )
    assert server.stdout.strip() == "PermissionError", server.stderr
    own = next(work.glob("stage-0-*"))
    import socket

    outside = socket.socket(socket.AF_UNIX)  # a socket file a stage could otherwise reach: made from outside
    outside.bind(str(own / "sock"))
    outside.listen(1)
    with socket.socket(socket.AF_UNIX) as abstract:
        abstract.bind("\0mpcbench-probe")
        abstract.listen(1)
        client = subprocess.run(
            [sys.executable, "-c", UNIX_CLIENT, str(own / "sock")], env={**env, "RANK": "1"},
            capture_output=True, text=True, cwd=REPO,
        )  # fmt: skip
    outside.close()
    assert client.stdout.strip() == str({"file": "PermissionError", "abstract": "PermissionError"}), client.stderr


# A compressor whose sender keeps each activation (tiled to the size of a real model's, 256 KiB: the tiny
# task's 512-byte activations are below the per-message allowance) and serves it on a side socket; the
# receiver fetches it there. The payload is one byte.
SIDE_SOCKET = r"""

import socket as _socket
import struct as _struct
import threading as _threading
import time as _time

from compressors import Compressor, register

_PORT, _BOX, _COND, _STARTED = 47321, {}, _threading.Condition(), []


def _serve():
    srv = _socket.socket()
    srv.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", _PORT))
    srv.listen(64)
    while True:
        c, _ = srv.accept()
        f = c.makefile("rb")
        key = f.readline().decode().strip()
        with _COND:
            _COND.wait_for(lambda: key in _BOX, timeout=60)
            data = _BOX.pop(key, b"")
        c.sendall(_struct.pack(">Q", len(data)) + data)
        c.close()


@register("side_socket")
class SideSocket(Compressor):
    def compress(self, x, info):
        if not _STARTED:
            _STARTED.append(_threading.Thread(target=_serve, daemon=True))
            _STARTED[0].start()
        raw = x.detach().contiguous().numpy().tobytes()
        key = f"{info.role.value}:{info.boundary}:{info.step}:{info.microbatch}"
        with _COND:
            _BOX[key] = raw * max(1, 262144 // len(raw))
            _COND.notify_all()
        return (torch.zeros(1, dtype=torch.uint8),)

    def decompress(self, payload, info):
        key = f"{info.role.value}:{info.boundary}:{info.step}:{info.microbatch}"
        for _ in range(600):
            try:
                c = _socket.create_connection(("127.0.0.1", _PORT), timeout=60)
                break
            except OSError:
                _time.sleep(0.05)
        c.sendall(key.encode() + b"\n")
        f = c.makefile("rb")
        (n,) = _struct.unpack(">Q", f.read(8))
        data = f.read(n)
        c.close()
        size = torch.Size(info.shape).numel() * torch.empty(0, dtype=info.dtype).element_size()
        return torch.frombuffer(bytearray(data[:size]), dtype=info.dtype).reshape(info.shape).clone()
"""


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(), reason="needs a git checkout")
def test_stages_that_pass_the_activation_over_a_side_socket_fail_verification(tmp_path):
    """Before: loopback was shared between a re-run's stages and uncounted: a 1-byte payload plus a side
    socket trained like the uncompressed model and verified. Now the namespace's lo carried far more than
    the counted wire, and the re-run fails with one line naming both."""
    from leaderboard.submissions import plugin_file_hash
    from suite.bench.cell import run_cell
    from suite.bench.provenance import machine_info
    from suite.pipeline.config import CellConfig, CompressionPlan

    box = _box()
    _needs_namespaces(box)
    entry = tmp_path / "records" / "e"
    entry.mkdir(parents=True)
    (entry / "tiny_task.py").write_text(TINY.read_text() + SIDE_SOCKET)
    (entry / "entry.yaml").write_text(
        "name: e\nsubmitter: s\ndate: '2026-01-01'\nplugin: tiny_task.py\n"
        f"plugin_hash: {plugin_file_hash(entry / 'tiny_task.py')}\n"
    )
    cfg = CellConfig(
        task="tiny", tier="smoke", plan=CompressionPlan("side_socket", "none"), stages=2, steps=3, mode="torchrun",
        plugins=(str(entry / "tiny_task.py"),), time_limit_s=300,
    )  # fmt: skip
    rec = run_cell(cfg, log_dir=tmp_path / "logs")
    assert rec["status"] == "ok", rec["error"]
    fwd = rec["bytes"]["forward"]
    assert fwd["wire"] <= 32 * fwd["messages"] < fwd["raw"]  # a byte of payload and the frame's header a message
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    rec["provenance"]["git_commit"], rec["provenance"]["machine"] = head.strip(), machine_info()
    trees = code.CodeTrees(REPO, "HEAD")
    try:
        check, new = report.check_cell(rec, entry, trees, 300, 1, box, attempts=1)
    finally:
        trees.close()
    assert check.status == "mismatch" and new is None, check
    assert check.detail.startswith("side channel: lo carried ") and ", the wire counted " in check.detail
