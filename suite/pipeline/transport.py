"""Moving payloads between stages: one message per fixed-size payload, bytes counted as sent.

Two ways a payload (a tuple of tensors) crosses the wire:

* **framed** (variable-size payloads, and the first message of every fixed-size stream):
  the payload is framed into one contiguous uint8 buffer::

      header (int32):  orig_dtype, orig_ndim, orig_dims...,      # the uncompressed tensor
                       n_tensors, (dtype, ndim, dims...) * n      # the payload's tensors
      body:            the payload tensors' bytes, concatenated

  and sent as two messages: an 8-byte int64 length prefix, then the buffer. The receiver
  needs nothing else (threshold sparsification, DGC: any size just works).
* **fixed** (a *stream* whose layout the receiver already knows): the body only, one
  message, received straight into a tensor of the known size. A stream is named by the
  caller (the boundary: direction, compressed or not, the micro-batch's input shape) and is
  used only for compressors that declare ``fixed_size`` (their payload layout follows from
  the tensor's shape and dtype). Both ends cache the layout of the stream's first (framed)
  message; the sender verifies every later payload against it and refuses a change with a
  one-line error naming the stream. A payload of one contiguous tensor is sent as that
  tensor (no copy); several tensors are concatenated into one buffer.

The wire bytes of a message are exactly the sizes of the tensors handed to the backend; the
transport records them, and the number of messages (``torch.distributed`` sends), in the
:class:`~suite.pipeline.accounting.ByteMeter` at the moment it hands them over.

:class:`DistTransport` sends and receives on the default ``torch.distributed`` process group
(gloo on CPU, NCCL on GPU): sends are asynchronous (kept alive until :meth:`flush`) and
receives block with the process group's timeout, so a dead or stalled peer becomes an error,
not a hang. It calls the group's ``send`` / ``recv`` itself, which is what ``dist.isend`` /
``dist.recv`` call after checking their arguments again: the transport has checked them, and
the Python calls of those wrappers (about ten per message) were a measured share of the per-message
overhead (docs/performance.md, "pipeline and messages, third round"). Complex tensors go as
``view_as_real``, as in ``dist.isend``.
A verification re-run records what crosses (``MPCBENCH_WIRE_RECORD``) and replays one process from the
recording (``MPCBENCH_WIRE_REPLAY``): :mod:`suite.pipeline.wire_log`; off, the group is used directly.
:class:`LocalTransport` connects stages of one process: it hands over private copies of
the payload tensors and counts exactly the bytes and messages :class:`DistTransport` would.
"""

from __future__ import annotations

import collections
import math
import os
import re
from typing import Any, Hashable, Sequence

import torch
import torch.distributed as dist
from torch import Tensor

from compressors.api import Payload

from . import wire_log
from .accounting import ByteMeter

__all__ = [
    "not_plain_tensor",
    "TransportError",
    "Transport",
    "LocalTransport",
    "DistTransport",
    "Layout",
    "frame",
    "frame_nbytes",
    "unframe",
    "PREFIX_NBYTES",
]

