"""The compressor plugin API: what a compressor is told, what it returns, what it may declare.

A compressor turns one tensor into a *payload* (a tuple of tensors: codes, indices,
scales...) and back. The payload is exactly what the runtime hands to the transport, so
its tensors are what get counted as wire bytes; a plugin never reports its own size.

One compressor *instance* is one side of one link: the runtime builds a sender instance
and a receiver instance from the same spec and the same seed for every
(boundary, role) pair, calls ``compress`` on the sender and ``decompress`` on the
receiver. State kept in ``self`` is therefore per (boundary, role) and per side. Sender
and receiver must stay consistent without extra traffic: anything random must come from
``info.seed`` (identical on both sides), and a sender that tracks what the receiver
reconstructed (EF21, AQ-SGD) recomputes it from its own payload.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Callable, ClassVar, Iterable, Iterator, Mapping

import torch
from torch import Tensor, nn

__all__ = [
    "TensorRole",
    "TensorInfo",
    "Payload",
    "AllReduce",
    "Compressor",
    "CompressorError",
    "payload_nbytes",
    "payload_dtype_problem",
    "payload_type_problem",
    "chain",
    "completed",
    "check_finite",
    "did_you_mean",
]

Payload = tuple[Tensor, ...]
"""What crosses the wire: a tuple of tensors. Only tensors; shapes may depend on data."""

AllReduce = Callable[..., "Tensor | torch.futures.Future[Tensor]"]
"""``all_reduce(t, async_op=False)``: the runtime's counted in-place sum over replicas
(see :meth:`Compressor.reduce`)."""


class CompressorError(ValueError):
    """A compressor was misconfigured or misused. The message names the offender and the fix."""


class TensorRole(str, enum.Enum):
    """Which tensor a compressor is compressing (hivemind's TensorRole, plus weight grads)."""

    ACTIVATION = "activation"  # forward, stage i -> stage i+1
    ACTIVATION_GRAD = "activation_grad"  # backward, stage i+1 -> stage i
    WEIGHT_GRAD = "weight_grad"  # data-parallel gradient reduction (one DDP bucket)
    # tensor parallelism: one rank's contribution to the all-reduce after a row-parallel layer
    # (forward) and before a column-parallel one (backward), inside a transformer block
    TP_ACTIVATION = "tp_activation"
    TP_ACTIVATION_GRAD = "tp_activation_grad"
    # data parallelism with an outer loop (DiLoCo): a replica's pseudo-gradient, the change of its
    # parameters over the inner steps (theta_outer - theta_local, one flat tensor per stage)
    PSEUDO_GRAD = "pseudo_grad"


@dataclass(frozen=True, eq=False)
class TensorInfo:
    """Everything a compressor is told about the tensor it handles. Identical on both sides.

    Attributes:
        role: activation, activation gradient or weight gradient.
        boundary: pipeline boundary index (0 = between stage 0 and 1); for weight
            gradients, the DDP bucket index; for tensor-parallel roles, the reduction's
            index within the stage (2 per block: attention, MLP).
        microbatch: micro-batch index within the step (0 for weight gradients).
        step: optimizer step, counted from 0. Negative for evaluation passes.
        shape, dtype, device: of the uncompressed tensor (the receiver gets these too).
        sample_ids: (B,) int64 data-set indices of the micro-batch's samples, on CPU, or
            None for weight gradients. Both sides run the same data order, so these cost
            no traffic. AQ-SGD keys its buffers on them.
        seed: a seed shared by both sides for this (boundary, role, step, microbatch);
            derive random indices / projections from it, never from global RNG state.
        batch_input: the micro-batch's model input (e.g. token ids (B, T)), available to
            every stage. Subspace projection uses it for the fixed token-embedding term.
        training: False during evaluation passes (stateful compressors should not update
            their state then).
        segments: weight gradients only: the shapes of the parameters' gradients laid out
            one after another in the flat bucket (in order, no gaps; their sizes sum to
            ``numel``), e.g. ``(Size([16, 3, 3, 3]), Size([16]))`` for a conv weight and its
            bias. None when the structure is unknown (a plain tensor).
        replicas: weight gradients only: how many replicas the ``all_reduce`` handed to
            :meth:`Compressor.reduce` sums over (so the mean costs no traffic). None when unknown.
    """

    role: TensorRole
    boundary: int
    microbatch: int
    step: int
    shape: torch.Size
    dtype: torch.dtype
    device: torch.device
    sample_ids: Tensor | None = None
    seed: int = 0
    batch_input: Tensor | None = None
    training: bool = True
    segments: tuple[torch.Size, ...] | None = None
    replicas: int | None = None

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def raw_nbytes(self) -> int:
        """Bytes of the uncompressed tensor."""
        return self.numel * torch.empty((), dtype=self.dtype).element_size()

    def generator(self, salt: int = 0) -> torch.Generator:
        """A CPU generator seeded from ``seed`` (and ``salt``): the same on both sides."""
        g = torch.Generator(device="cpu")
        g.manual_seed((self.seed * 1_000_003 + salt) % (2**63 - 1))
        return g


def chain(fut: torch.futures.Future, fn: Callable[[Any], Any]) -> torch.futures.Future:
    """A Future of ``fn(fut's value)``, run when ``fut`` completes (inline if it already has).

    ``fn`` may return a value or a Future (then the result waits for that one too), so
    multi-round reductions chain without blocking a thread: ``chain(all_reduce(p,
    async_op=True), lambda p: all_reduce(q_from(p), async_op=True))``. An exception in
    ``fut`` or in ``fn`` completes the result with that same exception (``then`` would wrap
    it in a RuntimeError).
    """
    out: torch.futures.Future = torch.futures.Future()

    def settle(f: torch.futures.Future) -> None:
        try:
            value = f.value()
        except BaseException as e:  # noqa: BLE001 (handed on to whoever waits)
            out.set_exception(e)
            return
        out.set_result(value)

    def step(f: torch.futures.Future) -> None:
        try:
            r = fn(f.value())
        except BaseException as e:  # noqa: BLE001
            out.set_exception(e)
            return
        if isinstance(r, torch.futures.Future):
            r.add_done_callback(settle)
        else:
            out.set_result(r)

    fut.add_done_callback(step)
    return out


def completed(value: Any) -> torch.futures.Future:
    """A Future that already holds ``value`` (for a reduction that finished synchronously)."""
    out: torch.futures.Future = torch.futures.Future()
    out.set_result(value)
    return out


def payload_nbytes(payload: Payload) -> int:
    """Bytes a payload occupies on the wire (sum over its tensors, no headers)."""
    return sum(t.numel() * t.element_size() for t in payload)


def payload_type_problem(payload: object) -> str | None:
    """Why ``payload`` is not a tuple of tensors, in one short line (``got list of 16384 float``), or
    None. Never the payload's repr: a list of a tensor's values is megabytes of text."""
    if isinstance(payload, tuple) and all(isinstance(t, Tensor) for t in payload):
        return None
    kind = type(payload).__name__
    if isinstance(payload, Tensor):
        return f"got a bare {kind} of shape {tuple(payload.shape)} (return (t,))"
    if isinstance(payload, (tuple, list, set, dict)):
        types = sorted({type(t).__name__ for t in payload if not isinstance(t, Tensor)})
        shown = ", ".join(types[:5]) + (", ..." if len(types) > 5 else "")
        if isinstance(payload, tuple):
            return f"got tuple containing {shown}"
        return f"got {kind} of {len(payload)} {shown or 'Tensor'}"
    return f"got {kind}"


def payload_dtype_problem(payload: Payload, input_dtype: torch.dtype) -> str | None:
    """Why a payload's dtypes cannot be right, or None: a floating tensor wider than both the
    input and float32 (``float64`` for a float32 input: ``torch.tensor(...)`` of Python floats,
    a NumPy round trip) only adds bytes, so the runtime and ``mpcbench check`` refuse it with
    this one line instead of ranking a compressor that expands what it was given."""
    for i, t in enumerate(payload):
        if t.is_floating_point() and t.element_size() > max(4, input_dtype.itemsize):
            return (
                f"payload tensor {i} is {t.dtype}, wider than the input's {input_dtype}: cast it to the "
                f"input's dtype or smaller before returning it (e.g. t.to(x.dtype) or t.half())"
            )
    return None


def check_finite(x: Tensor, info: TensorInfo, name: str) -> None:
    """Raise a clear error on NaN/Inf input. Compressors that scale by max() would otherwise
    silently emit garbage. Documented behaviour: every built-in refuses non-finite input."""
    if not bool(torch.isfinite(x).all()):
        bad = int((~torch.isfinite(x)).sum())
        raise CompressorError(
            f"{name}: input {info.role.value} at boundary {info.boundary} step {info.step} has "
            f"{bad} non-finite values (NaN/Inf); refusing to compress a diverged tensor"
        )


class Compressor:
    """Base class of every compressor plugin.

    Subclass it, implement ``compress`` and ``decompress``, and register with
    ``@register("name")``. Constructor keyword arguments are the spec parameters:
    ``quant(bits=4)`` calls ``Quant(bits=4)``. Validate them in ``__init__`` and raise
    :class:`CompressorError` naming the parameter and its allowed values.

    Class attributes a plugin may set:
        roles: the roles it supports (the runtime refuses others at config load).
        requires: model features it needs (e.g. ``{"residual_subspace"}``); a task that does
            not provide them is refused before training.
        differentiable: True if ``compress``/``decompress`` are differentiable and the
            runtime should backpropagate through them (learned compressors). Then the
            backward boundary carries the gradient of the payload's floating tensors,
            not of the activation. False (default): straight-through, the backward
            boundary carries the activation gradient, compressed by its own compressor.
        linear: True if payloads of several senders can be summed elementwise and
            decompressed once (sum of decompress == decompress of sum): data-parallel
            reduction then uses all-reduce instead of all-gather.
        fixed_size: True if the payload's tensors (count, dtypes, shapes) follow from the
            input's shape and dtype alone. The pipeline transport then sends each payload as
            one message without a header after the first (the receiver knows the size) and
            refuses, with an error naming the stream, a payload whose layout changed.
            False (default): every payload is framed with its header (any size works).
    """

    name: ClassVar[str] = "?"  # set by @register
    roles: ClassVar[frozenset[TensorRole]] = frozenset(TensorRole)
    requires: ClassVar[frozenset[str]] = frozenset()
    differentiable: ClassVar[bool] = False
    linear: ClassVar[bool] = False
    fixed_size: ClassVar[bool] = False
    # a short display name at the default setting (``"sign 1-bit"``): the leaderboard's compressor column
    # shows it, the full spec on hover; "" shows the spec as typed (built-ins: leaderboard/names.py)
    label: ClassVar[str] = ""

    spec: str = ""  # the canonical spec string it was built from (set by the registry)
    # Options it asks of the task's model features, per feature (e.g. ``subspace(ratio=0.5)``:
    # ``{"residual_subspace": {"ratio": 0.5}}``); one model serves every boundary, so the plan
    # refuses two specs that ask different options. Set it in ``__init__``.
    feature_options: Mapping[str, Mapping[str, Any]] = MappingProxyType({})
    # The compressor a wrapper (``ef(...)``) applies inside it: its roles, requires and
    # feature_options count too. None for a plain compressor.
    inner: Compressor | None = None

    def compress(self, x: Tensor, info: TensorInfo) -> Payload:
        """Encode ``x`` (shape ``info.shape``) into a payload of tensors."""
        raise NotImplementedError

    def decompress(self, payload: Payload, info: TensorInfo) -> Tensor:
        """Decode a payload into a tensor of ``info.shape``, ``info.dtype`` on ``info.device``."""
        raise NotImplementedError

    # --- optional hooks -------------------------------------------------------------
    def parameters(self) -> Iterator[nn.Parameter]:
        """Trainable parameters (learned compressors); the runtime optimizes them."""
        for m in self.modules():
            yield from m.parameters()

    def modules(self) -> Iterator[nn.Module]:
        """Sub-modules holding trainable parameters (moved to the stage's device)."""
        return iter(())

    def to(self, device: torch.device) -> Compressor:
        """Move parameters/state to ``device``. Default moves ``modules()``."""
        for m in self.modules():
            m.to(device)
        return self

    def bind(self, features: Mapping[str, Any]) -> None:
        """Receive the model features named in ``requires`` (e.g. the residual subspace)."""

    def reduce(
        self, x: Tensor, info: TensorInfo, all_reduce: AllReduce
    ) -> Tensor | torch.futures.Future[Tensor] | None:
        """Optional custom data-parallel reduction of one gradient bucket ``x`` (1-D).

        ``info.segments`` gives the per-parameter layout of the bucket and ``info.replicas``
        the number of replicas (see :class:`TensorInfo`).

        ``all_reduce(t)`` sums ``t`` over the replicas *in place* and returns it (the runtime
        counts its bytes). Pass tensors you own (built for the wire), or ``x`` itself: the
        bucket is yours to overwrite. ``all_reduce(t, async_op=True)`` launches the sum and
        returns a :class:`torch.futures.Future` whose value is the summed ``t`` (bytes are
        counted at launch). Chain later rounds with :func:`chain` (``compressors.chain``; unlike
        ``fut.then`` it hands an exception on unwrapped) so they overlap the rest of the backward; launch collectives only from ``reduce`` itself or from callbacks of
        your own futures (the runtime issues each bucket's collectives after the previous
        bucket's, in the order you launch them, so every replica issues them in the same order).

        Return the *mean* gradient (shape ``info.shape``, dtype ``info.dtype``; writing it into
        ``x`` and returning ``x`` avoids a copy), a Future of it, or None to use the runtime's
        default (all-reduce of payloads when ``linear``, else all-gather of payloads,
        decompress each, average). Multi-round schemes such as PowerSGD's (all-reduce P,
        then Q) implement this.
        """
        return None

    def reset(self) -> None:
        """Forget all state (called between independent runs)."""

    def state_nbytes(self) -> int:
        """Memory held as state (for reporting; 0 for stateless compressors)."""
        return 0

    def stats(self) -> Mapping[str, float]:
        """Counters to report, summed over this process's instances into the record's
        ``compressor_stats`` (e.g. AQ-SGD's rows sent as deltas vs in full). Default: none."""
        return {}

    def __repr__(self) -> str:
        return self.spec or f"{type(self).__name__}()"


def did_you_mean(name: object, valid: Iterable[str]) -> str:
    """`` (did you mean 'topk'?)`` for the closest valid name (difflib), or ``""`` when none is close."""
    import difflib

    close = difflib.get_close_matches(str(name), list(valid), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""
