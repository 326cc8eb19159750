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
from dataclasses import dataclass

import torch
from torch import Tensor

from compressors.api import Compressor, CompressorError, Payload, TensorInfo, TensorRole
from compressors.builtins.baseline import NoCompression
from compressors.registry import build

from .accounting import boundary_key
from .timing import Clock
from .transport import Transport

__all__ = ["Micro", "SenderEnd", "ReceiverEnd", "derive_seed", "GRAD_DTYPES"]

GRAD_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


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


def _check_payload(payload: object, comp: Compressor, info: TensorInfo) -> Payload:
    if not isinstance(payload, tuple) or not all(isinstance(t, Tensor) for t in payload):
        raise CompressorError(
            f"{comp.spec or comp.name}: compress must return a tuple of tensors, got {type(payload).__name__} "
            f"(at {info.role.value} boundary {info.boundary})"
        )
    return payload


def _check_output(x: object, comp: Compressor, info: TensorInfo) -> Tensor:
    if not isinstance(x, Tensor) or x.shape != info.shape or x.dtype != info.dtype:
        got = f"{tuple(x.shape)} {x.dtype}" if isinstance(x, Tensor) else type(x).__name__
        raise CompressorError(
            f"{comp.spec or comp.name}: decompress returned {got}, expected {tuple(info.shape)} {info.dtype} "
            f"(at {info.role.value} boundary {info.boundary})"
        )
    return x


class _End:
    def __init__(
        self,
        boundary: int,
        forward_spec: str,
        backward_spec: str,
        transport: Transport,
        peer: int,
        device: torch.device,
        seed: int,
        clock: Clock,
    ) -> None:
        self.boundary = boundary
        self.fwd = build(forward_spec)
        self.bwd = build(backward_spec)
        self.plain_fwd, self.plain_bwd = NoCompression(), NoCompression()  # warm-up / uncompressed eval
        self.plain_fwd.spec = self.plain_bwd.spec = "none"
        self.transport = transport
        self.peer = peer
        self.device = device
        self.seed = seed
        self.clock = clock

    def compressors(self) -> list[Compressor]:
        return [self.fwd, self.bwd]

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

    def _send(self, payload: Payload, direction: str, shape, dtype, raw_shape=None, raw_dtype=None) -> None:
        with self.clock.section("comm"):
            self.transport.send(
                payload,
                self.peer,
                key=boundary_key(self.boundary, direction),
                shape=shape,
                dtype=dtype,
                raw_nbytes=math.prod(raw_shape if raw_shape is not None else shape)
                * torch.empty((), dtype=raw_dtype or dtype).element_size(),
            )

    def _recv(self) -> tuple[Payload, torch.Size, torch.dtype]:
        with self.clock.section("comm"):
            return self.transport.recv(self.peer)


class SenderEnd(_End):
    """Stage b's end of boundary b: sends activations, receives their gradients."""

    def send_activation(self, y: Tensor, micro: Micro) -> Sent:
        comp = self.fwd if micro.compressed else self.plain_fwd
        info = self.info(TensorRole.ACTIVATION, micro, y.shape, y.dtype)
        diff = self.differentiable(micro)
        with self.clock.section("compress"):
            if diff:
                payload = _check_payload(comp.compress(y, info), comp, info)
            else:
                with torch.no_grad():
                    payload = _check_payload(comp.compress(y.detach(), info), comp, info)
        self._send(payload, "forward", y.shape, y.dtype)
        if diff:
            return Sent(tuple(t for t in payload if _carries_grad(t)), True)
        return Sent((y,), False)

    def receive_gradient(self, sent: Sent, micro: Micro) -> tuple[tuple[Tensor, ...], tuple[Tensor, ...]]:
        """(roots, grads) to backpropagate on this stage."""
        payload, shape, dtype = self._recv()
        comp = self.bwd if micro.compressed else self.plain_bwd
        info = self.info(TensorRole.ACTIVATION_GRAD, micro, shape, dtype)
        with self.clock.section("compress"), torch.no_grad():
            g = _check_output(comp.decompress(payload, info), comp, info)
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
        payload, shape, dtype = self._recv()
        comp = self.fwd if micro.compressed else self.plain_fwd
        info = self.info(TensorRole.ACTIVATION, micro, shape, dtype)
        if self.differentiable(micro):
            leaves = tuple(t.requires_grad_() if _carries_grad(t) else t for t in payload)
            with self.clock.section("compress"):
                x = _check_output(comp.decompress(leaves, info), comp, info)
            return x, Received(tuple(t for t in leaves if _carries_grad(t)), shape, dtype, True)
        with self.clock.section("compress"), torch.no_grad():
            x = _check_output(comp.decompress(payload, info), comp, info)
        x = x.detach().requires_grad_(micro.training and torch.is_grad_enabled())
        return x, Received((x,), shape, dtype, False)

    def send_gradient(self, received: Received, micro: Micro) -> None:
        grads = [t.grad if t.grad is not None else torch.zeros_like(t) for t in received.leaves]
        if received.differentiable:
            g = torch.cat([t.reshape(-1).to(received.dtype) for t in grads]) if grads else torch.zeros(0, device=self.device)
        else:
            g = grads[0]
        comp = self.bwd if micro.compressed else self.plain_bwd
        info = self.info(TensorRole.ACTIVATION_GRAD, micro, g.shape, g.dtype)
        with self.clock.section("compress"), torch.no_grad():
            payload = _check_payload(comp.compress(g, info), comp, info)
        # raw bytes: the activation gradient an uncompressed pipeline would send
        self._send(payload, "backward", g.shape, g.dtype, raw_shape=received.shape, raw_dtype=received.dtype)