PREFIX_NBYTES = 8
_DTYPES: list[torch.dtype] = [
    torch.float32,
    torch.float16,
    torch.bfloat16,
    torch.float64,
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.bool,
    torch.float8_e4m3fn,
    torch.float8_e5m2,
    torch.complex64,
    torch.complex128,
]
for _name in ("uint16", "uint32", "uint64", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu"):
    if hasattr(torch, _name):
        _DTYPES.append(getattr(torch, _name))
_CODE = {d: i for i, d in enumerate(_DTYPES)}
_INT32_MAX = 2**31 - 1


class TransportError(RuntimeError):
    """A message could not be framed, sent or received (the message names the link)."""


def not_plain_tensor(t: object) -> str:
    """Why ``t`` may not cross a boundary ("" if it may): only an exact ``torch.Tensor`` with no
    attributes of its own is a payload. A subclass or an attribute carries Python state past the
    byte count (in one process the receiver would see the sender's objects: a side channel)."""
    if type(t) is not Tensor:
        return f"is a {type(t).__module__}.{type(t).__qualname__}, not exactly torch.Tensor (no subclasses)"
    extra = getattr(t, "__dict__", None)
    if extra:
        return f"carries attributes {sorted(map(str, extra))[:3]}: a payload is plain tensor data"
    return ""


def _describe(dtype: torch.dtype, shape: Sequence[int]) -> list[int]:
    if dtype not in _CODE:
        raise TransportError(f"cannot send tensors of dtype {dtype}; supported: {', '.join(map(str, _DTYPES))}")
    if any(d > _INT32_MAX for d in shape):
        raise TransportError(f"dimension of shape {tuple(shape)} exceeds int32 in the message header")
    return [_CODE[dtype], len(shape), *shape]


Layout = tuple  # (orig shape, orig dtype, ((dtype, shape), ...) of the payload's tensors)


def layout_of(payload: Payload, shape: Sequence[int], dtype: torch.dtype) -> Layout:
    """What a receiver must know to receive ``payload`` without a header."""
    return (tuple(shape), dtype, tuple((t.dtype, tuple(t.shape)) for t in payload))


def _layout_nbytes(layout: Layout) -> int:
    return sum(math.prod(shp) * dt.itemsize for dt, shp in layout[2])


def _show(layout: Layout) -> str:
    return ", ".join(f"{str(dt).replace('torch.', '')}{list(shp)}" for dt, shp in layout[2])


def frame(payload: Payload, shape: Sequence[int], dtype: torch.dtype, device: torch.device) -> Tensor:
    """Frame ``payload`` (standing for a tensor of ``shape``/``dtype``) into one uint8 buffer."""
    if not isinstance(payload, tuple) or not all(isinstance(t, Tensor) for t in payload):
        raise TransportError(f"a payload must be a tuple of tensors, got {type(payload).__name__}")
    header = _describe(dtype, shape) + [len(payload)]
    for t in payload:
        header += _describe(t.dtype, t.shape)
    parts = [torch.tensor(header, dtype=torch.int32).view(torch.uint8).to(device)]
    for t in payload:
        t = t.detach().contiguous().reshape(-1)
        parts.append(t.view(torch.uint8).to(device))
    return torch.cat(parts) if len(parts) > 1 else parts[0].clone()


def frame_nbytes(payload: Payload, shape: Sequence[int], dtype: torch.dtype) -> int:
    """``frame(...).numel()`` without building the buffer (same validation)."""
    if not isinstance(payload, tuple) or not all(isinstance(t, Tensor) for t in payload):
        raise TransportError(f"a payload must be a tuple of tensors, got {type(payload).__name__}")
    words = len(_describe(dtype, shape)) + 1 + sum(len(_describe(t.dtype, t.shape)) for t in payload)
    return 4 * words + sum(t.numel() * t.element_size() for t in payload)


def unframe(buf: Tensor) -> tuple[Payload, torch.Size, torch.dtype]:
    """Inverse of :func:`frame`: (payload, original shape, original dtype)."""
    n_bytes = buf.numel()
    if buf.storage_offset() % 8:
        buf = buf.clone()  # int32 / float views need an aligned start
    words: list[int] = []
    pos = 0

    def ints(n: int) -> list[int]:
        nonlocal words, pos
        if pos + n > len(words):  # parse a CPU copy of the header's words, in one conversion
            want = min(n_bytes, max(256, 8 * (pos + n))) // 4 * 4
            if 4 * (pos + n) > want:
                raise TransportError(f"malformed message: header runs past the {n_bytes}-byte buffer")
            words = buf[:want].cpu().view(torch.int32).tolist()
        vals = words[pos : pos + n]
        pos += n
        return vals

    def desc() -> tuple[torch.dtype, torch.Size]:
        code, ndim = ints(2)
        if not 0 <= code < len(_DTYPES) or not 0 <= ndim <= 64:
            raise TransportError(f"malformed message: dtype code {code}, ndim {ndim}")
        return _DTYPES[code], torch.Size(ints(ndim))

    odtype, oshape = desc()
    (n,) = ints(1)
    metas = [desc() for _ in range(n)]
    off = 4 * pos
    out = []
    for dt, shp in metas:
        nbytes = math.prod(shp) * dt.itemsize
        if off + nbytes > n_bytes:
            raise TransportError(f"malformed message: header describes more than the {n_bytes}-byte buffer")
        out.append(buf[off : off + nbytes].clone().view(dt).reshape(shp))
        off += nbytes
    if off != n_bytes:
        raise TransportError(f"malformed message: header describes {off} bytes, buffer has {n_bytes}")
    return tuple(out), oshape, odtype


class Transport:
    """Sends payloads to peers; records wire bytes and messages in ``meter``.

    Peers are addressed by rank (global rank under torchrun; stage index in one process).
    """

    # how a payload crosses the wire, for the network model (suite.results.network.PROTOCOLS):
    # messages per payload as counted per link, receives posted when the action starts
    PROTOCOL = "measured"
    DELIVERS_FANOUT = True  # False: fanout copies are counted, not delivered (one simulated receiver)

    def __init__(self, meter: ByteMeter, device: torch.device) -> None:
        self.meter = meter
        self.device = device
        self._sent_layouts: dict[tuple[int, Hashable], Layout] = {}  # (dst, stream) -> layout
        self._recv_layouts: dict[tuple[int, Hashable], Layout] = {}  # (src, stream) -> layout
        # (dst, stream) of one plain tensor -> (original shape, original dtype, tensor shape, tensor
        # dtype, wire bytes, raw bytes): the common message's checks as a few compares (send)
        self._fast_sends: dict[
            tuple[int, Hashable], tuple[torch.Size, torch.dtype, torch.Size, torch.dtype, int, int]
        ] = {}

    def send(
        self,
        payload: Payload,
        dst: int,
        *,
        key: str,
        shape: Sequence[int],
        dtype: torch.dtype,
        raw_nbytes: int | None = None,
        stream: Hashable | None = None,
        fanout: Sequence[int] = (),
    ) -> int:
        """Send ``payload`` (standing for a tensor of ``shape``/``dtype``); ``key`` names the link
        for accounting (raw bytes: the tensor's size unless ``raw_nbytes`` is given). ``stream``:
        a fixed-size stream (see the module docstring), None for a variable-size payload.
        ``fanout``: further peers that get the same payload (the other tensor-parallel ranks of
        the next stage), each one message counted as sent; a transport that simulates only
        ``dst`` (``LocalTransport``) counts them without delivering. Returns the wire bytes.

        The common message (one plain tensor on a known fixed-size stream to one peer) takes a
        short path with the same checks: the Python between two backend calls runs at a cold
        cache and was a measured share of a 1 KB message (docs/performance.md, "pipeline and
        messages, third round")."""
        if stream is not None and not fanout and type(payload) is tuple and len(payload) == 1:
            t = payload[0]
            fast = self._fast_sends.get((dst, stream))
            if (  # not_plain_tensor's rule inline (exactly a Tensor, no attributes), then the layout
                fast is not None
                and type(t) is Tensor
                and not t.__dict__
                and t.dtype is fast[3]
                and t.shape == fast[2]
                and dtype is fast[1]
                and shape == fast[0]
            ):
                wire = self._deliver_body(payload, dst)
                self.meter.record(key, fast[5] if raw_nbytes is None else raw_nbytes, wire, 1)
                return wire
        if not isinstance(payload, tuple):
            raise TransportError(f"a payload must be a tuple of tensors, got {type(payload).__name__}")
        for t in payload:  # not_plain_tensor's rule in one loop; _refuse words the error
            if type(t) is not Tensor or t.__dict__:
                self._refuse(payload, key)
        layout = layout_of(payload, shape, dtype) if stream is not None else None
        wire = messages = 0
        for i, peer in enumerate((dst, *fanout)):
            w, m = self._send_one(payload, peer, key, shape, dtype, layout, stream, i == 0 or self.DELIVERS_FANOUT)
            wire, messages = wire + w, messages + m
        raw = math.prod(shape) * dtype.itemsize if raw_nbytes is None else raw_nbytes
        self.meter.record(key, raw * (1 + len(fanout)), wire, messages)
        return wire

    @staticmethod
    def _refuse(payload: tuple, key: str) -> None:
        """Raise the error for a payload that is not a tuple of plain tensors."""
        if not all(isinstance(t, Tensor) for t in payload):
            raise TransportError(f"a payload must be a tuple of tensors, got {type(payload).__name__}")
        for i, t in enumerate(payload):
            if why := not_plain_tensor(t):
                raise TransportError(f"{key}: payload tensor {i} {why}")

    def _send_one(
        self,
        payload: Payload,
        dst: int,
        key: str,
        shape: Sequence[int],
        dtype: torch.dtype,
        layout: Layout | None,
        stream: Hashable | None,
        deliver: bool,
    ) -> tuple[int, int]:
        """(wire bytes, messages) of one copy of ``payload`` to ``dst`` (delivered, or only counted)."""
        known = self._sent_layouts.get((dst, stream)) if stream is not None else None
        if known is None or layout is None:
            framed = self._deliver(payload, dst, shape, dtype) if deliver else frame_nbytes(payload, shape, dtype)
            if layout is not None and _layout_nbytes(layout) > 0:  # empty bodies keep the header
                self._sent_layouts[(dst, stream)] = layout
                if len(layout[2]) == 1:
                    (dt, shp), (oshape, odtype) = layout[2][0], layout[:2]
                    nbytes = math.prod(shp) * dt.itemsize
                    self._fast_sends[(dst, stream)] = (
                        torch.Size(oshape),
                        odtype,
                        torch.Size(shp),
                        dt,
                        nbytes,
                        math.prod(oshape) * odtype.itemsize,
                    )
            return PREFIX_NBYTES + framed, 2
        if known == layout:
            body = self._deliver_body(payload, dst) if deliver else sum(t.numel() * t.element_size() for t in payload)
            return body, 1
        raise TransportError(
            f"{key}: the payload of fixed-size stream {stream!r} changed from [{_show(known)}] to "
            f"[{_show(layout)}]; a compressor whose payload size varies must not declare fixed_size"
        )

    def recv(self, src: int, stream: Hashable | None = None) -> tuple[Payload, torch.Size, torch.dtype]:
        """The next message from ``src``: (payload, original shape, original dtype)."""
        known = self._recv_layouts.get((src, stream)) if stream is not None else None
        if known is not None:
            return self._receive_body(src, known), torch.Size(known[0]), known[1]
        payload, shape, dtype = self._receive_framed(src)
        if stream is not None:
            layout = layout_of(payload, shape, dtype)
            if _layout_nbytes(layout) > 0:
                self._recv_layouts[(src, stream)] = layout
        return payload, shape, dtype

    def ready(self, src: int) -> bool:
        """Whether a ``recv(src)`` would return without waiting for a peer in this process."""
        return True

    def flush(self) -> None:
        """Wait until every send issued so far has completed."""

    def _deliver(self, payload: Payload, dst: int, shape: Sequence[int], dtype: torch.dtype) -> int:
        """Hand the framed message to the backend; return the framed buffer's size in bytes."""
        raise NotImplementedError

    def _deliver_body(self, payload: Payload, dst: int) -> int:
        """Hand the payload's bytes to the backend as one message; return their size."""
        raise NotImplementedError

    def _receive_framed(self, src: int) -> tuple[Payload, torch.Size, torch.dtype]:
        raise NotImplementedError

    def _receive_body(self, src: int, layout: Layout) -> Payload:
        raise NotImplementedError


class LocalTransport(Transport):
    """All stages in one process: messages wait in a FIFO per (src, dst) pair.

    Nothing crosses a wire, so the buffer is not assembled: the receiver gets private copies
    of the payload tensors and the meter records exactly the bytes :class:`DistTransport`
    would hand to ``torch.distributed`` for the same message (``frame_nbytes``, checked
    against ``frame`` in the tests). ``rank`` is the stage currently sending or receiving
    (set by the executor). Fanout copies (to the tensor-parallel peers of the receiving stage,
    which this process simulates as one) are counted exactly as sent, not queued."""

    DELIVERS_FANOUT = False

    def __init__(self, meter: ByteMeter, device: torch.device) -> None:
        super().__init__(meter, device)
        self.rank = 0
        self._queues: dict[tuple[int, int], collections.deque[tuple[Payload, torch.Size, torch.dtype]]] = (
            collections.defaultdict(collections.deque)
        )

    def _deliver(self, payload: Payload, dst: int, shape: Sequence[int], dtype: torch.dtype) -> int:
        nbytes = frame_nbytes(payload, shape, dtype)
        copy = tuple(t.detach().to(self.device, copy=True).contiguous() for t in payload)
        self._queues[(self.rank, dst)].append((copy, torch.Size(shape), dtype))
        return nbytes

    def ready(self, src: int) -> bool:
        return bool(self._queues[(src, self.rank)])

    def _deliver_body(self, payload: Payload, dst: int) -> int:
        copy = tuple(t.detach().to(self.device, copy=True).contiguous() for t in payload)
        self._queues[(self.rank, dst)].append((copy, None, None))
        return sum(t.numel() * t.element_size() for t in payload)

    def _pop(self, src: int) -> tuple[Payload, torch.Size | None, torch.dtype | None]:
        q = self._queues[(src, self.rank)]
        if not q:
            raise TransportError(f"stage {self.rank}: no message from stage {src} (schedule bug)")
        return q.popleft()

    def _receive_framed(self, src: int) -> tuple[Payload, torch.Size, torch.dtype]:
        payload, shape, dtype = self._pop(src)
        if shape is None:
            raise TransportError(
                f"stage {self.rank}: expected a framed message from stage {src}, got a body (stream mismatch)"
            )
        return payload, shape, dtype

    def _receive_body(self, src: int, layout: Layout) -> Payload:
        payload, shape, _ = self._pop(src)
        if shape is not None or layout_of(payload, layout[0], layout[1]) != layout:
            raise TransportError(f"stage {self.rank}: message from stage {src} does not match its stream's layout")
        return payload

    def pending(self) -> int:
        return sum(len(q) for q in self._queues.values())


class DistTransport(Transport):
    """Point-to-point over ``torch.distributed`` (async sends, blocking receives)."""

    def __init__(self, meter: ByteMeter, device: torch.device, rank: int, max_pending: int = 64) -> None:
        super().__init__(meter, device)
        self.rank = rank
        self.max_pending = max_pending
        self._pending: collections.deque[tuple[dist.Work, Tensor]] = collections.deque()
        if os.environ.get(wire_log.ENV_REPLAY):  # the verifier replays this process alone (no peers)
            self.group: Any = wire_log.wrap(None, rank)
            return
        group = dist.group.WORLD  # the default process group: global ranks are its ranks
        if not isinstance(group, dist.ProcessGroup):
            raise TransportError(f"rank {rank}: torch.distributed is not initialized (no default process group)")
        self.group = wire_log.wrap(group, rank)  # the group itself unless the verifier records the wire

    def _deliver(self, payload: Payload, dst: int, shape: Sequence[int], dtype: torch.dtype) -> int:
        buf = frame(payload, shape, dtype, self.device)
        prefix = torch.tensor([buf.numel()], dtype=torch.int64, device=self.device)
        self._send_tensors(dst, (prefix, buf))
        return buf.numel()

    def _send_tensors(self, dst: int, tensors: tuple[Tensor, ...]) -> None:
        for t in tensors:
            try:
                work = self.group.send([torch.view_as_real(t) if t.is_complex() else t], dst, 0)
            except Exception as e:
                raise TransportError(f"rank {self.rank}: sending to rank {dst} failed: {_first_line(e)}") from e
            self._pending.append((work, t))  # the tensor must stay alive until the send completes

    def _deliver_body(self, payload: Payload, dst: int) -> int:
        if len(payload) == 1:  # one tensor: sent as it is (contiguous), no frame buffer
            t = payload[0]
            if t.requires_grad:
                t = t.detach()
            body = t if t.is_contiguous() else t.contiguous()
        else:
            body = torch.cat([t.detach().reshape(-1).view(torch.uint8) for t in payload])
        self._send_tensors(dst, (body,))
        return body.numel() * body.element_size()

    def _receive_body(self, src: int, layout: Layout) -> Payload:
        metas = layout[2]
        try:
            if len(metas) == 1:
                dt, shp = metas[0]
                out = torch.empty(shp, dtype=dt, device=self.device)
                self.group.recv([out], src, 0).wait()
                return (out,)
            buf = torch.empty(_layout_nbytes(layout), dtype=torch.uint8, device=self.device)
            self.group.recv([buf], src, 0).wait()
        except Exception as e:
            raise TransportError(
                f"rank {self.rank}: receiving from rank {src} failed (peer died or stalled?): {_first_line(e)}"
            ) from e
        parts, off = [], 0
        for dt, shp in metas:  # views where aligned, copies where a dtype needs alignment
            n = math.prod(shp) * dt.itemsize
            piece = buf[off : off + n]
            if off % dt.itemsize:
                piece = piece.clone()
            parts.append(piece.view(dt).reshape(shp))
            off += n
        return tuple(parts)

    def _receive_framed(self, src: int) -> tuple[Payload, torch.Size, torch.dtype]:
        try:
            prefix = torch.empty(1, dtype=torch.int64, device=self.device)
            self.group.recv([prefix], src, 0).wait()
            buf = torch.empty(int(prefix.item()), dtype=torch.uint8, device=self.device)
            self.group.recv([buf], src, 0).wait()
        except Exception as e:
            raise TransportError(
                f"rank {self.rank}: receiving from rank {src} failed (peer died or stalled?): {_first_line(e)}"
            ) from e
        return unframe(buf)

    def flush(self) -> None:
        while self._pending:
            work, _ = self._pending.popleft()
            try:
                work.wait()
            except Exception as e:
                raise TransportError(f"rank {self.rank}: a send did not complete: {_first_line(e)}") from e

    def trim(self) -> None:
        """Bound the tensors kept alive by in-flight sends (waits on the oldest)."""
        while len(self._pending) > self.max_pending:
            work, _ = self._pending.popleft()
            work.wait()


def _first_line(e: BaseException) -> str:
    """First sentence of an error, without gloo's source-location prefix."""
    lines = [l for l in str(e).splitlines() if l.strip()]
    text = re.sub(r"\[[^\]]*\.(?:cc|cpp|h):\d+\]\s*", "", lines[0].strip() if lines else "")
    return f"{type(e).__name__}: {text.split('. ')[0]}"
