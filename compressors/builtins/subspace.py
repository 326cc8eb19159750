"""Subspace projection of the residual stream (Ramasinghe et al. 2025, "Protocol Models:
Scaling Decentralized Training with Communication-Efficient Model Parallelism").

The model cooperates: every write into the residual stream of its transformer (token
embeddings, attention and MLP output projections) is constrained to span a fixed
orthonormal basis ``B`` (d, k), shared by seed, except for a fixed token-embedding term
``T(tokens)``. The residual stream at any boundary is then exactly
``x = T(tokens) + B c`` with ``c`` (B, T, k), so sending ``c`` loses nothing.

- Activation: send ``c = (x - T(batch_input)) @ B`` (B, T, k); the receiver reconstructs
  ``c @ B.T + T(batch_input)`` (``batch_input`` is available to every stage, so ``T`` costs
  no traffic). Exact when ``x`` lies in the subspace, i.e. when the model is constrained.
- Activation gradient: send ``g @ B`` and reconstruct ``P g = (g @ B) @ B.T``. This is exact
  for everything upstream: upstream parameters reach ``x`` only through ``B c`` (``T`` is
  fixed), so by the chain rule they see ``dL/dc = B.T g``, and ``B.T P g = B.T B B.T g =
  B.T g`` because ``B.T B = I``. The component of ``g`` outside the subspace would be
  multiplied by zero anyway.

It declares ``requires = {"residual_subspace"}``: a task that cannot constrain its model is
refused before training. The runtime calls ``bind(features)`` with
``features["residual_subspace"]``, an object with (see :class:`ResidualSubspace`)

- ``basis``: (d, k) float32 tensor with orthonormal columns,
- ``token_term(batch_input) -> (B, T, d)``: the fixed token-embedding term.

Payload: ``(coords,)`` in the input dtype, k/d of the raw bytes. Compute is in fp32.
"""

from __future__ import annotations

from typing import Any, Mapping, Protocol, runtime_checkable

import torch
from torch import Tensor

from ..api import Compressor, CompressorError, Payload, TensorInfo, TensorRole
from ..registry import check_range, register
from ._common import require_finite

__all__ = ["SubspaceProjection", "ResidualSubspace", "FEATURE"]

FEATURE = "residual_subspace"


@runtime_checkable
class ResidualSubspace(Protocol):
    """What a task provides as ``model_features()["residual_subspace"]``."""

    basis: Tensor  # (d, k) float32, orthonormal columns

    def token_term(self, batch_input: Tensor) -> Tensor:
        """The fixed token-embedding term for ``batch_input`` (e.g. token ids (B, T)) -> (B, T, d)."""
        ...


@register("subspace")
class SubspaceProjection(Compressor):
    """Subspace projection (Ramasinghe et al. 2025, Protocol Models): send k coordinates in a fixed basis.

    ``ratio``: k / d, the fraction of the residual stream's width that is sent (``ratio=0.01``:
    about 100x, the high end Protocol Models reports). The task builds its model for that
    rank (``feature_options = {"residual_subspace": {"ratio": ratio}}``; shakespeare uses
    ``k = round(ratio * d)``, at least 1); default: the task's own rank (d / 8 for shakespeare).
    The basis and the token term come from the task through ``bind``.
    """

    roles = frozenset({TensorRole.ACTIVATION, TensorRole.ACTIVATION_GRAD})
    requires = frozenset({FEATURE})

    def __init__(self, ratio: float | None = None) -> None:
        self.ratio = None if ratio is None else check_range("subspace", "ratio", ratio, 1e-4, 1.0)
        self.feature_options = {} if self.ratio is None else {FEATURE: {"ratio": self.ratio}}
        self._feature: Any = None
        self._basis: Tensor | None = None  # (d, k) fp32 on the last device used

    def bind(self, features: Mapping[str, Any]) -> None:
        if FEATURE not in features:
            raise CompressorError(
                f"subspace: the task provides no {FEATURE!r} feature (it has: {', '.join(sorted(features)) or 'none'}); "
                "use a task whose model is constrained to a residual subspace (e.g. shakespeare)"
            )
        feat = features[FEATURE]
        basis = getattr(feat, "basis", None)
        if not isinstance(basis, Tensor) or basis.dim() != 2 or not callable(getattr(feat, "token_term", None)):
            raise CompressorError(
                f"subspace: feature {FEATURE!r} must have .basis, a (d, k) tensor, and .token_term(batch_input); "
                f"got {type(feat).__name__}"
            )
        d, k = basis.shape
        if not 0 < k <= d:
            raise CompressorError(f"subspace: basis must be (d, k) with 0 < k <= d, got {tuple(basis.shape)}")
        self._feature = feat
        self._basis = basis.detach().float()

    def to(self, device: torch.device) -> Compressor:
        if self._basis is not None:
            self._basis = self._basis.to(device)
        return self

    def _basis_for(self, d_in: int, device: torch.device, info: TensorInfo) -> Tensor:
        if self._basis is None:
            raise CompressorError(
                f"subspace: used at {info.role.value} boundary {info.boundary} before bind(); the runtime must "
                f"call bind(task.model_features()) with a {FEATURE!r} feature (requires={{'{FEATURE}'}})"
            )
        d = self._basis.shape[0]
        if d_in != d:
            raise CompressorError(
                f"subspace: tensor of shape {tuple(info.shape)} at boundary {info.boundary} does not end in the "
                f"subspace's model dim {d}"
            )
        if self._basis.device != device:
            self._basis = self._basis.to(device)
        return self._basis

    def _token_term(self, info: TensorInfo, device: torch.device) -> Tensor:
        if info.batch_input is None:
            raise CompressorError(
                f"subspace: info.batch_input is None at boundary {info.boundary}; the token-embedding term needs "
                "the micro-batch's token ids"
            )
        with torch.no_grad():
            return self._feature.token_term(info.batch_input.to(device)).float()

    def compress(self, x: Tensor, info: TensorInfo) -> Payload:
        basis = self._basis_for(x.shape[-1] if x.dim() else 0, x.device, info)
        require_finite(x, info, "subspace")
        xf = x.detach().float()
        if info.role == TensorRole.ACTIVATION:
            xf = xf - self._token_term(info, x.device).reshape(xf.shape)
        return ((xf @ basis).to(x.dtype).contiguous(),)  # (..., k)

    def decompress(self, payload: Payload, info: TensorInfo) -> Tensor:
        (coords,) = payload
        basis = self._basis_for(info.shape[-1] if len(info.shape) else 0, coords.device, info)
        out = coords.float() @ basis.T  # (..., d)
        if info.role == TensorRole.ACTIVATION:
            out = out + self._token_term(info, coords.device).reshape(out.shape)
        return out.to(info.dtype).reshape(info.shape)
