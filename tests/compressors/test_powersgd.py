"""PowerSGD: exact on low-rank input, warm start converges, two-round data-parallel reduce."""

from __future__ import annotations

import threading

import pytest
import torch

from compressors import CompressorError, TensorInfo, TensorRole, payload_nbytes
from compressors.builtins.powersgd import PowerSGD, powersgd_matrix_shape


def _info(x, *, step=0, seed=0, microbatch=0, training=True, role=TensorRole.ACTIVATION) -> TensorInfo:
    return TensorInfo(role, 0, microbatch, step, x.shape, x.dtype, x.device, seed=seed, training=training)


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _low_rank(n, m, r, seed=0):
    g = _gen(seed)
    return torch.randn(n, r, generator=g) @ torch.randn(r, m, generator=g)


def _decaying(n, m, seed=0):
    """A matrix with singular values 2^-i (what real gradients look like)."""
    g = _gen(seed)
    u = torch.linalg.qr(torch.randn(n, n, generator=g)).Q[:, : min(n, m)]
    v = torch.linalg.qr(torch.randn(m, m, generator=g)).Q[:, : min(n, m)]
    s = 2.0 ** -torch.arange(min(n, m), dtype=torch.float32) * 10
    return (u * s) @ v.T


def _rel(x, y):
    return float((x - y).norm() / x.norm())


def _rt(c, x, receiver=None, **kw):
    info = _info(x, **kw)
    p = c.compress(x, info)
    return p, (receiver or PowerSGD(rank=c.rank)).decompress(p, info)


@pytest.mark.parametrize(
    "shape, nm",
    [((8, 64, 4, 4), (512, 16)), ((4, 32, 48), (128, 48)), ((30, 20), (30, 20)), ((1000,), (32, 32)), ((7,), (3, 3))],
)
def test_matrix_view(shape, nm):
    assert powersgd_matrix_shape(shape) == nm
    numel = torch.Size(shape).numel()
    assert (nm[0] * nm[1] == numel) if len(shape) >= 2 else (nm[0] * nm[1] >= numel > (nm[0] - 1) * nm[1])


@pytest.mark.parametrize("rank", [1, 2, 4])
def test_rank_r_matrix_is_reconstructed_exactly(rank):
    x = _low_rank(64, 48, rank)
    p, y = _rt(PowerSGD(rank=4), x)
    assert p[0].shape == (64, 4) and p[1].shape == (48, 4)
    assert _rel(x, y) < 1e-5


def test_low_rank_token_tensor_is_exact_and_small():
    x = _low_rank(4 * 32, 96, 3).view(4, 32, 96)  # (B, T, d): tokens x features of rank 3
    p, y = _rt(PowerSGD(rank=4), x)
    assert y.shape == x.shape and _rel(x, y) < 1e-5
    assert payload_nbytes(p) == (128 + 96) * 4 * 4 < x.numel() * 4 / 10


def test_p_is_orthonormal_and_rank_is_capped():
    x = torch.randn(6, 100, generator=_gen(0))
    p, y = _rt(PowerSGD(rank=16), x)
    assert p[0].shape == (6, 6) and p[1].shape == (100, 6)
    assert torch.allclose(p[0].T @ p[0], torch.eye(6), atol=1e-5)
    assert _rel(x, y) < 1e-5  # rank 6 = full rank of a 6-row matrix


def test_warm_start_improves_error_over_steps():
    x = _decaying(96, 64)
    best = _rel(x, _truncated_svd(x, 2))
    warm, cold = PowerSGD(rank=2), PowerSGD(rank=2, warm_start=False)
    warm_errs = [_rt(warm, x, step=s, seed=s)[1] for s in range(6)]
    warm_errs = [_rel(x, y) for y in warm_errs]
    cold_errs = [_rel(x, _rt(cold, x, step=s, seed=s)[1]) for s in range(6)]
    assert warm_errs[-1] < warm_errs[0] and warm_errs[-1] < 1.01 * best
    assert min(cold_errs) > 1.05 * best  # one power step from random never gets there
    assert warm.state_nbytes() == 64 * 2 * 4 and cold.state_nbytes() == 0
    warm.reset()
    assert warm.state_nbytes() == 0


def _truncated_svd(x, r):
    u, s, vh = torch.linalg.svd(x, full_matrices=False)
    return (u[:, :r] * s[:r]) @ vh[:r]


def test_evaluation_passes_do_not_update_the_state():
    x = _decaying(32, 32)
    c = PowerSGD(rank=2)
    _rt(c, x)
    q = dict(c._q)
    _rt(c, x * 3, step=-1, training=False)
    assert all(torch.equal(q[k], c._q[k]) for k in q)


def test_a_zero_step_does_not_stall_the_warm_start():
    c = PowerSGD(rank=2)
    _rt(c, torch.zeros(20, 10), step=0)
    x = _low_rank(20, 10, 2)
    assert _rel(x, _rt(c, x, step=1, seed=1)[1]) < 1e-4  # not stuck on the basis e_1, e_2


