"""A process's wire, recorded and replayed: verified means computed only from the counted bytes.

Off unless the verifier asks (``mpcbench verify``'s re-runs): :class:`~suite.pipeline.transport.DistTransport`
reads the environment once, when it is built, and otherwise talks to its process group directly.

- ``MPCBENCH_WIRE_RECORD=1``: every tensor the transport hands to the backend (``>``) and every tensor it
  receives (``<``) is appended, in order, with the peer's rank, to ``$TMPDIR/wire-rank<r>.log``
  (:class:`RecordingGroup`);
- ``MPCBENCH_WIRE_REPLAY=<log>``: no process group at all; a receive takes the next message the log holds
  from that peer, a send is written to ``$TMPDIR/wire-rank<r>.replay`` (``>`` records only) instead of
  going anywhere (:class:`ReplayGroup`). The verifier builds the log from the *senders'* recordings and
  compares what the replay sent with what the recorded run sent (``suite.bench.verify.replay``).

A log is a header line (JSON: rank, torch threads) and then records of ``kind`` (1 byte), ``peer``
(int32), ``nbytes`` (int64), little-endian, and the tensor's bytes.
"""

from __future__ import annotations

import collections
import json
import os
import struct
from pathlib import Path
from typing import Any, BinaryIO, Iterator

import torch
from torch import Tensor

__all__ = ["ENV_RECORD", "ENV_REPLAY", "RecordingGroup", "ReplayGroup", "wrap", "read_log", "write_log", "ReplayError"]

ENV_RECORD = "MPCBENCH_WIRE_RECORD"
ENV_REPLAY = "MPCBENCH_WIRE_REPLAY"
SENT, RECEIVED = b">", b"<"
_HEAD = struct.Struct("<ciq")


class ReplayError(RuntimeError):
    """The replayed process asked for a message the recorded run never received, or of another size."""


def _bytes(t: Tensor) -> bytes:
    flat = t.detach().reshape(-1)
    return flat.view(torch.uint8).cpu().numpy().tobytes() if flat.numel() else b""


def _header(rank: int) -> bytes:
    return (json.dumps({"rank": rank, "threads": torch.get_num_threads()}) + "\n").encode()


def write_log(f: BinaryIO, kind: bytes, peer: int, data: bytes) -> None:
    f.write(_HEAD.pack(kind, peer, len(data)))
    f.write(data)


def read_log(data: bytes) -> tuple[dict[str, Any], Iterator[tuple[bytes, int, bytes]]]:
    """(header, the records ``(kind, peer, bytes)`` in order); ValueError for a malformed log."""
    head, sep, rest = data.partition(b"\n")
    if not sep:
        raise ValueError("no header line")
    header = json.loads(head)
    if not isinstance(header, dict):
        raise ValueError("the header is not an object")

    def records() -> Iterator[tuple[bytes, int, bytes]]:
        pos = 0
        while pos < len(rest):
            if pos + _HEAD.size > len(rest):
                raise ValueError("a record's head runs past the end")
            kind, peer, n = _HEAD.unpack_from(rest, pos)
            pos += _HEAD.size
            if kind not in (SENT, RECEIVED) or n < 0 or pos + n > len(rest):
                raise ValueError("a malformed record")
            yield kind, peer, rest[pos : pos + n]
            pos += n

    return header, records()


def _open(folder: str, rank: int, suffix: str) -> BinaryIO:
    f = open(Path(folder) / f"wire-rank{rank}.{suffix}", "wb")  # noqa: SIM115 - open for the process's life
    f.write(_header(rank))
    return f


def _write_sent(f: BinaryIO, tensors: list[Tensor], dst: int) -> None:
    for t in tensors:
        write_log(f, SENT, dst, _bytes(t))
    f.flush()


class _Done:
    """A completed send or receive (what ``work.wait()`` is asked of)."""

    def wait(self, *_: Any) -> bool:
        return True


class _Logged:
    def __init__(self, work: Any, after: Any) -> None:
        self.work, self.after = work, after

    def wait(self, *a: Any) -> Any:
        r = self.work.wait(*a)
        self.after()
        return r


class RecordingGroup:
    """The process group's ``send`` / ``recv``, each tensor also appended to the log."""

    def __init__(self, inner: Any, rank: int, folder: str) -> None:
        self.inner = inner
        self.f = _open(folder, rank, "log")

    def send(self, tensors: list[Tensor], dst: int, tag: int) -> Any:
        _write_sent(self.f, tensors, dst)
        return self.inner.send(tensors, dst, tag)

    def recv(self, tensors: list[Tensor], src: int, tag: int) -> Any:
        def logged() -> None:
            for t in tensors:
                write_log(self.f, RECEIVED, src, _bytes(t))
            self.f.flush()

        return _Logged(self.inner.recv(tensors, src, tag), logged)


class ReplayGroup:
    """No peers: receives come from the recorded log, sends are written down (module docstring)."""

    def __init__(self, rank: int, log: str, folder: str) -> None:
        header, records = read_log(Path(log).read_bytes())
        self.threads = int(header.get("threads") or 1)
        self.queues: dict[int, collections.deque[bytes]] = collections.defaultdict(collections.deque)
        for kind, peer, data in records:
            if kind == RECEIVED:
                self.queues[peer].append(data)
        self.rank = rank
        self.f = _open(folder, rank, "replay")

    def send(self, tensors: list[Tensor], dst: int, tag: int) -> _Done:
        _write_sent(self.f, tensors, dst)
        return _Done()

    def recv(self, tensors: list[Tensor], src: int, tag: int) -> _Done:
        for t in tensors:
            q = self.queues[src]
            if not q:
                raise ReplayError(
                    f"rank {self.rank} asked for a message from rank {src} the recorded run never received"
                )
            data = q.popleft()
            want = t.numel() * t.element_size()
            if len(data) != want:
                raise ReplayError(
                    f"rank {self.rank}: the recorded message from rank {src} has {len(data)} bytes, not {want}"
                )
            if want:
                t.reshape(-1).view(torch.uint8).copy_(torch.frombuffer(bytearray(data), dtype=torch.uint8))
        return _Done()


def wrap(group: Any, rank: int) -> Any:
    """The group the transport talks to: ``group`` itself unless the environment asks to record or replay."""
    replay = os.environ.get(ENV_REPLAY)
    if replay:
        rg = ReplayGroup(rank, replay, os.environ.get("TMPDIR") or ".")
        torch.set_num_threads(rg.threads)  # as the recorded process computed
        return rg
    if os.environ.get(ENV_RECORD) == "1":
        return RecordingGroup(group, rank, os.environ.get("TMPDIR") or ".")
    return group
