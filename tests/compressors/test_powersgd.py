"""PowerSGD: exact on low-rank input, warm start converges; the data-parallel reduce per parameter
matrix (with error feedback and warm start), asynchronous, checked on simulated replicas."""

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
def _dp_info(x, *, step=0, seed=3, segments=None, replicas=None, bucket=0, training=True) -> TensorInfo:
    return TensorInfo(
        TensorRole.WEIGHT_GRAD, bucket, 0, step, x.shape, x.dtype, x.device,
        seed=seed, training=training, segments=segments, replicas=replicas,
    )  # fmt: skip


def _run_replicas(grads, instances, *, step=0, seed=3, segments=None, replicas=None):
    """Run ``reduce`` on each replica in its own thread with a synchronous summing all-reduce
    that returns a new tensor (a plain function without ``async_op``: the fallback path)."""
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

        x = grads[rank].clone()  # reduce may overwrite its input
        info = _dp_info(x, step=step, seed=seed, segments=segments, replicas=replicas)
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


class _AsyncWorld:
    """Simulated replicas in one thread: ``all_reduce(t, async_op=True)`` returns a pending
    future; the k-th collective completes (in place, as the runtime's) once every replica has
    launched its k-th one. Records what each replica sent, in order."""

    def __init__(self, world: int):
        self.world = world
        self.queues: list[list] = [[] for _ in range(world)]
        self.sent: list[list[int]] = [[] for _ in range(world)]

    def all_reduce(self, rank):
        def all_reduce(t, async_op=False):
            assert async_op, "PowerSGD launches its collectives asynchronously"
            fut = torch.futures.Future()
            self.queues[rank].append((t, fut))
            self.sent[rank].append(t.numel())
            self._pump()
            return fut

        return all_reduce

    def _pump(self):
        while all(self.queues):
            items = [q.pop(0) for q in self.queues]
            assert len({t.numel() for t, _ in items}) == 1, "replicas issued different collectives"
            total = torch.stack([t for t, _ in items]).sum(0)
            for t, fut in items:
                t.copy_(total)
                fut.set_result(t)

    def reduce(self, instances, grads, **info_kw):
        """Every replica's mean (the replica's bucket, overwritten in place) for its local ``grads``."""
        bufs = [g.clone() for g in grads]
        futs = [
            c.reduce(b, _dp_info(b, **info_kw), self.all_reduce(r)) for r, (c, b) in enumerate(zip(instances, bufs))
        ]
        assert all(isinstance(f, torch.futures.Future) for f in futs)
        outs = [f.wait() for f in futs]
        assert all(o.data_ptr() == b.data_ptr() for o, b in zip(outs, bufs))  # written into the bucket
        return outs


# a bucket like a small conv net's: conv weight, BN vectors, a linear layer and its bias, and a
# matrix too small for rank 2 to save bytes
SEGMENTS = (
    torch.Size([16, 3, 3, 3]),  # (16, 27), r=2: (16+27)*2*2 = 172 < 432: compressed
    torch.Size([16]),
    torch.Size([16]),
    torch.Size([10, 64]),  # (10, 64), r=2: (74)*2*2 = 296 < 640: compressed
    torch.Size([10]),
    torch.Size([4, 3]),  # (4, 3): (7)*2*2 = 28 > 12: uncompressed
)
COMPRESSED = {0: (16, 27), 3: (10, 64)}


def _parts(flat):
    out, off = [], 0
    for s in SEGMENTS:
        out.append(flat[off : off + s.numel()].view(s))
        off += s.numel()
    return out


def _bucket_grads(world, seed=0, scale=1.0):
    g = _gen(seed)
    n = sum(s.numel() for s in SEGMENTS)
    return [scale * torch.randn(n, generator=g) for _ in range(world)]


def _matrix(t):
    return t.reshape(t.shape[0], -1)


