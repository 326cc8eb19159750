"""PowerSGD low-rank compression (Vogels et al. 2019, "PowerSGD: Practical Low-Rank
Gradient Compression for Distributed Optimization")."""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch import Tensor

from ..api import Compressor, CompressorError, Payload, TensorInfo, check_finite
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
    Data parallel: :meth:`reduce` runs the paper's two all-reduce rounds (P, then Q).
    """

    fixed_size = True  # payload layout follows from the input shape (one message per payload)

    def __init__(self, rank: int = 4, warm_start: bool = True):
        self.rank = check_range("powersgd", "rank", rank, 1, 1024, integer=True)
        if not isinstance(warm_start, bool):
            raise CompressorError(f"powersgd: parameter warm_start={warm_start!r} must be true or false")
        self.warm_start = warm_start
        self._q: dict[tuple[int, int, int], Tensor] = {}  # (microbatch, n, m) -> Q (m, r) fp32

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

    def reduce(self, x: Tensor, info: TensorInfo, all_reduce: Callable[[Tensor], Tensor]) -> Tensor | None:
        """Data-parallel PowerSGD: ``P = orth(sum_i M_i Q)``, ``Q = mean_i M_i^T P``, return ``P Q^T``.

        Every replica starts from the same ``Q`` (same seed, then the same all-reduced Q),
        so the result is ``P P^T mean_i(M_i)`` on all of them. Two all-reduces of
        ``(n + 1) * r`` and ``m * r`` values; the replica count rides along in round one as
        one extra value (all-reduce returns sums, the mean needs the count).
        """
        if x.numel() == 0:
            return torch.zeros_like(x)
        wire = x.dtype if x.dtype.is_floating_point else torch.float32
        m, nm = self._matrix(x, info)
        q0 = self._initial_q(info, nm, x.device)  # (m, r), identical on every replica
        p_local = m @ q0  # (n, r)
        r = p_local.shape[1]
        one = torch.ones(1, dtype=wire, device=x.device)
        summed = all_reduce(torch.cat([p_local.to(wire).reshape(-1), one])).float()
        # checked after the sum, so a NaN on any replica makes every replica raise (no hang)
        if not bool(torch.isfinite(summed).all()):
            check_finite(x, info, self.name)  # names the local tensor if it is the culprit
            raise CompressorError(
                f"powersgd: all-reduced P of bucket {info.boundary} at step {info.step} is non-finite "
                "(NaN/Inf gradient on another replica, or overflow); refusing to reduce"
            )
        replicas = summed[-1]
        p = _orthonormalize(summed[:-1].view(nm[0], r))
        q = all_reduce((m.T @ p).to(wire)).float() / replicas  # (m, r) mean
        self._keep_q(info, nm, q, q0)
        return (p @ q.T).reshape(-1)[: x.numel()].reshape(x.shape).to(x.dtype)

    def reset(self) -> None:
        self._q.clear()

    def state_nbytes(self) -> int:
        return sum(q.numel() * q.element_size() for q in self._q.values())
