"""Error-feedback wrappers: EF's residual keeps the running sum honest, EF21's two sides agree."""

from __future__ import annotations

import pytest
import torch

from compressors import Compressor, CompressorError, TensorInfo, TensorRole, build
from compressors.builtins.error_feedback import EF21, ErrorFeedback

INNER = "quant(bits=2, scale=tensor)"  # coarse on purpose: large per-step error


def _info(
    x: torch.Tensor,
    step: int = 0,
    microbatch: int = 0,
    training: bool = True,
    role: TensorRole = TensorRole.WEIGHT_GRAD,
) -> TensorInfo:
    return TensorInfo(role, 0, microbatch, step, x.shape, x.dtype, x.device, seed=step, training=training)


def _link(spec: str) -> tuple[Compressor, Compressor]:
    return build(spec), build(spec)  # one sender, one receiver, as the runtime builds them


def test_ef_running_sum_tracks_inputs():
    torch.manual_seed(0)
    send, recv = _link(f"ef({INNER})")
    plain_s, plain_r = _link(INNER)
    sum_in = torch.zeros(64, 33, dtype=torch.float64)
    sum_ef, sum_plain = sum_in.clone(), sum_in.clone()
    one_step_err = None
    for step in range(30):
        x = torch.randn(64, 33) + 0.3  # a bias the coarse quantizer keeps missing
        info = _info(x, step)
        sum_in += x
        sum_ef += recv.decompress(send.compress(x, info), info)
        y = plain_r.decompress(plain_s.compress(x, info), info)
        sum_plain += y
        one_step_err = one_step_err or float((y - x).norm())
    residual = send._residuals[0].e.double()
    # sum of inputs - sum of outputs == the residual still held back (telescoping), up to fp32 rounding
    torch.testing.assert_close(sum_in - sum_ef, residual, atol=1e-4, rtol=0)
    ef_err, plain_err = float((sum_in - sum_ef).norm()), float((sum_in - sum_plain).norm())
    assert ef_err < 2 * one_step_err  # bounded, not growing with the number of steps
    assert ef_err < plain_err / 3


def test_ef_state_is_keyed_by_microbatch_and_resets_on_shape_change():
    send = build(f"ef({INNER})")
    a, b = torch.randn(4, 8), torch.randn(4, 8)
    send.compress(a, _info(a, microbatch=0, role=TensorRole.ACTIVATION))
    send.compress(b, _info(b, microbatch=1, role=TensorRole.ACTIVATION))
    assert set(send._residuals) == {0, 1}
    assert send.state_nbytes() == 2 * 4 * 8 * 4
    small = torch.randn(3, 8)  # a smaller last micro-batch: no stale residual of the wrong shape
    p = send.compress(small, _info(small, microbatch=1, role=TensorRole.ACTIVATION))
    assert send._residuals[1].e.shape == small.shape
    assert build(INNER).decompress(p, _info(small)).shape == small.shape
    send.reset()
    assert send.state_nbytes() == 0


def test_ef_eval_pass_sends_plain_code_and_keeps_state():
    send, plain = build(f"ef({INNER})"), build(INNER)
    x = torch.randn(16, 16)
    send.compress(x, _info(x))
    before = send._residuals[0].e.clone()
    z = torch.randn(16, 16)
    p = send.compress(z, _info(z, step=-1, training=False))
    q = plain.compress(z, _info(z, step=-1, training=False))
    assert all(torch.equal(a, b) for a, b in zip(p, q))
    assert torch.equal(send._residuals[0].e, before)


def test_ef21_sender_and_receiver_estimates_stay_bit_identical():
    torch.manual_seed(1)
    send, recv = _link(f"ef21({INNER})")
    target = torch.randn(32, 17)
    for step in range(25):
        x = target + 0.01 * torch.randn_like(target)
        info = _info(x, step)
        out = recv.decompress(send.compress(x, info), info)
        assert torch.equal(out, send.sender_estimate(0))  # the output is g, and the sender's g is the receiver's
        assert torch.equal(send.sender_estimate(0), recv.receiver_estimate(0))
    # the estimate converges to the (slowly moving) input despite 2-bit codes
    assert float((send.sender_estimate(0) - target).norm() / target.norm()) < 0.05
    assert send.state_nbytes() == target.numel() * 4 and send.receiver_estimate(0) is None


