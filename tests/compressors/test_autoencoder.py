"""Learned autoencoder: seeded identical init, gradients through the wire, trainable with the model."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from compressors import CompressorError, TensorInfo, TensorRole, build


def _info(x):
    return TensorInfo(TensorRole.ACTIVATION, 0, 0, 0, x.shape, x.dtype, x.device)


def _through_the_wire(send, recv, x):
    """What the runtime does with a differentiable compressor: codes cross as a leaf that
    requires grad on the receiver; its gradient is sent back and fed to the sender's graph."""
    (codes,) = send.compress(x, _info(x))
    received = codes.detach().requires_grad_()
    y = recv.decompress((received,), _info(x))
    return codes, received, y


def test_parameters_exist_before_use_and_receive_gradients():
    send, recv = build("ae"), build("ae")
    assert send.differentiable
    mods = list(send.modules())
    assert len(mods) == 2 and all(isinstance(m, nn.Linear) for m in mods)
    params_before = [id(p) for p in send.parameters()]
    x = torch.randn(2, 16, 4, 3, requires_grad=True)  # (B, C, H, W): the channel dim is coded
    codes, received, y = _through_the_wire(send, recv, x)
    assert codes.shape == (2, 2, 4, 3) and codes.dtype == x.dtype and codes.requires_grad
    assert y.shape == x.shape
    y.square().sum().backward()
    codes.backward(received.grad)
    assert recv.decoder.weight.grad is not None and float(recv.decoder.weight.grad.abs().sum()) > 0
    assert send.encoder.weight.grad is not None and float(send.encoder.weight.grad.abs().sum()) > 0
    assert x.grad is not None and float(x.grad.abs().sum()) > 0  # the stage upstream trains too
    assert [id(p) for p in send.parameters()] == params_before  # sized in place: optimizers keep them
    assert send.encoder.weight.shape == (2, 16) and recv.decoder.weight.shape == (16, 2)


def test_both_instances_initialize_identically_from_the_seed():
    a, b, c = build("ae(ratio=0.25)"), build("ae(ratio=0.25)"), build("ae(ratio=0.25, seed=1)")
    x = torch.randn(3, 5, 32)  # (B, T, d): the last dim is coded
    for m in (a, b, c):
        m.compress(x, _info(x))
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert not torch.equal(a.encoder.weight, c.encoder.weight)
    # the untrained pair is an orthogonal projection: exact for x inside the encoder's row space
    w = a.encoder.weight.detach()  # (k, d) orthonormal rows
    torch.testing.assert_close(w @ w.T, torch.eye(8), atol=1e-5, rtol=0)
    inside = torch.randn(3, 5, 8) @ w
    torch.testing.assert_close(
        b.decompress(a.compress(inside, _info(inside)), _info(inside)), inside, atol=1e-5, rtol=0
    )


def test_init_does_not_consume_global_rng():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    ae = build("ae")
    ae.compress(torch.ones(2, 64), _info(torch.ones(2, 64)))  # materialize with the fixed seed
    assert torch.equal(torch.rand(3), expected)


def test_trains_jointly_with_an_optimizer_built_before_first_use():
    torch.manual_seed(0)
    send, recv = build("ae(dim=4)"), build("ae(dim=4)")
    opt = torch.optim.Adam([*send.parameters(), *recv.parameters()], lr=0.05)
    mix = torch.randn(4, 24)  # data on a 4-dim subspace the random init does not know

    def loss_now():
        x = torch.randn(64, 4) @ mix
        codes, received, y = _through_the_wire(send, recv, x)
        return codes, received, torch.nn.functional.mse_loss(y, x)

    with torch.no_grad():
        first = float(loss_now()[2])
    for _ in range(60):
        opt.zero_grad()
        codes, received, loss = loss_now()
        loss.backward()
        codes.backward(received.grad)
        opt.step()
    with torch.no_grad():
        assert float(loss_now()[2]) < 0.1 * first


def test_dtype_kept_and_bad_settings_refused():
    ae = build("ae")
    x = torch.randn(2, 7, 16, dtype=torch.bfloat16)
    (codes,) = ae.compress(x, _info(x))
    assert codes.dtype == torch.bfloat16 and codes.shape == (2, 7, 2)
    assert ae.decompress((codes,), _info(x)).dtype == torch.bfloat16
    with pytest.raises(CompressorError, match="feature dim changed"):
        ae.compress(torch.randn(2, 7, 32), _info(torch.randn(2, 7, 32)))
    with pytest.raises(CompressorError, match="must be smaller than the feature dim"):
        build("ae(dim=16)").compress(x, _info(x))
    with pytest.raises(CompressorError, match="ratio"):
        build("ae(ratio=2)")
    with pytest.raises(CompressorError, match="non-finite"):
        build("ae").compress(torch.full((2, 16), float("nan")), _info(torch.zeros(2, 16)))
    assert ae.roles == frozenset({TensorRole.ACTIVATION, TensorRole.TP_ACTIVATION})  # activations only
