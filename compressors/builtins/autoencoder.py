"""Learned linear autoencoder over the feature dimension (Bian et al. 2023, "Does
compressing activations help model parallel training?").

An encoder ``nn.Linear(d, k)`` on the sender maps every feature vector to ``k`` codes, a
decoder ``nn.Linear(k, d)`` on the receiver maps them back; both are trained jointly with
the model. The compressor is ``differentiable``: the runtime backpropagates through
``compress`` on the sender and ``decompress`` on the receiver, so the backward boundary
carries the gradient of the codes (B, ..., k), not of the activation, and the runtime
optimizes ``modules()``' parameters together with the stage's (the sender's encoder gets
gradients, the receiver's decoder gets gradients; each side's other half stays unused).

Feature dimension: the channel dim of 4-D (B, C, H, W) feature maps (a 1x1 convolution),
else the last dim (tokens (B, T, d), vectors (B, d)). ``k = dim`` if given (must be < d),
else ``round(ratio * d)`` clamped to [1, d]: a feature dim too narrow for the ratio is sent
at full width. ``d`` is only known from the first tensor: the two ``nn.Linear`` exist from
construction (so an optimizer can hold them) and are resized in place on first use,
keeping the same ``nn.Parameter`` objects.

Initialization is identical on both sides without global RNG: from ``seed`` (a spec
parameter, default 0) the encoder gets random orthonormal rows ``W`` (k, d) and the decoder
``W.T``, so the untrained pair is an orthogonal projection onto a random k-dim subspace;
biases start at zero.

Payload: ``(codes,)`` in the input dtype, k/d of the raw bytes; it carries gradient.
"""

from __future__ import annotations

import warnings
from typing import Iterator

import torch
from torch import Tensor, nn

from ..api import Compressor, CompressorError, Payload, TensorInfo, TensorRole
from ..registry import check_range, register
from ._common import require_finite

__all__ = ["LinearAutoencoder"]


def _feature_dim(ndim: int) -> int:
    return 1 if ndim == 4 else ndim - 1


@register("ae")
class LinearAutoencoder(Compressor):
    """Learned linear autoencoder over the feature dim (Bian et al. 2023), trained with the model.

    Parameters:
        ratio: code size k as a fraction of the feature dim d (ignored when ``dim`` is set).
        dim: code size k; must be < d.
        seed: seed of the (identical) initialization of both sides.
    """

    # a learned code needs the loss's training signal: activations, at pipeline boundaries and in TP reductions
    roles = frozenset({TensorRole.ACTIVATION, TensorRole.TP_ACTIVATION})
    differentiable = True

    def __init__(self, ratio: float = 0.125, dim: int | None = None, seed: int = 0) -> None:
        self.ratio = check_range("ae", "ratio", ratio, 1e-6, 1.0)
        self.dim = None if dim is None else check_range("ae", "dim", dim, 1, 2**31, integer=True)
        self.seed = check_range("ae", "seed", seed, 0, 2**63 - 1, integer=True)
        # Placeholders of size 0; materialized (in place, same Parameter objects) on first use.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "initializing zero-element tensors is a no-op"
            self.encoder = nn.Linear(0, 0)
            self.decoder = nn.Linear(0, 0)
        self._d = 0

    # --- lazily sized modules ---------------------------------------------------------
    def modules(self) -> Iterator[nn.Module]:
        return iter((self.encoder, self.decoder))

    def _code_dim(self, d: int) -> int:
        if self.dim is None:  # a feature dim too narrow for the ratio (d <= 1/ratio) is not compressed
            return min(d, max(1, round(self.ratio * d)))
        if self.dim >= d:
            raise CompressorError(f"ae: code size dim={self.dim} must be smaller than the feature dim {d}")
        return self.dim

    def _materialize(self, d: int, device: torch.device, info: TensorInfo) -> None:
        if self._d == d:
            return
        if self._d:
            raise CompressorError(
                f"ae: feature dim changed from {self._d} to {d} at {info.role.value} boundary {info.boundary}; "
                "one ae instance serves one boundary of fixed width"
            )
        k = self._code_dim(d)
        g = torch.Generator(device="cpu").manual_seed(self.seed)
        q, _ = torch.linalg.qr(torch.randn(d, k, generator=g, dtype=torch.float64))  # (d, k) orthonormal
        w = q.T.float().contiguous()  # (k, d)
        with torch.no_grad():
            self.encoder.weight.data = w.to(device)
            self.encoder.bias.data = torch.zeros(k, device=device)
            self.decoder.weight.data = w.T.contiguous().to(device)
            self.decoder.bias.data = torch.zeros(d, device=device)
        self.encoder.in_features, self.encoder.out_features = d, k
        self.decoder.in_features, self.decoder.out_features = k, d
        self._d = d

    def reset(self) -> None:
        """Back to the seeded initialization (the sizes are kept)."""
        if self._d:
            d, dev = self._d, self.encoder.weight.device
            self._d = 0
            self._materialize(d, dev, TensorInfo(TensorRole.ACTIVATION, 0, 0, 0, torch.Size([d]), torch.float32, dev))

    def state_nbytes(self) -> int:
        return sum(p.numel() * p.element_size() for p in self.parameters())

    # --- codec --------------------------------------------------------------------------
    def compress(self, x: Tensor, info: TensorInfo) -> Payload:
        require_finite(x, info, "ae")
        if x.dim() == 0:
            raise CompressorError("ae: cannot compress a 0-d tensor (no feature dim)")
        fdim = _feature_dim(x.dim())
        self._materialize(x.shape[fdim], x.device, info)
        h = x.float().movedim(fdim, -1)  # (..., d)
        codes = self.encoder(h).movedim(-1, fdim)  # (B, k, H, W) or (..., k)
        return (codes.to(x.dtype).contiguous(),)

    def decompress(self, payload: Payload, info: TensorInfo) -> Tensor:
        (codes,) = payload
        fdim = _feature_dim(len(info.shape))
        self._materialize(info.shape[fdim], codes.device, info)
        out = self.decoder(codes.float().movedim(fdim, -1)).movedim(-1, fdim)
        return out.to(info.dtype).reshape(info.shape)
