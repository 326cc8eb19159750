"""Both ends of one compressed pipeline boundary: where compression meets the pipeline.

Boundary b sits between stage b and stage b+1. Each end lives in the process of its stage
and owns its own compressor instances, built from the plan's spec for that boundary::

    stage b  (SenderEnd)                              stage b+1  (ReceiverEnd)
    y = stage_b(x)
    payload = fwd.compress(y)      --- activation --> x' = fwd'.decompress(payload)
                                                      y' = stage_b+1(x') ... loss.backward()
    g = bwd'.decompress(payload)   <-- gradient ----- payload = bwd.compress(x'.grad)
    y.backward(g)

``fwd``/``fwd'`` are the sender/receiver instances of the forward spec, ``bwd``/``bwd'`` those
of the backward spec: four distinct instances per boundary, in one process or two.

Straight-through (the default): compress and decompress run without autograd; the
receiver's input is a fresh leaf, its gradient is compressed by the backward compressor
and the sender backpropagates the decompressed gradient into ``y``.

Differentiable compressors (``differentiable = True``, e.g. a learned autoencoder):
``compress`` runs with autograd on the sender and ``decompress`` on the receiver with the
payload's floating tensors as leaves. The backward message then carries the gradient of
those payload tensors (flattened into one vector, compressed by the backward compressor)
and the sender backpropagates it through ``compress``. Both sides' compressor parameters
get gradients and are optimized with their stage.

Every message's TensorInfo.seed is derived from (run seed, boundary, role, step,
micro-batch), so both ends (in any process layout) agree without communication.
"""

from __future__ import annotations

import hashlib
import math
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Hashable, Iterator, Sequence

import torch
from torch import Tensor

from compressors.api import (
    Compressor,
    CompressorError,
    Payload,
    TensorInfo,
    TensorRole,
    payload_dtype_problem,
    payload_type_problem,
)
from compressors.builtins.baseline import NoCompression
from compressors.registry import build, private_plugin_modules
from compressors.spec import Spec

from .accounting import boundary_key
from .timing import Clock
from .transport import Transport, not_plain_tensor

__all__ = [
    "Micro",
    "SenderEnd",
    "ReceiverEnd",
    "derive_seed",
    "GRAD_DTYPES",
    "CONSISTENCY_ENV",
]

GRAD_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
# the variable that also turns the check on (read once, in suite.pipeline.runtime.run, into
# CellConfig.check_consistency; the boundary only sees the config's flag); named in the error
CONSISTENCY_ENV = "MPCBENCH_CHECK_CONSISTENCY"


