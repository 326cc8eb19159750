"""Error-feedback wrappers: ``ef`` (residual memory) and ``ef21`` (compress the difference).

Both wrap ANY compressor given as a nested spec, e.g. ``ef(topk(ratio=0.1))`` or
``ef21(quant(bits=2))``, and keep fp32 state per instance (= per (boundary, role), per side).

- ``ef``: error feedback / error compensation (Seide et al. 2014, "1-Bit Stochastic Gradient
  Descent and its Application to Data-Parallel Distributed Training of Speech DNNs";
  Karimireddy et al. 2019, "Error Feedback Fixes SignSGD and other Gradient Compression
  Schemes"). The sender keeps the residual ``e`` of what compression dropped and adds it to
  the next tensor: send ``C(x + e)``, then ``e = x + e - D(C(x + e))``. The receiver just
  decodes, so the running sum of decoded tensors tracks the running sum of inputs.
- ``ef21``: EF21 (Richtárik, Sokolov and Fatkhullin 2021, "EF21: A New, Simpler,
  Theoretically Better, and Practically Faster Error Feedback"). Both sides keep a running
  estimate ``g``; the sender sends ``c = C(x - g)``, both update ``g += D(c)`` and the output
  is ``g``. The sender recomputes ``D(c)`` from its own payload, so no extra traffic.

State keying (``memory``). Weight gradients keep one state per DDP bucket instance.
Activations and activation gradients can keep it two ways:

- ``memory=sample``: one residual / estimate per training sample, keyed by
  ``info.sample_ids`` (as AQ-SGD keeps its buffers, Wang et al. 2022), stored in a sparse
  memory-mapped file like AQ-SGD's (``aqsgd.RowStore``, fp32 rows). A sample's residual
  comes back when that sample is visited again, so every input is corrected only with
  what was dropped from *itself*.
- ``memory=microbatch``: one state per micro-batch index: the residual of micro-batch
  ``m`` is added to micro-batch ``m`` of the next step, which holds other samples. This is
  the reference code's form (one buffer of the batch's shape per boundary and direction;
  Rudakov et al. 2023, "Activations and Gradients Compression for Model-Parallel Training",
  arXiv:2401.07788, whose published EF runs error-feed the backward gradients only: its
  forward residual code is commented out).
- ``memory=auto`` (default): ``sample`` for activations, ``microbatch`` for activation
  gradients. Why: with micro-batch memory the forward pass feeds each sample leftovers of
  other samples' activations, so training sees inputs evaluation never sees (and BatchNorm
  learns its running statistics on them); ``ef(topk(ratio=0.1))`` then trained the
  CIFAR-10 ResNet to chance accuracy on every seed (docs/tasks.md). A gradient residual,
  in contrast, only has to reach the weights eventually: carrying it to the next
  micro-batch returns it one step later, while per-sample memory would return it only at
  the sample's next visit (an epoch later). Calls without ``sample_ids`` fall back to
  ``microbatch``.

A state whose shape no longer matches (e.g. a smaller last micro-batch) is dropped and
restarted from zero; per-sample memory restarts when the per-sample shape changes.
Per-sample memory costs one fp32 row per training sample per (boundary, role, side) on
disk (sparse; in the page cache while used): plan for it on the full data sets.

Evaluation (``info.training`` False) sends plain ``C(x)`` on both sides and touches no state:
evaluation samples have no memory, so the compressed evaluation measures the inner
compressor on a model trained with feedback (the uncompressed evaluation, also recorded,
measures the model alone).

How the sender knows ``D(C(y))``: the wrapper keeps a *mirror* copy of the inner compressor
(a deepcopy taken at construction, before any state exists) on which the sender calls
``decompress`` with exactly the payloads the receiver sees, so even a stateful inner
compressor's mirror follows the receiver's state. Learned (differentiable) inner
compressors are refused: error feedback needs a fixed code.

Data parallel (weight gradients): ``ef`` is ``linear`` iff the inner compressor is (its
decompress is the inner one) and delegates a custom ``reduce`` (PowerSGD) with the residual
taken against the averaged result, as in Vogels et al. 2019. ``ef21`` is never linear; in the
default all-gather path the receiver decodes each replica's payload as ``g + D(c_j)`` so the
runtime's average equals ``g + mean_j D(c_j)``, EF21's master update; the sum of the step's
``D(c_j)`` is folded into ``g`` (divided by their count) when the next step arrives.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

import torch
from torch import Tensor, nn
from torch.futures import Future

from ..api import AllReduce, Compressor, CompressorError, Payload, TensorInfo, TensorRole, chain
from ..registry import check_choice, register
from ._common import require_finite
from .aqsgd import SampleMemory

__all__ = ["ErrorFeedback", "EF21", "MEMORIES", "SampleMemory"]

MEMORIES = ("auto", "sample", "microbatch")
_HINT = " (or use memory=microbatch)"


class _Wrapper(Compressor):
    """Shared plumbing: validate and hold the inner compressor and its mirror."""

    inner: Compressor  # always set: a wrapper without its inner compressor is refused at build

    def __init__(self, inner: Compressor, memory: str = "auto") -> None:
        self.memory = check_choice(type(self).name, "memory", memory, MEMORIES)
        self._rows = SampleMemory()  # per-sample states (memory=sample / auto for activations)
        if not isinstance(inner, Compressor):
            raise CompressorError(
                f"{type(self).__name__}: parameter inner must be a compressor spec such as topk(ratio=0.1), "
                f"got {inner!r}"
            )
        if inner.differentiable:
            raise CompressorError(
                f"{self._label()}: cannot wrap the learned (differentiable) compressor {inner!r}; "
                "error feedback needs a fixed code: wrap quant/topk/randk/powersgd/... instead"
            )
        self.inner = inner
        self._mirror = copy.deepcopy(inner)  # sender-side decoder that follows the receiver's state
        self.roles = inner.roles  # type: ignore[misc]  # per instance: a wrapper supports what it wraps
        self.requires = inner.requires  # type: ignore[misc]

    def _label(self) -> str:
        return self.spec or type(self).name

    # the inner compressor's hooks, forwarded to both copies
    def modules(self) -> Iterator[nn.Module]:
        return iter(())  # a fixed inner code has no trainable modules (differentiable is refused)

    def to(self, device: torch.device) -> Compressor:
        self.inner.to(device)
        self._mirror.to(device)
        for states in self._state_dicts():
            for key, st in list(states.items()):
                states[key] = st.to(device)
        return self

    def bind(self, features: Mapping[str, Any]) -> None:
        self.inner.bind(features)
        self._mirror.bind(features)

    def reset(self) -> None:
        for states in self._state_dicts():
            states.clear()
        self._rows.reset()
        self.inner.reset()
        self._mirror.reset()

    def state_nbytes(self) -> int:
        own = sum(st.nbytes() for states in self._state_dicts() for st in states.values()) + self._rows.nbytes()
        return own + self.inner.state_nbytes() + self._mirror.state_nbytes()

    def _per_sample(self, info: TensorInfo) -> bool:
        """Whether this call keeps its state per sample id (see ``memory`` in the module docstring)."""
        if not info.training or info.sample_ids is None or info.role == TensorRole.WEIGHT_GRAD:
            return False
        if self.memory == "auto":
            return info.role == TensorRole.ACTIVATION
        return self.memory == "sample"

    def _state_dicts(self) -> list[dict]:
        """The per-key state dicts this wrapper keeps (moved, cleared and counted above)."""
        raise NotImplementedError


@dataclass
class _Residual:
    e: Tensor  # fp32, shape of x

    def nbytes(self) -> int:
        return self.e.numel() * self.e.element_size()

    def to(self, device: torch.device) -> _Residual:
        return _Residual(self.e.to(device))


@register("ef")
class ErrorFeedback(_Wrapper):
    """Error feedback (Seide et al. 2014; Karimireddy et al. 2019): send C(x + e), keep e = x + e - D(C(x + e)).

    Parameters:
        inner: the compressor to wrap, as a nested spec: ``ef(topk(ratio=0.1))``.
        memory: auto (per sample for activations, per micro-batch for activation
            gradients), sample or microbatch; see the module docstring.
    """

    def __new__(cls, inner: Compressor | None = None, memory: str = "auto") -> ErrorFeedback:
        # The runtime picks the data-parallel path from whether the *class* overrides reduce,
        # so only wrappers of a compressor with its own reduce (PowerSGD) get one.
        if cls is ErrorFeedback and isinstance(inner, Compressor) and _has_reduce(inner):
            cls = _ErrorFeedbackReduce
        return super().__new__(cls)

    def __init__(self, inner: Compressor, memory: str = "auto") -> None:
        super().__init__(inner, memory)
        self.linear = inner.linear  # type: ignore[misc]  # decompress is the inner one
        self._residuals: dict[int, _Residual] = {}

    def _state_dicts(self) -> list[dict]:
        return [self._residuals]

    def _residual(self, x: Tensor, info: TensorInfo) -> Tensor | None:
        st = self._residuals.get(info.microbatch)
        if st is None or st.e.shape != x.shape:
            return None
        return st.e.to(x.device)

    def compress(self, x: Tensor, info: TensorInfo) -> Payload:
        require_finite(x, info, self._label())
        x = x.detach()
        if not info.training:
            return self.inner.compress(x, info)
        if self._per_sample(info):
            ids = SampleMemory.ids(info, x.shape[0], self._label(), _HINT)
            y = x.float() + self._rows.read(ids, x)  # (B, ...) fp32: unseen samples add zeros
        else:
            e = self._residual(x, info)
            y = x.float() if e is None else x.float() + e  # fp32 so the residual keeps small values
        payload = self.inner.compress(y.to(x.dtype), info)
        # e_new = (x + e) - D(C(x + e)); the cast of y to x.dtype is part of the error too.
        decoded = self._mirror.decompress(tuple(t.detach() for t in payload), info)
        if self._per_sample(info):
            self._rows.write(ids, y - decoded.detach().float())
        else:
            self._residuals[info.microbatch] = _Residual(y - decoded.detach().float())
        return payload

    def decompress(self, payload: Payload, info: TensorInfo) -> Tensor:
        return self.inner.decompress(payload, info)


def _has_reduce(c: Compressor) -> bool:
    return type(c).reduce is not Compressor.reduce


class _ErrorFeedbackReduce(ErrorFeedback):
    """``ef`` around a compressor with a custom data-parallel ``reduce`` (built by ``ef(...)``)."""

    def reduce(self, x: Tensor, info: TensorInfo, all_reduce: AllReduce) -> Tensor | Future | None:
        """Reduce ``x + e`` with the inner scheme; the residual is taken against the averaged
        result (as PowerSGD's own error feedback does), so every replica keeps what the mean lost.
        (``powersgd`` has its own error feedback, on by default: ``ef(powersgd)`` adds a second.)"""
        require_finite(x, info, self._label())
        x = x.detach()
        e = self._residual(x, info) if info.training else None
        y = x.float() if e is None else x.float() + e
        # the inner reduce may overwrite its input: hand it a tensor of its own
        out = self.inner.reduce(y.to(x.dtype, copy=True), info, all_reduce)
        if out is None or not info.training:
            return out

        def keep(mean: Tensor) -> Tensor:
            self._residuals[info.microbatch] = _Residual(y - mean.detach().float())
            return mean

        return chain(out, keep) if isinstance(out, Future) else keep(out)


@dataclass
class _Estimate:
    g: Tensor  # fp32 running estimate, shape of x
    step: int = 0  # step whose decoded deltas are pending (receiver only)
    pending: Tensor | None = None  # sum of decoded deltas of that step not yet folded into g
    count: int = 0  # how many payloads that sum holds (dp replicas)

    def nbytes(self) -> int:
        n = self.g.numel() * self.g.element_size()
        return n + (0 if self.pending is None else self.pending.numel() * self.pending.element_size())

    def to(self, device: torch.device) -> _Estimate:
        pending = None if self.pending is None else self.pending.to(device)
        return _Estimate(self.g.to(device), self.step, pending, self.count)

    def fold(self) -> None:
        """Finish the pending step: g += mean of its decoded deltas (exact when one sender)."""
        if self.pending is not None:
            self.g = self.g + (self.pending if self.count == 1 else self.pending / self.count)
            self.pending, self.count = None, 0


@register("ef21")
class EF21(_Wrapper):
    """EF21 (Richtárik et al. 2021): both sides keep g; send c = C(x - g); g += D(c); output g.

    With per-sample memory (the default for activations) g is the receiver's last
    reconstruction of the same sample, as in AQ-SGD with C in place of quantization; a
    sample's first visit sends C(x).

    Parameters:
        inner: the compressor to wrap, as a nested spec: ``ef21(topk(ratio=0.1))``.
        memory: auto (per sample for activations, per micro-batch for activation
            gradients), sample or microbatch; see the module docstring.
    """

    linear = False  # the output carries the running estimate g: not a sum of payloads

    def __init__(self, inner: Compressor, memory: str = "auto") -> None:
        super().__init__(inner, memory)
        self._rows_received = SampleMemory()  # receiver side of per-sample estimates
        # Sender and receiver estimates are kept apart: the data-parallel hook uses ONE
        # instance per bucket to compress its own gradient (g_i) and decode every replica's
        # payload (the master estimate g).
        self._sent: dict[int, _Estimate] = {}
        self._received: dict[int, _Estimate] = {}

    def _state_dicts(self) -> list[dict]:
        return [self._sent, self._received]

    def reset(self) -> None:
        super().reset()
        self._rows_received.reset()

    def state_nbytes(self) -> int:
        return super().state_nbytes() + self._rows_received.nbytes()

    @staticmethod
    def _estimate(states: dict[int, _Estimate], shape: torch.Size, device: torch.device, key: int) -> _Estimate:
        st = states.get(key)
        if st is None or st.g.shape != shape:
            st = states[key] = _Estimate(torch.zeros(shape, dtype=torch.float32, device=device))
        elif st.g.device != device:
            st = states[key] = st.to(device)
        return st

    def sender_estimate(self, microbatch: int = 0) -> Tensor | None:
        """The sender's running estimate g of micro-batch ``microbatch`` (None if none yet)."""
        st = self._sent.get(microbatch)
        return None if st is None else st.g

    def receiver_estimate(self, microbatch: int = 0) -> Tensor | None:
        """The receiver's running estimate g (pending payloads of the last step folded in)."""
        st = self._received.get(microbatch)
        if st is None:
            return None
        st.fold()
        return st.g

    def compress(self, x: Tensor, info: TensorInfo) -> Payload:
        require_finite(x, info, self._label())
        x = x.detach()
        if not info.training:
            return self.inner.compress(x, info)
        if self._per_sample(info):
            ids = SampleMemory.ids(info, x.shape[0], self._label(), _HINT)
            g = self._rows.read(ids, x)  # (B, ...) fp32, zeros on a first visit
            payload = self.inner.compress((x.float() - g).to(x.dtype), info)
            decoded = self._mirror.decompress(tuple(t.detach() for t in payload), info)
            self._rows.write(ids, g + decoded.detach().float())  # what the receiver reconstructs
            return payload
        st = self._estimate(self._sent, x.shape, x.device, info.microbatch)
        payload = self.inner.compress((x.float() - st.g).to(x.dtype), info)
        decoded = self._mirror.decompress(tuple(t.detach() for t in payload), info)
        st.g = st.g + decoded.detach().float()  # the receiver adds exactly the same D(c)
        return payload

    def decompress(self, payload: Payload, info: TensorInfo) -> Tensor:
        decoded = self.inner.decompress(payload, info).detach().float()
        if not info.training:
            return decoded.to(info.dtype)
        if self._per_sample(info):
            ids = SampleMemory.ids(info, decoded.shape[0], self._label(), _HINT)
            out = self._rows_received.read(ids, decoded) + decoded
            self._rows_received.write(ids, out)
            return out.to(info.dtype)
        st = self._estimate(self._received, decoded.shape, decoded.device, info.microbatch)
        if st.step != info.step:
            st.fold()  # a new step: the previous step's payloads have all been seen
        out = st.g + decoded
        st.pending = decoded if st.pending is None else st.pending + decoded
        st.count += 1
        st.step = info.step
        return out.to(info.dtype)