def test_reduce_per_parameter_matrix_projects_the_mean_and_averages_the_rest_exactly():
    world = _AsyncWorld(2)
    grads = _bucket_grads(2)
    outs = world.reduce([PowerSGD(rank=2), PowerSGD(rank=2)], grads, segments=SEGMENTS, replicas=2)
    assert torch.equal(outs[0], outs[1])  # every replica applies the same update
    mean = (grads[0] + grads[1]) / 2
    for i, (got, want) in enumerate(zip(_parts(outs[0]), _parts(mean))):
        if i in COMPRESSED:  # P P^T mean(M): the mean projected on the rank-2 span of the result
            m = _matrix(want)
            assert torch.linalg.matrix_rank(_matrix(got)) == 2
            p = torch.linalg.qr(_matrix(got)).Q[:, :2]
            assert torch.allclose(_matrix(got), p @ p.T @ m, atol=1e-5)
            assert _rel(m, _matrix(got)) > 0.1  # lossy: a random matrix is not rank 2
        else:  # vectors and the (4, 3) matrix: the exact mean
            assert torch.allclose(got, want, atol=1e-6)
    # three batched all-reduces: the uncompressed values, all P's, all Q's; no count value
    assert world.sent[0] == world.sent[1] == [16 + 16 + 10 + 12, 16 * 2 + 10 * 2, 27 * 2 + 64 * 2]


def test_p_comes_from_the_summed_projection_of_the_seeded_q():
    world = _AsyncWorld(2)
    grads = _bucket_grads(2, seed=5)
    outs = world.reduce(
        [PowerSGD(rank=2, error_feedback=False), PowerSGD(rank=2, error_feedback=False)],
        grads, segments=SEGMENTS, replicas=2, seed=9,
    )  # fmt: skip
    # independent recomputation: Q0 Gaussian from the shared seed, one orthonormal Q per matrix
    q0 = torch.randn(27 * 2 + 64 * 2, generator=_dp_info(grads[0], seed=9).generator(0x50))
    qs = [torch.linalg.qr(q0[:54].view(27, 2)).Q, torch.linalg.qr(q0[54:].view(64, 2)).Q]
    for (i, _), q in zip(sorted(COMPRESSED.items()), qs):
        ms = [_matrix(_parts(g)[i]) for g in grads]
        p = torch.linalg.qr(sum(m @ q for m in ms)).Q
        expected = p @ (sum(m.T @ p for m in ms) / 2).T
        assert torch.allclose(_matrix(_parts(outs[0])[i]), expected, atol=1e-5)


def test_error_feedback_carries_each_replicas_residual():
    world = _AsyncWorld(2)
    instances = [PowerSGD(rank=1), PowerSGD(rank=1)]
    applied = torch.zeros(sum(s.numel() for s in SEGMENTS))
    total_mean = torch.zeros_like(applied)
    for step in range(6):
        grads = _bucket_grads(2, seed=100 + step)
        inputs = []
        for c, g in zip(instances, grads):  # what each replica reduces: its gradient + residual
            st = c._dp.get(0)
            x = g.clone()
            if st is not None:
                for i, ev in zip(sorted(COMPRESSED), _views_of(st.e)):
                    _matrix(_parts(x)[i]).add_(ev)
            inputs.append(x)
        outs = world.reduce(instances, grads, segments=SEGMENTS, replicas=2, step=step, seed=step)
        for c, x in zip(instances, inputs):  # e_i = (M_i + e_i) - P Q^T, per replica
            for i, ev in zip(sorted(COMPRESSED), _views_of(c._dp[0].e)):
                assert torch.allclose(ev, _matrix(_parts(x)[i]) - _matrix(_parts(outs[0])[i]), atol=1e-5)
        applied += outs[0]
        total_mean += (grads[0] + grads[1]) / 2
    # nothing is lost: what was applied plus the mean residual is the sum of the mean gradients
    residual = torch.zeros_like(applied)
    for c in instances:
        for i, ev in zip(sorted(COMPRESSED), _views_of(c._dp[0].e)):
            _matrix(_parts(residual)[i]).add_(ev / 2)
    assert torch.allclose(applied + residual, total_mean, atol=1e-4)
    assert instances[0].state_nbytes() == 4 * (16 * 27 + 10 * 64 + 27 + 64)  # residuals + rank-1 Q's
    no_ef = [PowerSGD(rank=1, error_feedback=False) for _ in range(2)]
    world.reduce(no_ef, _bucket_grads(2), segments=SEGMENTS, replicas=2)
    assert no_ef[0]._dp[0].e is None and no_ef[0].state_nbytes() == 4 * (27 + 64)


def _views_of(e):
    return [e[: 16 * 27].view(16, 27), e[16 * 27 :].view(10, 64)]


