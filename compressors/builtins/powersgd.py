"""PowerSGD low-rank compression (Vogels et al. 2019, "PowerSGD: Practical Low-Rank
Gradient Compression for Distributed Optimization")."""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
from torch import Tensor
from torch.futures import Future

from ..api import AllReduce, Compressor, CompressorError, Payload, TensorInfo, chain, check_finite, completed
from ..registry import check_range, register
from ._common import matrix_shape, require_finite

__all__ = ["PowerSGD", "powersgd_matrix_shape"]

_SALT_INIT_Q = 0x50


def powersgd_matrix_shape(shape: torch.Size | tuple[int, ...]) -> tuple[int, int]:
    """The ``(n, m)`` matrix a tensor of ``shape`` is approximated as.

    rank >= 2: :func:`matrix_shape` (``(B*T, d)`` tokens x features for ``(B, T, d)``;
    ``(B*C, H*W)`` sample-channel planes x pixels for ``(B, C, H, W)``; both pure views).
    rank <= 1 (a flat DDP bucket of ``N`` values): the nearly square ``(ceil(N / c), c)``
    with ``c = ceil(sqrt(N))``, zero padded, as a vector has no rank structure of its own.
    """
    if len(shape) >= 2:
        return matrix_shape(shape)
    n = math.prod(shape)
    cols = max(1, math.isqrt(max(n - 1, 0)) + 1)  # ceil(sqrt(n))
    return max(1, -(-n // cols)), cols


def _as_matrix(x: Tensor, nm: tuple[int, int]) -> Tensor:
    flat = x.reshape(-1)
    pad = nm[0] * nm[1] - flat.numel()
    if pad:
        flat = torch.nn.functional.pad(flat, (0, pad))
    return flat.view(nm)


def _orthonormalize(p: Tensor) -> Tensor:
    """Orthonormal basis of the columns of ``p`` (n, r) via reduced QR (stabler than
    the paper's Gram-Schmidt). A zero column yields some unit column instead of NaN."""
    return torch.linalg.qr(p, mode="reduced").Q


def _orthonormalize_(p: Tensor) -> None:
    """:func:`_orthonormalize` in place (QR in fp32 for half-precision ``p``)."""
    p.copy_(_orthonormalize(p if p.dtype in (torch.float32, torch.float64) else p.float()))


def _views(flat: Tensor, shapes: Sequence[tuple[int, int]]) -> list[Tensor]:
    """Consecutive matrix views of a flat buffer."""
    out, off = [], 0
    for n, m in shapes:
        out.append(flat[off : off + n * m].view(n, m))
        off += n * m
    return out


def _accepts_async(fn: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "async_op" or p.kind is p.VAR_KEYWORD for p in params)


class _Launch:
    """Launch one all-reduce as a Future: asynchronously when ``all_reduce`` takes
    ``async_op``, else run it now (a plugin's or a test's plain summing function)."""

    def __init__(self, all_reduce: AllReduce) -> None:
        self.fn = all_reduce
        self.synchronous = not _accepts_async(all_reduce)

    def __call__(self, t: Tensor) -> Future:
        if self.synchronous:
            return completed(self.fn(t))
        r = self.fn(t, async_op=True)
        return r if isinstance(r, Future) else completed(r)


@dataclass(frozen=True)
class _Layout:
    """Where a bucket's compressed matrices and uncompressed ranges lie."""

    segments: tuple[torch.Size, ...]
    mats: tuple[tuple[int, int, int, int], ...]  # (offset, n, m, r) of each compressed matrix
    plain: tuple[tuple[int, int], ...]  # (offset, count) of the uncompressed ranges (adjacent ones merged)

    @property
    def p_shapes(self) -> list[tuple[int, int]]:
        return [(n, r) for _, n, _, r in self.mats]

    @property
    def m_shapes(self) -> list[tuple[int, int]]:
        return [(n, m) for _, n, m, _ in self.mats]

    @property
    def q_shapes(self) -> list[tuple[int, int]]:
        return [(m, r) for _, _, m, r in self.mats]

    @property
    def e_size(self) -> int:
        return sum(n * m for _, n, m, _ in self.mats)

    @property
    def p_size(self) -> int:
        return sum(n * r for _, n, _, r in self.mats)

    @property
    def q_size(self) -> int:
        return sum(m * r for _, _, m, r in self.mats)


@dataclass
class _DPState:
    """One bucket's data-parallel state on one replica."""

    layout: _Layout
    dtype: torch.dtype
    device: torch.device
    q: Tensor | None = None  # flat mean Q's of the last step (warm start)
    e: Tensor | None = field(default=None, repr=False)  # flat residuals of the compressed matrices


@register("powersgd")
class PowerSGD(Compressor):
    """PowerSGD (Vogels et al. 2019): rank-r approximation P Q^T by one power-iteration step.

    The tensor is viewed as a matrix ``M`` (n, m) (see :func:`powersgd_matrix_shape`), then
    ``P = orth(M Q)``, ``Q = M^T P``, and ``P Q^T`` is the projection of ``M`` on span(P).
    With ``warm_start`` the sender keeps ``Q`` between calls (one state per micro-batch
    index and matrix shape, within this instance's (boundary, role)), so repeated calls on
    slowly changing tensors converge to the best rank-r approximation. The first ``Q`` is
    Gaussian from ``info.seed`` (drawn on CPU, so identical on every device).
    The effective rank is ``min(rank, n, m)``.

    Payload: ``(P (n, r), Q (m, r))`` in the input's floating dtype; the receiver is stateless.

    Data parallel (:meth:`reduce`): the paper's scheme per parameter matrix of a DDP bucket,
    with error feedback and warm start, as torch's ``powerSGD_hook``: P's all-reduced in one
    batch, then Q's, vectors uncompressed, asynchronous.

    Parameters:
        rank: the approximation rank r.
        warm_start: reuse the last ``Q`` (pipeline boundaries: per micro-batch index and
            shape; data parallel: per parameter matrix of the bucket).
        error_feedback: data parallel only: carry each replica's residual to the next step.
        min_compression_rate: data parallel only: a matrix (n, m) is compressed when
            ``(n + m) * r * min_compression_rate < n * m`` (torch's rule and default), else
            all-reduced uncompressed with the vectors.
    """

    fixed_size = True  # payload layout follows from the input shape (one message per payload)

    def __init__(
        self, rank: int = 4, warm_start: bool = True, error_feedback: bool = True, min_compression_rate: float = 2.0
    ):
        self.rank = check_range("powersgd", "rank", rank, 1, 1024, integer=True)
        for pname, value in (("warm_start", warm_start), ("error_feedback", error_feedback)):
            if not isinstance(value, bool):
                raise CompressorError(f"powersgd: parameter {pname}={value!r} must be true or false")
        self.warm_start = warm_start
        self.error_feedback = error_feedback
        self.min_compression_rate = float(check_range("powersgd", "min_compression_rate", min_compression_rate, 0, 1e6))
        self._q: dict[tuple[int, int, int], Tensor] = {}  # (microbatch, n, m) -> Q (m, r) fp32
        self._dp: dict[int, _DPState] = {}  # bucket -> data-parallel state

    # --- shared power-iteration pieces ------------------------------------------------
    def _initial_q(self, info: TensorInfo, nm: tuple[int, int], device: torch.device) -> Tensor:
        key = (info.microbatch, *nm)
        q = self._q.get(key) if self.warm_start else None
        if q is None or q.device != device:
            r = min(self.rank, *nm)
            q = torch.randn(nm[1], r, generator=info.generator(_SALT_INIT_Q)).to(device)
        return q

    def _keep_q(self, info: TensorInfo, nm: tuple[int, int], q: Tensor, q_used: Tensor) -> None:
        if self.warm_start and info.training:
            # a zero tensor gives Q = 0, which would pin every later P to one fixed basis:
            # keep the previous Q then (chosen on device, no sync)
            self._q[(info.microbatch, *nm)] = torch.where((q != 0).any(), q, q_used)

    def _matrix(self, x: Tensor, info: TensorInfo) -> tuple[Tensor, tuple[int, int]]:
        nm = powersgd_matrix_shape(x.shape)
        m = _as_matrix(x.detach().float(), nm)  # (n, m) fp32
        return m, nm

    def compress(self, x: Tensor, info: TensorInfo) -> Payload:
        wire = x.dtype if x.dtype.is_floating_point else torch.float32
        if x.numel() == 0:
            empty = torch.empty(0, dtype=wire, device=x.device)
            return empty, empty
        m, nm = self._matrix(x, info)
        q0 = self._initial_q(info, nm, x.device)  # (m, r)
        p = m @ q0  # (n, r)
        require_finite(x, info, self.name, summary=p.sum())  # NaN/Inf anywhere in M reach M Q
        p = _orthonormalize(p)
        q = m.T @ p  # (m, r)
        self._keep_q(info, nm, q, q0)
        return p.to(wire).contiguous(), q.to(wire).contiguous()

    def decompress(self, payload: Payload, info: TensorInfo) -> Tensor:
        p, q = payload
        if info.numel == 0:
            return torch.zeros(info.shape, dtype=info.dtype, device=info.device)
        approx = (p.float() @ q.float().T).reshape(-1)[: info.numel]
        return approx.reshape(info.shape).to(info.dtype)

    # --- data parallel ------------------------------------------------------------------
    def reduce(self, x: Tensor, info: TensorInfo, all_reduce: AllReduce) -> Tensor | Future | None:
        """Data-parallel PowerSGD of one DDP bucket (Vogels et al. 2019, Algorithm 1 with error feedback).

        With ``info.segments`` (the parameters' gradients laid out in the bucket) every
        parameter matrix ``M`` (``ndim >= 2``; a conv weight as ``(out, in*kh*kw)``) worth
        compressing gets its own rank-r approximation: ``P = orth(sum_i M_i Q)``,
        ``Q = mean_i M_i^T P``, result ``P Q^T = P P^T mean_i(M_i)`` on every replica. Vectors
        and matrices that low rank would not shrink by ``min_compression_rate`` are
        all-reduced uncompressed (exact mean). Three all-reduces per bucket, each batched: the
        uncompressed values (launched first), all P's, then all Q's (counted bytes:
        ``(n + m) * r`` values per compressed matrix plus the uncompressed values). The mean
        divides by ``info.replicas``; when that is unknown, one extra all-reduce of a single
        value counts the replicas.

        Error feedback (``error_feedback``): each replica adds its residual of the previous
        step to the compressed matrices and keeps ``M_i + e_i - P Q^T`` (its local gradient
        minus what was applied). The uncompressed values' residual (local - mean) averages to
        zero over replicas, so it is not kept. Warm start keeps the all-reduced ``Q`` of each
        matrix for the next step (orthonormalized before use, as torch's hook does); the
        first ``Q`` is Gaussian from ``info.seed``, the same on every replica. State is per
        bucket layout; a different layout (DDP rebuilt its buckets) starts afresh.

        Asynchronous: with ``all_reduce(t, async_op=True)`` this returns a Future; the P and Q
        rounds run in its callbacks, overlapping the rest of the backward. The result is
        written into ``x`` (the bucket) in place. With a synchronous ``all_reduce`` the result
        tensor is returned.

        Without segments (a plain tensor): ``ndim >= 2`` is one matrix ``(shape[0], rest)``;
        a 1-D tensor is viewed as the nearly square zero-padded matrix of
        :func:`powersgd_matrix_shape`.
        """
        launch = _Launch(all_reduce)
        flat, segments, writeback = self._flat_view(x, info)
        fut = self._reduce_flat(flat, segments, info, launch)
        if writeback is not None:
            fut = chain(fut, writeback)
        if launch.synchronous:
            return fut.wait()
        return fut

    def _flat_view(self, x: Tensor, info: TensorInfo):
        """(flat 1-D buffer to reduce in place, its segments, a function of the reduced
        buffer returning the result in ``x``'s shape, or None when the buffer is ``x``)."""
        segments = info.segments
        if segments is not None and sum(math.prod(s) for s in segments) == x.numel() and x.is_contiguous():
            return (
                x.view(-1),
                tuple(torch.Size(s) for s in segments),
                (None if x.dim() == 1 else lambda f: f.view(x.shape)),
            )
        if x.dim() >= 2:
            flat = x.contiguous().view(-1)
            return flat, (x.shape,), lambda f: f.view(x.shape)
        nm = powersgd_matrix_shape(x.shape)
        padded = torch.zeros(nm[0] * nm[1], dtype=x.dtype, device=x.device)
        padded[: x.numel()] = x
        return padded, (torch.Size(nm),), lambda f: f[: x.numel()].view(x.shape)

    def _layout(self, segments: tuple[torch.Size, ...]) -> _Layout:
        mats, plain, off = [], [], 0
        for shape in segments:
            k = math.prod(shape)
            if len(shape) >= 2 and k:
                n, m = shape[0], k // shape[0]
                r = min(self.rank, n, m)
                if (n + m) * r * self.min_compression_rate < n * m:
                    mats.append((off, n, m, r))
                    off += k
                    continue
            if k:
                if plain and plain[-1][0] + plain[-1][1] == off:  # adjacent: one range
                    plain[-1] = (plain[-1][0], plain[-1][1] + k)
                else:
                    plain.append((off, k))
            off += k
        return _Layout(segments, tuple(mats), tuple(plain))

    def _reduce_flat(self, x: Tensor, segments: tuple[torch.Size, ...], info: TensorInfo, launch: _Launch) -> Future:
        st = self._dp.get(info.boundary)
        if st is None or st.layout.segments != segments or st.dtype != x.dtype or st.device != x.device:
            st = _DPState(self._layout(segments), x.dtype, x.device)
            if info.training:
                self._dp[info.boundary] = st
        lay = st.layout
        training = info.training
        ef = self.error_feedback and training
        mats = [x[o : o + n * m].view(n, m) for o, n, m, _ in lay.mats]
        if ef and st.e is not None:  # M_i + e_i
            for mv, ev in zip(mats, _views(st.e, lay.m_shapes)):
                mv.add_(ev)

        # uncompressed values: one all-reduce, launched first (it needs no computation)
        if not lay.plain:
            plain_fut = completed(None)
        elif len(lay.plain) == 1:  # one range of the bucket: reduced in place, no copy
            a, k = lay.plain[0]
            plain_fut = launch(x[a : a + k])
        else:
            plain_fut = launch(torch.cat([x[a : a + k] for a, k in lay.plain]))
        count_fut = launch(torch.ones(1, dtype=x.dtype, device=x.device)) if info.replicas is None else None

        if not mats:
            mats_fut = completed(None)
        else:
            q = self._start_q(st, lay, info, x)
            p = torch.empty(lay.p_size, dtype=x.dtype, device=x.device)
            for mv, qv, pv in zip(mats, _views(q, lay.q_shapes), _views(p, lay.p_shapes)):
                torch.mm(mv, qv, out=pv)  # P_i = M_i Q
            del q

            def round_q(psum: Tensor) -> Future:
                # checked after the sum, so a NaN on any replica makes every replica raise
                if not bool(torch.isfinite(psum).all()):
                    for mv in mats:  # untouched until the end: names the local matrix if it is the culprit
                        check_finite(mv, info, self.name)
                    raise CompressorError(
                        f"powersgd: all-reduced P of bucket {info.boundary} at step {info.step} is non-finite "
                        "(NaN/Inf gradient on another replica, or overflow); refusing to reduce"
                    )
                ps = _views(psum, lay.p_shapes)
                for pv in ps:
                    _orthonormalize_(pv)
                q_new = torch.empty(lay.q_size, dtype=x.dtype, device=x.device)
                for mv, pv, qv in zip(mats, ps, _views(q_new, lay.q_shapes)):
                    torch.mm(mv.T, pv, out=qv)  # Q_i = M_i^T P
                return chain(launch(q_new), lambda qsum: (psum, qsum))

            mats_fut = chain(launch(p), round_q)

        def finish(_: object) -> Tensor:
            replicas = info.replicas if count_fut is None else count_fut.value()
            if lay.plain:
                total = plain_fut.value()
                if not bool(torch.isfinite(total).all()):  # (summed in place: the local values are gone)
                    raise CompressorError(
                        f"powersgd: all-reduced uncompressed values of bucket {info.boundary} at step {info.step} "
                        "are non-finite (NaN/Inf gradient on this or another replica, or overflow); refusing to reduce"
                    )
                total.div_(replicas)
                if len(lay.plain) > 1 or total.data_ptr() != x[lay.plain[0][0] :].data_ptr():
                    off = 0
                    for a, k in lay.plain:
                        x[a : a + k].copy_(total[off : off + k])
                        off += k
            if mats:
                psum, qsum = mats_fut.value()
                qsum.div_(replicas)  # mean_i M_i^T P
                e = None
                if ef:
                    e = st.e if st.e is not None else torch.empty(lay.e_size, dtype=x.dtype, device=x.device)
                es = _views(e, lay.m_shapes) if e is not None else [None] * len(mats)
                for mv, pv, qv, ev in zip(mats, _views(psum, lay.p_shapes), _views(qsum, lay.q_shapes), es):
                    if ev is not None:
                        ev.copy_(mv)  # M_i + e_i
                    torch.mm(pv, qv.T, out=mv)  # P Q^T, in place in the bucket
                    if ev is not None:
                        ev.sub_(mv)  # e_i = M_i + e_i - P Q^T
                if training:
                    st.e = e
                    st.q = qsum if self.warm_start else None
            return x

        parts = [plain_fut, mats_fut] + ([count_fut] if count_fut is not None else [])
        return chain(torch.futures.collect_all(parts), finish)

    def _start_q(self, st: _DPState, lay: _Layout, info: TensorInfo, x: Tensor) -> Tensor:
        """The flat Q's of this step (orthonormalized): last step's mean Q's (warm start) or
        Gaussian from ``info.seed`` (identical on every replica)."""
        if self.warm_start and st.q is not None:
            q = st.q if info.training else st.q.clone()  # orthonormalized in place: not in evaluation
        else:
            q = torch.randn(lay.q_size, generator=info.generator(_SALT_INIT_Q)).to(device=x.device, dtype=x.dtype)
        for qv in _views(q, lay.q_shapes):
            _orthonormalize_(qv)
        return q

    def reset(self) -> None:
        self._q.clear()
        self._dp.clear()

    def state_nbytes(self) -> int:
        dp = [t for st in self._dp.values() for t in (st.q, st.e) if t is not None]
        return sum(t.numel() * t.element_size() for t in (*self._q.values(), *dp))
