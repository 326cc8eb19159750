"""Subspace projection: exact for a constrained residual stream, refuses to run unbound."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from torch import Tensor, nn

from compressors import CompressorError, TensorInfo, TensorRole, build, describe, payload_nbytes
from compressors.builtins.subspace import ResidualSubspace

D, K, VOCAB = 32, 6, 11


@dataclass
class FakeSubspace:
    """A stand-in for the task's feature: random orthonormal basis + a fixed token embedding."""

    basis: Tensor
    embed: nn.Embedding

    def token_term(self, batch_input: Tensor) -> Tensor:
        return self.embed(batch_input)


def _feature(seed: int = 0) -> FakeSubspace:
    g = torch.Generator().manual_seed(seed)
    basis, _ = torch.linalg.qr(torch.randn(D, K, generator=g))  # (D, K) orthonormal columns
    embed = nn.Embedding(VOCAB, D)
    with torch.no_grad():
        embed.weight.copy_(torch.randn(VOCAB, D, generator=g))
    return FakeSubspace(basis, embed.requires_grad_(False))


def _info(x, tokens, role=TensorRole.ACTIVATION):
    return TensorInfo(role, 0, 0, 0, x.shape, x.dtype, x.device, batch_input=tokens)


def _bound_pair(feature):
    send, recv = build("subspace"), build("subspace")
    send.bind({"residual_subspace": feature})
    recv.bind({"residual_subspace": feature})
    return send, recv


def test_exact_reconstruction_in_the_subspace():
    feat = _feature()
    send, recv = _bound_pair(feat)
    tokens = torch.randint(0, VOCAB, (3, 9))
    x = feat.token_term(tokens) + torch.randn(3, 9, K) @ feat.basis.T  # a constrained residual stream
    payload = send.compress(x, _info(x, tokens))
    assert payload[0].shape == (3, 9, K) and payload_nbytes(payload) == x.numel() * 4 * K // D
    y = recv.decompress(payload, _info(x, tokens))
    torch.testing.assert_close(y, x, atol=1e-5, rtol=0)
    off = x + 0.1 * torch.randn_like(x)  # an unconstrained model loses its off-subspace part
    assert float((recv.decompress(send.compress(off, _info(off, tokens)), _info(off, tokens)) - off).norm()) > 0.1


def test_gradient_projection_is_exact_for_upstream_parameters():
    feat = _feature(1)
    send, recv = _bound_pair(feat)
    tokens = torch.randint(0, VOCAB, (2, 5))
    theta = torch.randn(2, 5, K, requires_grad=True)  # upstream parameters write through the basis
    x = feat.token_term(tokens) + theta @ feat.basis.T
    g = torch.randn_like(x)  # an arbitrary downstream gradient, mostly outside the subspace
    (true_grad,) = torch.autograd.grad(x, theta, g, retain_graph=True)
    info = _info(x, tokens, TensorRole.ACTIVATION_GRAD)
    g_hat = recv.decompress(send.compress(g, info), info)
    assert float((g_hat - g).norm()) > 0.5 * float(g.norm())  # the wire value is lossy...
    (grad_via_wire,) = torch.autograd.grad(x, theta, g_hat)
    torch.testing.assert_close(grad_via_wire, true_grad, atol=1e-5, rtol=1e-5)  # ...the update is not


def test_requirement_declared_and_refusal_before_bind():
    assert describe("subspace")["requires"] == ["residual_subspace"]
    c = build("subspace")
    x = torch.randn(2, 3, D)
    with pytest.raises(CompressorError, match="before bind"):
        c.compress(x, _info(x, torch.zeros(2, 3, dtype=torch.long)))
    with pytest.raises(CompressorError, match="before bind"):
        c.decompress((torch.randn(2, 3, K),), _info(x, None))
    with pytest.raises(CompressorError, match="provides no 'residual_subspace'"):
        c.bind({"something_else": 1})
    with pytest.raises(CompressorError, match=r"\.basis"):
        c.bind({"residual_subspace": object()})


def test_bound_misuse_gives_clear_errors():
    feat = _feature()
    assert isinstance(feat, ResidualSubspace)
    send, _ = _bound_pair(feat)
    wrong = torch.randn(2, 3, D + 1)
    with pytest.raises(CompressorError, match="model dim"):
        send.compress(wrong, _info(wrong, torch.zeros(2, 3, dtype=torch.long)))
    x = torch.randn(2, 3, D)
    with pytest.raises(CompressorError, match="batch_input"):
        send.compress(x, _info(x, None))
    with pytest.raises(CompressorError, match="non-finite"):
        send.compress(torch.full_like(x, float("nan")), _info(x, torch.zeros(2, 3, dtype=torch.long)))
    bf = x.to(torch.bfloat16)
    tokens = torch.zeros(2, 3, dtype=torch.long)
    assert send.decompress(send.compress(bf, _info(bf, tokens)), _info(bf, tokens)).dtype == torch.bfloat16


def test_ratio_parameter_asks_the_task_for_its_rank():
    assert build("subspace").feature_options == {}
    assert build("subspace(ratio=0.01)").feature_options == {"residual_subspace": {"ratio": 0.01}}
    with pytest.raises(CompressorError, match="subspace: parameter ratio=0 must be a number"):
        build("subspace(ratio=0)")
