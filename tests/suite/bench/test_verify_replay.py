"""Replay from the wire (issue 45): every process of a torchrun re-run, alone, from the bytes it was counted
receiving, must send exactly what it sent and evaluate exactly what it evaluated. Before, each side channel
was closed one by one (UDP, unix sockets, /dev/shm, TMPDIR); two still carried an activation past the count:

- byte-range locks on a file every stage may read (the plugin's own copy): no network, no shared writable
  path, the loopback audit passes;
- UDP on loopback when the byte set has a collective kind: ``--dp fp16 --dp-size 1`` makes one with one
  replica, and the audit was skipped for the whole re-run.

Both now read "not reproducible from its bytes"; an honest plugin, a stateful one (error feedback) too,
replays and verifies."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from suite.bench.verify import code, replay, report, sandbox

REPO = Path(__file__).resolve().parents[3]
TINY = REPO / "tests" / "fixtures" / "tiny_task.py"


def _contained(test):
    """A torchrun cell, its contained re-run and the replay of each process: several processes, ~1 min."""
    git = pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(), reason="needs git")
    return pytest.mark.distributed(pytest.mark.slow(git(test)))


LOCKS = r"""

import fcntl as _fcntl
import hashlib as _hashlib
import os as _os
import struct as _struct

from compressors import Compressor, register

_FD = []


def _fd():
    if not _FD:
        _FD.append(_os.open(__file__, _os.O_RDONLY))  # a file every stage may read: its own plugin copy
    return _FD[0]


def _base(info):
    key = f"{info.role.value}:{info.boundary}:{info.step}:{info.microbatch}"
    return (int(_hashlib.sha256(key.encode()).hexdigest()[:10], 16) % (1 << 30)) << 16


@register("lock_channel")
class LockChannel(Compressor):
    # the activation's bits as shared byte-range locks; a 1-byte payload on the wire

    def compress(self, x, info):
        raw = x.detach().contiguous().numpy().tobytes()
        base = _base(info)
        for i, byte in enumerate(raw):
            for j in range(8):
                if byte >> j & 1:
                    _fcntl.lockf(_fd(), _fcntl.LOCK_SH | _fcntl.LOCK_NB, 1, base + 8 * i + j)
        return (torch.zeros(1, dtype=torch.uint8),)

    def decompress(self, payload, info):
        size = torch.Size(info.shape).numel() * torch.empty(0, dtype=info.dtype).element_size()
        base = _base(info)
        out = bytearray(size)
        for i in range(size):
            for j in range(8):
                probe = _struct.pack("hhqqi4x", _fcntl.F_WRLCK, 0, base + 8 * i + j, 1, 0)
                got = _fcntl.fcntl(_fd(), _fcntl.F_GETLK, probe)
                if _struct.unpack("hhqqi4x", got)[0] != _fcntl.F_UNLCK:  # another process holds it
                    out[i] |= 1 << j
        return torch.frombuffer(out, dtype=info.dtype).reshape(info.shape).clone()
"""

UDP = r"""

import os as _os
import socket as _socket
import threading as _threading
import time as _time

from compressors import Compressor, register

# each process listens on a port of its own from import on; a sender sends each activation once, so lo
# carries about the activation's size: below the loopback audit's slack on this tiny cell
_PORT, _IN, _LOCK = 47411, {}, _threading.Lock()
_RANK = int(_os.environ.get("RANK", "-1"))


def _listen(sock):
    while True:
        data, _ = sock.recvfrom(65536)
        key, _, raw = data.partition(b"|")
        with _LOCK:
            _IN[key.decode()] = raw


if _RANK >= 0:
    _S = _socket.socket(_socket.AF_INET, _socket.SOCK_DGRAM)
    _S.bind(("127.0.0.1", _PORT + _RANK))
    _threading.Thread(target=_listen, args=(_S,), daemon=True).start()


@register("udp_channel")
class UdpChannel(Compressor):
    def compress(self, x, info):
        key = f"{info.boundary}:{info.step}:{info.microbatch}:{info.training}"
        out = _socket.socket(_socket.AF_INET, _socket.SOCK_DGRAM)
        out.sendto(key.encode() + b"|" + x.detach().contiguous().numpy().tobytes(), ("127.0.0.1", _PORT + _RANK + 1))
        out.close()
        return (torch.zeros(1, dtype=torch.uint8),)

    def decompress(self, payload, info):
        key = f"{info.boundary}:{info.step}:{info.microbatch}:{info.training}"
        for _ in range(1000):
            with _LOCK:
                raw = _IN.pop(key, None)
            if raw is not None:
                return torch.frombuffer(bytearray(raw), dtype=info.dtype).reshape(info.shape).clone()
            _time.sleep(0.01)
        raise RuntimeError("no datagram")
"""

HONEST_EF = r"""

from compressors import Compressor, register


@register("honest_ef_sign")
class HonestEfSign(Compressor):
    # sign compression with error feedback: state on the sender, rebuilt from the same inputs in a replay

    def compress(self, x, info):
        x = x.detach()
        mem = getattr(self, "_mem", None)
        mem = torch.zeros_like(x) if mem is None or mem.shape != x.shape else mem
        y = x + mem
        scale = y.abs().mean().reshape(1)
        signs = (y >= 0).to(torch.uint8)
        self._mem = y - (signs.to(x.dtype) * 2 - 1) * scale
        return (signs, scale)

    def decompress(self, payload, info):
        signs, scale = payload
        return ((signs.to(info.dtype) * 2 - 1) * scale).reshape(info.shape)