def test_warm_start_with_a_shared_low_rank_space_becomes_exact():
    g = _gen(4)
    u, v = torch.randn(64, 2, generator=g), torch.randn(2, 30, generator=g)
    segs = (torch.Size([64, 30]), torch.Size([5]))
    world = _AsyncWorld(3)
    instances = [PowerSGD(rank=2, error_feedback=False) for _ in range(3)]
    for step, scale in enumerate((1.0, 0.5)):
        grads = [torch.cat([(u @ (v * s)).reshape(-1), torch.full((5,), s)]) * scale for s in (1.0, -0.5, 2.0)]
        outs = world.reduce(instances, grads, segments=segs, replicas=3, step=step, seed=step)
        assert torch.allclose(outs[0], sum(grads) / 3, atol=1e-4) and torch.equal(outs[0], outs[2])
        qs = [c._dp[0].q for c in instances]
        assert all(torch.equal(q, qs[0]) for q in qs)  # the warm-start state agrees on every replica


def test_a_new_bucket_layout_starts_afresh():
    world = _AsyncWorld(2)
    instances = [PowerSGD(rank=2), PowerSGD(rank=2)]
    world.reduce(instances, _bucket_grads(2), segments=SEGMENTS, replicas=2)
    other = tuple(reversed(SEGMENTS))  # what DDP's bucket rebuild after step 0 looks like
    outs = world.reduce(instances, _bucket_grads(2, seed=1), segments=other, replicas=2, step=1)
    assert instances[0]._dp[0].layout.segments == other and torch.equal(outs[0], outs[1])


def test_evaluation_does_not_touch_the_state():
    world = _AsyncWorld(2)
    instances = [PowerSGD(rank=2), PowerSGD(rank=2)]
    world.reduce(instances, _bucket_grads(2), segments=SEGMENTS, replicas=2)
    e, q = instances[0]._dp[0].e.clone(), instances[0]._dp[0].q.clone()
    world.reduce(instances, _bucket_grads(2, seed=7), segments=SEGMENTS, replicas=2, step=-1, training=False)
    assert torch.equal(instances[0]._dp[0].e, e) and torch.allclose(instances[0]._dp[0].q, q)


def test_synchronous_all_reduce_without_segments_or_replica_count():
    grads = [_decaying(48, 40, seed=1) + 0.1 * torch.randn(48, 40, generator=_gen(s)) for s in (2, 3)]
    instances = [PowerSGD(rank=3), PowerSGD(rank=3)]
    results, errors, sent = _run_replicas(grads, instances)
    assert errors == [None, None]
    assert torch.equal(results[0], results[1]) and results[0].shape == (48, 40)
    p = torch.linalg.qr(results[0]).Q[:, :3]
    assert torch.allclose(results[0], p @ p.T @ (sum(grads) / 2), atol=1e-5)
    assert sent[0] == [1, 48 * 3, 40 * 3]  # the replica count (unknown), then P, then Q


def test_reduce_handles_flat_buckets_and_bf16():
    grads = [torch.randn(1000, generator=_gen(s)).to(torch.bfloat16) for s in (1, 2)]
    results, errors, sent = _run_replicas(grads, [PowerSGD(rank=2), PowerSGD(rank=2)], replicas=2)
    assert errors == [None, None]
    assert results[0].shape == (1000,) and results[0].dtype == torch.bfloat16
    assert sent[0] == [32 * 2, 32 * 2]  # 1000 values as a zero-padded 32 x 32 matrix


@pytest.mark.parametrize("where", ["matrix", "vector"])
def test_nan_on_one_replica_makes_every_replica_raise(where):
    grads = _bucket_grads(2)
    grads[1][0 if where == "matrix" else 16 * 27 + 3] = float("inf")
    results, errors, _ = _run_replicas(grads, [PowerSGD(), PowerSGD()], segments=SEGMENTS, replicas=2)
    assert all(isinstance(e, CompressorError) for e in errors), errors
    assert "another replica" in str(errors[0])
    assert ("has 1 non-finite values" if where == "matrix" else "another replica") in str(errors[1])


def test_nan_fails_every_replicas_future():
    world = _AsyncWorld(2)
    grads = _bucket_grads(2)
    grads[0][5] = float("nan")
    bufs = [g.clone() for g in grads]
    instances = [PowerSGD(), PowerSGD()]
    futs = [
        c.reduce(b, _dp_info(b, segments=SEGMENTS, replicas=2), world.all_reduce(r))
        for r, (c, b) in enumerate(zip(instances, bufs))
    ]
    for f in futs:
        with pytest.raises(CompressorError, match="non-finite"):
            f.wait()


def test_dp_parameters_are_validated():
    with pytest.raises(CompressorError, match="error_feedback"):
        PowerSGD(error_feedback="yes")
    with pytest.raises(CompressorError, match="min_compression_rate"):
        PowerSGD(min_compression_rate=-1)