def derive_seed(*parts: object) -> int:
    """A 63-bit seed from any hashable parts (stable across processes and runs)."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & (2**63 - 1)


@dataclass(frozen=True)
class Micro:
    """The micro-batch a boundary is moving: identical on both ends."""

    step: int  # optimizer step (negative: evaluation after -step steps)
    index: int  # micro-batch index within the step (eval: batch index)
    sample_ids: Tensor | None
    batch_input: Tensor | None
    training: bool
    compressed: bool  # False: the uncompressed ``none`` path (warm-up, uncompressed eval)


@dataclass
class Sent:
    """What the sending end keeps until the gradient comes back."""

    roots: tuple[Tensor, ...]  # y (straight-through) or the payload's floating tensors
    differentiable: bool


@dataclass
class Received:
    """What the receiving end keeps until its input gradient is ready."""

    leaves: tuple[Tensor, ...]  # x' (straight-through) or the payload's floating leaves
    shape: torch.Size  # of the activation (raw bytes of the gradient message too)
    dtype: torch.dtype
    differentiable: bool


def _carries_grad(t: Tensor) -> bool:
    return t.dtype in GRAD_DTYPES


def _same_device(t: Tensor, device: torch.device) -> bool:
    """``t`` lives on ``device`` (an index-less ``cuda`` matches any GPU index)."""
    d = t.device
    return d == device or (
        d.type == device.type and (device.index is None or d.index is None or d.index == device.index)
    )


def _check_payload(payload: object, comp: Compressor, info: TensorInfo) -> Payload:
    """A payload must be a tuple of tensors on the sender's device: nothing else can be framed
    and counted, and a hidden device copy would be transport time charged to nobody."""
    where = f"(at {info.role.value} boundary {info.boundary} step {info.step})"
    if why := payload_type_problem(payload):
        raise CompressorError(f"{comp.spec or comp.name}: compress must return a tuple of tensors, {why} {where}")
    assert isinstance(payload, tuple)
    for i, t in enumerate(payload):
        if why := not_plain_tensor(t):
            raise CompressorError(f"{comp.spec or comp.name}: compress returned payload tensor {i} that {why} {where}")
        if not _same_device(t, info.device):
            raise CompressorError(
                f"{comp.spec or comp.name}: compress returned payload tensor {i} on device {t.device}, "
                f"expected {info.device} (the input's device) {where}"
            )
    if wide := payload_dtype_problem(payload, info.dtype):
        raise CompressorError(f"{comp.spec or comp.name}: compress: {wide} {where}")
    return payload


def _check_output(
    x: object, comp: Compressor, info: TensorInfo, what: str = "decompress", payload: Sequence[Tensor] = ()
) -> Tensor:
    """The decoded tensor must match the original's shape, dtype and device exactly; given the
    ``payload`` it was decoded from, NaN/Inf decoded from a finite payload are the decoder's own
    (named here, at this boundary, not as the next stage's diverged input)."""
    if not isinstance(x, Tensor) or x.shape != info.shape or x.dtype != info.dtype or not _same_device(x, info.device):
        got = f"{tuple(x.shape)} {x.dtype} on {x.device}" if isinstance(x, Tensor) else type(x).__name__
        raise CompressorError(
            f"{comp.spec or comp.name}: {what} returned {got}, expected {tuple(info.shape)} {info.dtype} "
            f"on {info.device} (at {info.role.value} boundary {info.boundary} step {info.step})"
        )
    # one reduction in the common case; the payload is looked at only when the output is not finite
    if payload and x.is_floating_point() and not bool(torch.isfinite(x.detach()).all()):
        if all(bool(torch.isfinite(t.detach()).all()) for t in payload if t.is_floating_point()):
            bad = int((~torch.isfinite(x.detach())).sum())
            raise CompressorError(
                f"{comp.spec or comp.name}: {what} returned {bad} non-finite value(s) (NaN/Inf) of {x.numel()} "
                f"from a finite payload (at {info.role.value} boundary {info.boundary} step {info.step})"
            )
    return x


@contextmanager
def _other_rng(device: torch.device, seed: int) -> Iterator[None]:
    """Run under a different global RNG state, restored afterwards (the twin's world)."""
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        yield


def _check_consistent(x: Tensor, twin_x: object, comp: Compressor, info: TensorInfo) -> None:
    """The twin decoded the same payloads: a different tensor means hidden decoder inputs."""
    if isinstance(twin_x, Tensor) and twin_x.shape == x.shape and twin_x.device == x.device:
        scale = float(x.detach().abs().nan_to_num(0.0, 0.0, 0.0).max()) if x.numel() else 0.0
        if torch.allclose(x.detach(), twin_x.detach().to(x.dtype), rtol=1e-5, atol=1e-5 * scale, equal_nan=True):
            return
        diff = f"max abs difference {float((x.detach() - twin_x.detach().to(x.dtype)).abs().nan_to_num(0.0).max()):.3g}, max |x| {scale:.3g}"
    else:
        diff = f"got {tuple(twin_x.shape) if isinstance(twin_x, Tensor) else type(twin_x).__name__}"
    raise CompressorError(
        f"{comp.spec or comp.name}: sender/receiver consistency check ({CONSISTENCY_ENV}=1) failed at "
        f"{info.role.value} boundary {info.boundary} step {info.step} micro-batch {info.microbatch}: a twin "
        f"receiver fed the same payloads decoded a different tensor ({diff}); decompress must depend only on "
        f"payloads, info and its own history (shared randomness from info.generator(), not the global RNG)"
    )


class _End:
    def __init__(
        self,
        boundary: int,
        forward_spec: Spec,
        backward_spec: Spec,
        transport: Transport,
        peer: int,
        device: torch.device,
        seed: int,
        clock: Clock,
        check_consistency: bool = False,
        fanout: tuple[int, ...] | None = (),
    ) -> None:
        self.boundary = boundary
        # Tensor parallelism: every TP rank of a stage holds the replicated boundary tensor; TP rank 0
        # sends it, to the peer (TP rank 0 of the other stage) and to ``fanout`` (that stage's other TP
        # ranks), and the other TP ranks only receive (``fanout`` None: this end sends nothing).
        self.sends = fanout is not None
        self.fanout = fanout or ()
        self.fwd = build(forward_spec)
        self.bwd = build(backward_spec)
        self.plain_fwd, self.plain_bwd = NoCompression(), NoCompression()  # warm-up / uncompressed eval
        self.plain_fwd.spec = self.plain_bwd.spec = "none"
        self.transport = transport
        self.peer = peer
        self.device = device
        self.seed = seed
        self.clock = clock
        # Debug mode (--check-consistency / MPCBENCH_CHECK_CONSISTENCY=1, no extra traffic): every decompress is
        # repeated by a twin instance of the same spec, built and run under another global RNG
        # state and fed the very same payloads. A decoder that depends only on its payloads,
        # info and its own history (the plugin contract) decodes identically; one that draws
        # from the global RNG, the clock or anything else the sender cannot share does not.
        # Learned (differentiable) decoders are trained, so a twin cannot follow them.
        self.twins: dict[int, Compressor] = {}
        if check_consistency:
            for comp, spec in ((self.fwd, forward_spec), (self.bwd, backward_spec)):
                if not comp.differentiable:
                    # the twin also gets its own copy of the plugin's module: it cannot read the sender's globals
                    twin_rng = _other_rng(device, derive_seed(seed, boundary, str(spec), "twin"))
                    with twin_rng, private_plugin_modules(("twin", boundary)):
                        self.twins[id(comp)] = build(spec)

    def compressors(self) -> list[Compressor]:
        return [self.fwd, self.bwd]

    def twin_compressors(self) -> list[Compressor]:
        """The consistency check's twins (bind and move them like :meth:`compressors`)."""
        return list(self.twins.values())

    def _twin_input(self, comp: Compressor, payload: Payload) -> Payload | None:
        """A private copy of ``payload`` for the twin (taken before ``comp`` may modify it)."""
        return tuple(t.detach().clone() for t in payload) if id(comp) in self.twins else None

    def _check_twin(self, comp: Compressor, payload: Payload | None, info: TensorInfo, x: Tensor) -> None:
        if payload is None:
            return
        with _other_rng(self.device, derive_seed(info.seed, "twin")), torch.no_grad():
            twin_x = self.twins[id(comp)].decompress(payload, info)
        _check_consistent(x, twin_x, comp, info)

    def parameters(self) -> list[torch.nn.Parameter]:
        return [p for c in self.compressors() for p in c.parameters()]

    def differentiable(self, micro: Micro) -> bool:
        return self.fwd.differentiable and micro.compressed and micro.training and torch.is_grad_enabled()

    def info(self, role: TensorRole, micro: Micro, shape: torch.Size, dtype: torch.dtype) -> TensorInfo:
        return TensorInfo(
            role=role,
            boundary=self.boundary,
            microbatch=micro.index,
            step=micro.step,
            shape=torch.Size(shape),
            dtype=dtype,
            device=self.device,
            sample_ids=micro.sample_ids,
            seed=derive_seed(self.seed, self.boundary, role.value, micro.step, micro.index),
            batch_input=micro.batch_input,
            training=micro.training,
        )

    def _stream(self, comp: Compressor, direction: str, micro: Micro) -> Hashable | None:
        """The fixed-size stream a message belongs to (None: variable size, framed every time).
        Both ends derive it from what they both know before the message: the boundary (two may
        join the same pair of ranks), the direction, which compressor (compressed or the plain
        path) and the micro-batch's input shape."""
        if not comp.fixed_size:
            return None
        inp = micro.batch_input
        batch = (
            tuple(inp.shape)
            if isinstance(inp, Tensor)
            else (None if micro.sample_ids is None else micro.sample_ids.numel())
        )
        return (self.boundary, direction, comp is self.plain_fwd or comp is self.plain_bwd, micro.training, batch)

    def _send(
        self, payload: Payload, direction: str, shape, dtype, raw_shape=None, raw_dtype=None, stream=None
    ) -> None:
        if not self.sends:
            return
        with self.clock.section("comm"):
            self.transport.send(
                payload,
                self.peer,
                key=boundary_key(self.boundary, direction),
                shape=shape,
                dtype=dtype,
                raw_nbytes=math.prod(raw_shape if raw_shape is not None else shape) * (raw_dtype or dtype).itemsize,
                stream=stream,
                fanout=self.fanout,
            )

    def _recv(self, stream: Hashable | None = None) -> tuple[Payload, torch.Size, torch.dtype]:
        with self.clock.section("comm"):
            return self.transport.recv(self.peer, stream)


class SenderEnd(_End):
    """Stage b's end of boundary b: sends activations, receives their gradients."""

    def send_activation(self, y: Tensor, micro: Micro) -> Sent:
        comp = self.fwd if micro.compressed else self.plain_fwd
        # channels_last (or otherwise strided) activations are made contiguous once here:
        # compressors flatten with reshape(-1), which would copy inside every one of them
        y = y.contiguous()
        info = self.info(TensorRole.ACTIVATION, micro, y.shape, y.dtype)
        diff = self.differentiable(micro)
        with self.clock.codec(f"b{self.boundary}.forward.compress", y):
            if diff:
                payload = _check_payload(comp.compress(y, info), comp, info)
            else:
                with torch.no_grad():
                    payload = _check_payload(comp.compress(y.detach(), info), comp, info)
        self._send(payload, "forward", y.shape, y.dtype, stream=self._stream(comp, "forward", micro))
        if diff:
            return Sent(tuple(t for t in payload if _carries_grad(t)), True)
        return Sent((y,), False)

    def receive_gradient(self, sent: Sent, micro: Micro) -> tuple[tuple[Tensor, ...], tuple[Tensor, ...]]:
        """(roots, grads) to backpropagate on this stage."""
        comp = self.bwd if micro.compressed else self.plain_bwd
        payload, shape, dtype = self._recv(self._stream(comp, "backward", micro))
        info = self.info(TensorRole.ACTIVATION_GRAD, micro, shape, dtype)
        twin_input = self._twin_input(comp, payload)
        with self.clock.codec(f"b{self.boundary}.backward.decompress", (shape, dtype)), torch.no_grad():
            g = _check_output(comp.decompress(payload, info), comp, info, payload=payload)
        self._check_twin(comp, twin_input, info, g)
        if not sent.differentiable:
            return sent.roots, (g,)
        roots, grads, off = [], [], 0
        for t in sent.roots:  # split the flat payload gradient back into the payload's tensors
            n = t.numel()
            if t.requires_grad:
                roots.append(t)
                grads.append(g[off : off + n].reshape(t.shape).to(t.dtype))
            off += n
        if off != g.numel():
            raise CompressorError(f"boundary {self.boundary}: payload gradient has {g.numel()} values, expected {off}")
        return tuple(roots), tuple(grads)


class ReceiverEnd(_End):
    """Stage b+1's end of boundary b: receives activations, sends their gradients."""

    def receive_activation(self, micro: Micro) -> tuple[Tensor, Received]:
        comp = self.fwd if micro.compressed else self.plain_fwd
        payload, shape, dtype = self._recv(self._stream(comp, "forward", micro))
        info = self.info(TensorRole.ACTIVATION, micro, shape, dtype)
        if self.differentiable(micro):
            leaves = tuple(t.requires_grad_() if _carries_grad(t) else t for t in payload)
            with self.clock.codec(f"b{self.boundary}.forward.decompress", (shape, dtype)):
                x = _check_output(comp.decompress(leaves, info), comp, info, payload=leaves)
            return x, Received(tuple(t for t in leaves if _carries_grad(t)), shape, dtype, True)
        twin_input = self._twin_input(comp, payload)
        with self.clock.codec(f"b{self.boundary}.forward.decompress", (shape, dtype)), torch.no_grad():
            x = _check_output(comp.decompress(payload, info), comp, info, payload=payload)
        self._check_twin(comp, twin_input, info, x)
        x = x.detach().requires_grad_(micro.training and torch.is_grad_enabled())
        return x, Received((x,), shape, dtype, False)

    def send_gradient(self, received: Received, micro: Micro) -> None:
        grads = [t.grad if t.grad is not None else torch.zeros_like(t) for t in received.leaves]
        if received.differentiable:
            g = (
                torch.cat([t.reshape(-1).to(received.dtype) for t in grads])
                if grads
                else torch.zeros(0, device=self.device)
            )
        else:
            g = grads[0].contiguous()  # a channels_last activation's gradient is channels_last too
        comp = self.bwd if micro.compressed else self.plain_bwd
        if not self.sends:  # a tensor-parallel rank > 0: its TP rank 0 sends the (identical) gradient
            return
        info = self.info(TensorRole.ACTIVATION_GRAD, micro, g.shape, g.dtype)
        with self.clock.codec(f"b{self.boundary}.backward.compress", g), torch.no_grad():
            payload = _check_payload(comp.compress(g, info), comp, info)
        # raw bytes: the activation gradient an uncompressed pipeline would send
        self._send(
            payload,
            "backward",
            g.shape,
            g.dtype,
            raw_shape=received.shape,
            raw_dtype=received.dtype,
            stream=self._stream(comp, "backward", micro),
        )