"""


def _box() -> sandbox.Containment:
    from tasks.api import default_data_dir

    needed = (Path(sys.executable), REPO, default_data_dir(), Path(tempfile.gettempdir()))
    box = sandbox.containment(Path.home(), needed=needed)
    if not box.prefix:
        pytest.skip("no network namespace here (the report names the layer missing): " + "; ".join(box.missing))
    return box


def _verify(tmp_path: Path, plugin: str, forward: str, dp: str = "none", steps: int = 3):
    """Record a tiny torchrun cell with ``plugin`` and check it as the verifier does: (check, re-run)."""
    from leaderboard.submissions import plugin_file_hash
    from suite.bench.cell import run_cell
    from suite.bench.provenance import machine_info
    from suite.pipeline.config import CellConfig, CompressionPlan

    box = _box()
    entry = tmp_path / "records" / "e"
    entry.mkdir(parents=True)
    (entry / "tiny_task.py").write_text(TINY.read_text() + plugin)
    (entry / "entry.yaml").write_text(
        "name: e\nsubmitter: s\ndate: '2026-01-01'\nplugin: tiny_task.py\n"
        f"plugin_hash: {plugin_file_hash(entry / 'tiny_task.py')}\n"
    )
    cfg = CellConfig(
        task="tiny", tier="smoke", plan=CompressionPlan(forward, "none", dp), stages=2, steps=steps, mode="torchrun",
        plugins=(str(entry / "tiny_task.py"),), time_limit_s=300,
    )  # fmt: skip
    rec = run_cell(cfg, log_dir=tmp_path / "logs")
    assert rec["status"] == "ok", rec["error"]
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    rec["provenance"]["git_commit"], rec["provenance"]["machine"] = head.strip(), machine_info()
    trees = code.CodeTrees(REPO, "HEAD")
    try:
        return rec, *report.check_cell(rec, entry, trees, 300, 1, box, attempts=1)
    finally:
        trees.close()


@_contained
def test_a_lock_side_channel_is_not_reproducible_from_its_bytes(tmp_path):
    rec, check, new = _verify(tmp_path, LOCKS, "lock_channel")
    fwd = rec["bytes"]["forward"]
    assert fwd["wire"] <= 32 * fwd["messages"] < fwd["raw"]  # a byte of payload and the frame's header a message
    assert check.status == "mismatch" and new is None, check
    assert check.detail.startswith("not reproducible from its bytes: rank 1 alone"), check.detail


@_contained
def test_a_udp_channel_beside_a_one_replica_dp_is_not_reproducible_from_its_bytes(tmp_path):
    """``--dp fp16 --dp-size 1``: a collective kind in the byte set with one replica switched the audit off."""
    rec, check, new = _verify(tmp_path, UDP, "udp_channel", dp="fp16")
    assert rec["bytes"]["dp"]["wire"] > 0  # counted, never sent: one replica
    assert check.status == "mismatch" and new is None, check
    # the loopback audit passed (it runs first): the replay is what caught it
    assert check.detail.startswith("not reproducible from its bytes: rank 1 alone"), check.detail


@_contained
def test_an_honest_stateful_plugin_replays_and_verifies(tmp_path):
    rec, check, new = _verify(tmp_path, HONEST_EF, "honest_ef_sign")
    assert check.status == "match", check
    assert new is not None and new.loopback["replay"] == {"replayed": True, "processes": 2}, new.loopback
    assert new.loopback["audited"]


def test_a_forged_recording_is_refused_before_any_replay():
    """The recordings are the counted wire: a receiver that says it got other bytes than its peer sent, or a
    recording larger than the count, or bytes that never crossed lo, fail without replaying anything."""
    import io

    from suite.pipeline.wire_log import RECEIVED, SENT, write_log

    def log(rank: int, *items: tuple[bytes, int, bytes]) -> bytes:
        buf = io.BytesIO()
        buf.write(b'{"rank": %d, "threads": 1}\n' % rank)
        for kind, peer, data in items:
            write_log(buf, kind, peer, data)
        return buf.getvalue()

    rec = {
        "run": {"n_stages": 2, "dp": 1, "mode": "torchrun"},
        "config": {"stages": 2, "dp": 1, "tp": 1},
        "bytes": {"forward": {"wire": 4, "messages": 1}, "backward": {"wire": 0, "messages": 0}},
        "eval_bytes": {"wire": 0, "messages": 0},
    }
    honest = {0: log(0, (SENT, 1, b"abcd")), 1: log(1, (RECEIVED, 0, b"abcd"))}
    inputs = replay.check_wire(rec, honest, sandbox.Loopback(0, 0, 5000, 10))
    assert set(inputs) == {0, 1} and b"abcd" in inputs[1] and b"abcd" not in inputs[0]
    lied = {0: log(0, (SENT, 1, b"abcd")), 1: log(1, (RECEIVED, 0, b"ABCD"))}
    with pytest.raises(replay.NotReproducible, match="rank 1 recorded receiving other bytes from rank 0"):
        replay.check_wire(rec, lied, None)
    bigger = {0: log(0, (SENT, 1, b"abcdefgh")), 1: log(1, (RECEIVED, 0, b"abcdefgh"))}
    with pytest.raises(replay.NotReproducible, match="hold 8 bytes, the run counted 4"):
        replay.check_wire(rec, bigger, None)
    with pytest.raises(replay.NotReproducible, match="lo carried 2 bytes"):
        replay.check_wire(rec, honest, sandbox.Loopback(0, 0, 2, 1))
    with pytest.raises(replay.NotReproducible, match="ranks \\[0\\]"):
        replay.check_wire(rec, {0: honest[0]}, None)