def test_ef21_data_parallel_average_is_the_master_estimate():
    """The runtime's all-gather path: ONE instance per replica compresses its own gradient
    and decodes every replica's payload; the average must be EF21's g = mean_i g_i."""
    torch.manual_seed(2)
    replicas = [build(f"ef21({INNER})") for _ in range(3)]
    for step in range(6):
        grads = [torch.randn(10, 12) for _ in replicas]
        infos = [_info(g, step) for g in grads]
        payloads = [r.compress(g, i) for r, g, i in zip(replicas, grads, infos)]
        means = [torch.stack([r.decompress(p, i) for p, i in zip(payloads, infos)]).mean(0) for r in replicas]
        master = torch.stack([r.sender_estimate(0) for r in replicas]).mean(0)
        for m in means:
            assert torch.equal(m, means[0])  # every replica applies the same update
            torch.testing.assert_close(m, master, atol=1e-5, rtol=1e-5)


def test_wrapping_is_generic_and_validated():
    c = build("ef(ef21(quant(bits=4)))")
    assert isinstance(c, ErrorFeedback) and isinstance(c.inner, EF21)
    assert c.spec == "ef(ef21(quant(bits=4)))"
    x = torch.randn(6, 5)
    assert c.decompress(c.compress(x, _info(x)), _info(x)).shape == x.shape
    with pytest.raises(CompressorError, match="differentiable"):
        build("ef(ae)")
    with pytest.raises(CompressorError, match="inner"):
        build("ef(inner=3)")
    with pytest.raises(CompressorError, match="non-finite"):
        build(f"ef21({INNER})").compress(torch.tensor([[1.0, float("nan")]]), _info(torch.zeros(1, 2)))


class _MeanReduce(Compressor):
    """A fake multi-round compressor: custom reduce that rounds to a grid of 0.5."""

    def reduce(self, x, info, all_reduce):
        return torch.round(all_reduce(x.clone()) * 2) / 2

    def compress(self, x, info):
        return (x,)

    def decompress(self, payload, info):
        return payload[0]


def test_ef_delegates_custom_reduce_with_residual_against_the_result():
    ef = ErrorFeedback(_MeanReduce())
    total_in, total_out = torch.zeros(8), torch.zeros(8)
    for step in range(20):
        x = torch.full((8,), 0.2)
        out = ef.reduce(x, _info(x, step), lambda t: t)  # one replica: all_reduce is identity
        total_in += x
        total_out += out
    assert float((total_in - total_out).abs().max()) <= 0.5  # plain rounding would give 0 for every step
    assert float(total_out.sum()) > 0
    # the runtime picks its data-parallel path from the class: only wrappers of a custom reduce have one
    assert type(ef).reduce is not Compressor.reduce
    assert type(build(f"ef({INNER})")).reduce is Compressor.reduce


class _AsyncRoundReduce(_MeanReduce):
    """The same rounding, returned as a Future (an asynchronous reduce); overwrites its input."""

    def reduce(self, x, info, all_reduce):
        fut = torch.futures.Future()
        fut.set_result(x.mul_(2).round_().div_(2))  # in place: the wrapper must have handed over a copy
        return fut


def test_ef_chains_an_asynchronous_inner_reduce():
    ef = ErrorFeedback(_AsyncRoundReduce())
    x = torch.full((8,), 0.2)
    out = ef.reduce(x, _info(x, 0), lambda t: t)
    assert isinstance(out, torch.futures.Future) and torch.equal(out.wait(), torch.zeros(8))
    assert torch.equal(x, torch.full((8,), 0.2))  # its input untouched
    assert torch.allclose(ef._residuals[0].e, torch.full((8,), 0.2))  # x + e - mean, kept when the future completes


# --------------------------------------------------------------------------- per-sample memory
def _act(
    x: torch.Tensor,
    ids: list[int],
    step: int,
    role: TensorRole = TensorRole.ACTIVATION,
    microbatch: int = 0,
    training: bool = True,
) -> TensorInfo:
    return TensorInfo(
        role,
        0,
        microbatch,
        step,
        x.shape,
        x.dtype,
        x.device,
        seed=step,
        sample_ids=torch.tensor(ids),
        training=training,
    )