def test_initial_q_comes_from_the_seed():
    x = torch.randn(40, 30, generator=_gen(1))
    a = PowerSGD(rank=3).compress(x, _info(x, seed=5))
    b = PowerSGD(rank=3).compress(x, _info(x, seed=5))
    c = PowerSGD(rank=3).compress(x, _info(x, seed=6))
    assert all(torch.equal(u, v) for u, v in zip(a, b)) and not torch.equal(a[1], c[1])


def test_bf16_payload_stays_bf16():
    x = _low_rank(32, 16, 2).to(torch.bfloat16)
    p, y = _rt(PowerSGD(rank=2), x)
    assert p[0].dtype == torch.bfloat16 and y.dtype == torch.bfloat16 and _rel(x.float(), y.float()) < 0.02


def test_non_finite_input_raises():
    x = torch.randn(8, 8)
    x[2, 3] = float("nan")
    with pytest.raises(CompressorError, match="non-finite"):
        PowerSGD().compress(x, _info(x))


# --------------------------------------------------------------------------- data parallel
def _run_replicas(grads, instances, *, step=0, seed=3):
    """Run ``reduce`` on each replica in its own thread with a summing all-reduce."""
    world = len(grads)
    barrier = threading.Barrier(world, timeout=10)  # a replica that raises early breaks it
    slots: list = [None] * world
    sent: list[list[int]] = [[] for _ in range(world)]
    results: list = [None] * world
    errors: list = [None] * world

    def replica(rank):
        def all_reduce(t):
            sent[rank].append(t.numel())
            slots[rank] = t.clone()
            barrier.wait()
            total = torch.stack(slots).sum(0)
            barrier.wait()
            return total

        x = grads[rank]
        info = _info(x, step=step, seed=seed, role=TensorRole.WEIGHT_GRAD)
        try:
            results[rank] = instances[rank].reduce(x, info, all_reduce)
        except BaseException as e:
            errors[rank] = e

    threads = [threading.Thread(target=replica, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return results, errors, sent


def test_reduce_equals_mean_of_the_replicas_low_rank_approximations():
    grads = [_decaying(48, 40, seed=1) + 0.1 * torch.randn(48, 40, generator=_gen(s)) for s in (2, 3)]
    instances = [PowerSGD(rank=3), PowerSGD(rank=3)]
    results, errors, sent = _run_replicas(grads, instances)
    assert errors == [None, None]
    assert torch.equal(results[0], results[1])  # every replica gets the same update
    # result = P P^T mean(M): the mean of each replica's projection onto the shared span(P)
    p = torch.linalg.qr(results[0]).Q[:, :3]
    expected = sum(p @ p.T @ g for g in grads) / 2
    assert torch.allclose(results[0], expected, atol=1e-5)
    assert sent[0] == [48 * 3 + 1, 40 * 3]  # round 1: P (+ the replica count), round 2: Q


def test_reduce_is_exact_when_replicas_share_a_low_rank_space_and_warm_starts():
    g = _gen(4)
    u, v = torch.randn(64, 2, generator=g), torch.randn(2, 30, generator=g)
    grads = [u @ (v * s) for s in (1.0, -0.5, 2.0)]  # three replicas, same column space
    instances = [PowerSGD(rank=2) for _ in grads]
    results, errors, _ = _run_replicas(grads, instances)
    assert errors == [None] * 3
    assert torch.allclose(results[0], sum(grads) / 3, atol=1e-4)
    # warm start: the state is the same on every replica, so step 2 agrees too
    assert all(torch.equal(instances[0]._q[k], inst._q[k]) for inst in instances for k in instances[0]._q)
    results2, errors2, _ = _run_replicas([x * 0.5 for x in grads], instances, step=1, seed=11)
    assert errors2 == [None] * 3 and torch.equal(results2[0], results2[2])
    assert torch.allclose(results2[0], sum(grads) / 6, atol=1e-4)


def test_reduce_handles_flat_buckets_and_bf16():
    grads = [torch.randn(1000, generator=_gen(s)).to(torch.bfloat16) for s in (1, 2)]
    results, errors, sent = _run_replicas(grads, [PowerSGD(rank=2), PowerSGD(rank=2)])
    assert errors == [None, None]
    assert results[0].shape == (1000,) and results[0].dtype == torch.bfloat16
    assert sent[0] == [32 * 2 + 1, 32 * 2]  # 1000 values as a 32 x 32 matrix


def test_nan_on_one_replica_makes_every_replica_raise():
    grads = [torch.randn(20, 10, generator=_gen(s)) for s in (1, 2)]
    grads[1][0, 0] = float("inf")
    results, errors, _ = _run_replicas(grads, [PowerSGD(), PowerSGD()])
    assert all(isinstance(e, CompressorError) for e in errors), errors
    assert "non-finite" in str(errors[1]) and "another replica" in str(errors[0])