def _epochs(n_samples: int, batch: int, epochs: int, seed: int = 0) -> list[list[int]]:
    """Micro-batches of sample ids, reshuffled every epoch (as the tasks draw them)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(epochs):
        perm = torch.randperm(n_samples, generator=g).tolist()
        out += [perm[i : i + batch] for i in range(0, n_samples, batch)]
    return out


def test_ef_per_sample_memory_corrects_each_sample_with_its_own_residual():
    """Activations (memory=auto): the residual of sample i returns at sample i's next visit,
    whichever micro-batch it lands in, so per sample the outputs telescope to the inputs."""
    torch.manual_seed(3)
    send, recv = _link(f"ef({INNER})")
    data = torch.randn(12, 5, 7) + 0.3  # the same activation every visit (a frozen model)
    sum_in, sum_out = torch.zeros(12, 5, 7, dtype=torch.float64), torch.zeros(12, 5, 7, dtype=torch.float64)
    for step, ids in enumerate(_epochs(12, 4, epochs=6)):
        x = data[ids]
        info = _act(x, ids, step, microbatch=step % 3)
        sum_in[ids] += x.double()
        sum_out[ids] += recv.decompress(send.compress(x, info), info).double()
    assert send._residuals == {}  # nothing kept per micro-batch
    held = send._rows.read(torch.arange(12).numpy(), data).double()
    torch.testing.assert_close(sum_in - sum_out, held, atol=1e-4, rtol=0)  # per sample, exactly what is held back
    assert send.state_nbytes() >= 12 * 5 * 7 * 4
    send.reset()
    assert send.state_nbytes() == 0


def test_ef_memory_choices_key_the_state_as_documented():
    x = torch.randn(4, 6)
    auto, micro = build(f"ef({INNER})"), build(f"ef({INNER}, memory=microbatch)")
    auto.compress(x, _act(x, [0, 1, 2, 3], 0, role=TensorRole.ACTIVATION_GRAD))  # gradients: per micro-batch
    assert set(auto._residuals) == {0} and auto._rows.nbytes() == 0
    micro.compress(x, _act(x, [0, 1, 2, 3], 0))
    assert set(micro._residuals) == {0} and micro._rows.nbytes() == 0
    sample = build(f"ef({INNER}, memory=sample)")
    sample.compress(x, _act(x, [0, 1, 2, 3], 0, role=TensorRole.ACTIVATION_GRAD))
    assert sample._residuals == {} and sample._rows.nbytes() > 0
    with pytest.raises(
        CompressorError, match="memory='tensor' is not allowed; allowed values: auto, sample, microbatch"
    ):
        build(f"ef({INNER}, memory=tensor)")
    with pytest.raises(CompressorError, match="one id per sample"):
        sample.compress(x, _act(x, [0, 1], 1))


def test_ef_per_sample_eval_pass_touches_no_memory():
    send, plain = build(f"ef({INNER})"), build(INNER)
    x = torch.randn(4, 6)
    send.compress(x, _act(x, [0, 1, 2, 3], 0))
    before = send._rows.read(torch.arange(4).numpy(), x).clone()
    z = torch.randn(4, 6)
    p = send.compress(z, _act(z, [0, 1, 2, 3], -1, training=False))
    assert all(torch.equal(a, b) for a, b in zip(p, plain.compress(z, _act(z, [0, 1, 2, 3], -1, training=False))))
    assert torch.equal(send._rows.read(torch.arange(4).numpy(), x), before)


def test_ef21_per_sample_estimates_agree_and_track_each_sample():
    """Per-sample EF21 on activations: a first visit decodes to C(x); later visits refine the
    sample's own estimate; sender and receiver rows stay bit-identical."""
    torch.manual_seed(4)
    send, recv = _link(f"ef21({INNER})")
    data = torch.randn(8, 3, 5)
    for step, ids in enumerate(_epochs(8, 4, epochs=8)):
        x = data[ids] + 0.01 * torch.randn(4, 3, 5)
        info = _act(x, ids, step, microbatch=step % 2)
        out = recv.decompress(send.compress(x, info), info)
        if step == 0:
            plain = build(INNER)
            torch.testing.assert_close(out, plain.decompress(plain.compress(x, info), info))
        all_ids = torch.arange(8).numpy()
        assert torch.equal(send._rows.read(all_ids, data), recv._rows_received.read(all_ids, data))
    est = recv._rows_received.read(torch.arange(8).numpy(), data)
    assert float((est - data).norm() / data.norm()) < 0.05
    assert send._sent == {} and recv._received == {}
