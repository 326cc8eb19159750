"""Generic compressor contract, parametrized over the registry (timm style).

Every name in ``compressors.available()`` at collection time is tested, so a newly
registered plugin is covered without editing a list. Its spec is ``DEFAULT_SPECS[name]``
if present, else built generically from its signature (required compressor-typed
parameters get ``topk(ratio=0.1)``); a compressor is skipped, with the reason, only when it
declares model requirements or needs other construction arguments.
"""

from __future__ import annotations

import inspect
import threading

import pytest
import torch

import compressors
from compressors import Compressor, CompressorError, TensorInfo, TensorRole, payload_nbytes
from compressors.registry import default_spec, get_class

# Specs for names whose bare name is not the configuration we want to test.
DEFAULT_SPECS: dict[str, str] = {
    "ef": "ef(topk(ratio=0.1))",
    "ef21": "ef21(topk(ratio=0.1))",
}

# Relative error ||x - x_hat|| / ||x|| allowed on a standard normal tensor (one call).
# Values derive from each family's default: e.g. top 10% of a Gaussian keeps 44% of the
# energy (error 0.75); a rank-4 projection of noise keeps almost nothing (error < 1 always).
REL_ERROR_BOUND: dict[str, float] = {
    "none": 0.0,
    "fp16": 1e-3,
    "bf16": 5e-3,
    "fp8": 0.04,
    "quant": 0.02,  # 8 bits, per-row min-max
    "qsgd": 0.45,  # 15 levels, bucket 128: unbiased but noisy
    "topk": 0.80,
    "randomk": 0.97,  # sqrt(1 - 0.1) = 0.949
    "threshold": 0.98,  # ~1% kept
    "powersgd": 1.0,  # a projection never increases the norm
    "ef": 0.80,  # first call = topk
    "ef21": 0.80,
    "aqsgd": 0.30,
}
DEFAULT_BOUND = 1.0  # unknown plugins: no worse than sending zeros
LOSSLESS = {"none"}  # everything else must send fewer bytes than the raw tensor
BF16_SLACK = 0.01  # extra relative error allowed when the input itself is bf16

ACTIVATION_SHAPES = [(8, 64, 16, 16), (4, 32, 384)]  # conv (B, C, H, W) and tokens (B, T, d)
BUCKET_NUMEL = 32_768  # a flat DDP gradient bucket
ODD_ACTIVATION_SHAPES = [(3, 5, 7), (2, 3), (5, 3, 2, 3)]
ODD_BUCKET_SHAPES = [(7,), (1001,)]
# Degenerate shapes a compressor may refuse with a clear CompressorError (e.g. a learned
# code of a 1-wide feature dim); it must never crash otherwise or return a wrong shape.
DEGENERATE_SHAPES = {"activation": [(1, 1, 1), (1, 1), (5, 1, 2, 3)], "bucket": [(1,)]}
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


# --------------------------------------------------------------------------- collection
def _default_spec(name: str) -> tuple[str | None, str]:
    """(spec, skip reason): a buildable default spec for ``name``, or None and why not."""
    if name in DEFAULT_SPECS:
        return DEFAULT_SPECS[name], ""
    cls = get_class(name)
    if cls.requires:
        return None, f"{name} requires model features {sorted(cls.requires)}; covered by its own tests"
    try:
        return default_spec(name), ""
    except CompressorError as e:
        return None, f"{e}; add it to DEFAULT_SPECS"


def _cases(with_roles: bool = False) -> list:
    out = []
    for name in compressors.available():
        spec, reason = _default_spec(name)
        roles = sorted(get_class(name).roles, key=lambda r: r.value) if with_roles else [None]
        for role in roles:
            case_id = name if role is None else f"{name}-{role.value}"
            values = (name, spec) if role is None else (name, spec, role)
            marks = [pytest.mark.skip(reason=reason)] if spec is None else []
            out.append(pytest.param(*values, id=case_id, marks=marks))
    return out


CASES = _cases()
ROLE_CASES = _cases(with_roles=True)


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    """Stateful plugins (AQ-SGD buffers) write under the cache dir: keep it per test."""
    monkeypatch.setenv("MPCBENCH_CACHE_DIR", str(tmp_path / "cache"))


# --------------------------------------------------------------------------- helpers
def _main_role(name: str) -> TensorRole:
    roles = get_class(name).roles
    return TensorRole.ACTIVATION if TensorRole.ACTIVATION in roles else sorted(roles, key=lambda r: r.value)[0]


def _shape_for(role: TensorRole, activation_shape: tuple[int, ...]) -> tuple[int, ...]:
    return (BUCKET_NUMEL,) if role is TensorRole.WEIGHT_GRAD else activation_shape


def _info(x: torch.Tensor, role: TensorRole, *, step: int = 0, seed: int = 1234, training: bool = True) -> TensorInfo:
    ids = None
    if role is not TensorRole.WEIGHT_GRAD:
        ids = torch.arange(x.shape[0] if x.dim() else 1, dtype=torch.int64)
    return TensorInfo(
        role=role, boundary=0, microbatch=0, step=step, shape=x.shape, dtype=x.dtype,
        device=x.device, sample_ids=ids, seed=seed, training=training,
    )


def _randn(shape, *, seed: int = 0, dtype=torch.float32, device="cpu") -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(dtype=dtype, device=device)


def _rel_err(x: torch.Tensor, y: torch.Tensor) -> float:
    x, y = x.detach().double(), y.detach().double()
    return float((x - y).norm() / x.norm().clamp_min(1e-30))


def _roundtrip(spec: str, x: torch.Tensor, info: TensorInfo, sender=None, receiver=None):
    """Compress on a sender instance, decompress on a separate receiver instance (as the runtime does)."""
    sender = sender or compressors.build(spec)
    receiver = receiver or compressors.build(spec)
    with torch.no_grad():
        payload = sender.compress(x, info)
        y = receiver.decompress(payload, info)
    return payload, y


def _bound(name: str) -> float:
    return REL_ERROR_BOUND.get(name, DEFAULT_BOUND)


# --------------------------------------------------------------------------- tests
def test_registry_lists_the_builtins():
    expected = {"none", "fp16", "bf16", "fp8", "quant", "qsgd", "topk", "randomk", "threshold", "powersgd"}
    assert expected <= set(compressors.available())


@pytest.mark.parametrize("name, spec", CASES)
def test_class_declarations_are_sane(name, spec):
    cls = get_class(name)
    assert issubclass(cls, Compressor) and cls.name == name
    assert cls.roles and set(cls.roles) <= set(TensorRole)
    assert compressors.build(spec).spec == compressors.canonical_spec(spec)
    assert (inspect.getdoc(cls) or "").strip(), f"{name} has no docstring"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name, spec, role", ROLE_CASES)
def test_roundtrip_keeps_shape_dtype_device_and_error_bound(name, spec, role, device):
    x = _randn(_shape_for(role, (4, 32, 384)), device=device)
    payload, y = _roundtrip(spec, x, _info(x, role))
    assert y.shape == x.shape and y.dtype == x.dtype and y.device == x.device
    assert isinstance(payload, tuple) and all(isinstance(t, torch.Tensor) for t in payload)
    assert all(t.device == x.device for t in payload), [t.device for t in payload]
    assert bool(torch.isfinite(y).all())
    assert _rel_err(x, y) <= _bound(name) + 1e-6, f"{spec}: relative error {_rel_err(x, y):.4f}"


@pytest.mark.parametrize("shape", ACTIVATION_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name, spec", CASES)
def test_payload_bytes_are_counted_and_smaller_than_raw(name, spec, shape):
    """Steady-state bytes: the second step on the same samples (AQ-SGD's first visit is exact)."""
    role = _main_role(name)
    x = _randn(_shape_for(role, shape) if role is not TensorRole.WEIGHT_GRAD else (int(torch.tensor(shape).prod()),))
    sender, receiver = compressors.build(spec), compressors.build(spec)
    _roundtrip(spec, x, _info(x, role, step=0, seed=1), sender, receiver)
    x = x + 0.1 * _randn(x.shape, seed=1)
    info = _info(x, role, step=1, seed=2)
    payload, _ = _roundtrip(spec, x, info, sender, receiver)
    assert payload_nbytes(payload) == sum(t.numel() * t.element_size() for t in payload)
    assert info.raw_nbytes == x.numel() * x.element_size()
    if name not in LOSSLESS:
        assert payload_nbytes(payload) < info.raw_nbytes, (
            f"{spec}: payload {payload_nbytes(payload)} B is not smaller than raw {info.raw_nbytes} B"
        )


def test_payload_bytes_also_smaller_for_weight_grad_buckets():
    for name, spec in [(c.values[0], c.values[1]) for c in CASES]:
        if spec is None or name in LOSSLESS or TensorRole.WEIGHT_GRAD not in get_class(name).roles:
            continue
        x = _randn((BUCKET_NUMEL,))
        sender, receiver = compressors.build(spec), compressors.build(spec)
        _roundtrip(spec, x, _info(x, TensorRole.WEIGHT_GRAD, step=0), sender, receiver)
        info = _info(x, TensorRole.WEIGHT_GRAD, step=1)
        payload, _ = _roundtrip(spec, x, info, sender, receiver)
        assert payload_nbytes(payload) < info.raw_nbytes, spec


@pytest.mark.parametrize("name, spec", CASES)
def test_same_seed_gives_same_payload(name, spec):
    role = _main_role(name)
    x = _randn(_shape_for(role, (4, 8, 24)))
    p1, y1 = _roundtrip(spec, x, _info(x, role, seed=7))
    p2, y2 = _roundtrip(spec, x, _info(x, role, seed=7))
    assert len(p1) == len(p2)
    for a, b in zip(p1, p2):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    assert torch.equal(y1, y2)


@pytest.mark.parametrize("name, spec", CASES)
def test_zeros_roundtrip_to_zeros(name, spec):
    role = _main_role(name)
    x = torch.zeros(_shape_for(role, (4, 8, 24)))
    _, y = _roundtrip(spec, x, _info(x, role))
    assert y.shape == x.shape and float(y.abs().max()) <= 1e-6


@pytest.mark.parametrize("name, spec", CASES)
def test_bf16_input(name, spec):
    role = _main_role(name)
    x = _randn(_shape_for(role, (4, 32, 384)), dtype=torch.bfloat16)
    _, y = _roundtrip(spec, x, _info(x, role))
    assert y.dtype == torch.bfloat16 and y.shape == x.shape
    assert _rel_err(x, y) <= _bound(name) + BF16_SLACK


@pytest.mark.parametrize("name, spec", CASES)
def test_odd_shapes(name, spec):
    role = _main_role(name)
    shapes = ODD_BUCKET_SHAPES if role is TensorRole.WEIGHT_GRAD else ODD_ACTIVATION_SHAPES
    for shape in shapes:
        x = _randn(shape, seed=len(shape))
        _, y = _roundtrip(spec, x, _info(x, role))
        assert y.shape == x.shape and y.dtype == x.dtype, (spec, shape)
        assert _rel_err(x, y) <= max(_bound(name), 1.0) + 1e-6, (spec, shape, _rel_err(x, y))


@pytest.mark.parametrize("name, spec", CASES)
def test_degenerate_shapes_roundtrip_or_are_refused_clearly(name, spec):
    role = _main_role(name)
    for shape in DEGENERATE_SHAPES["bucket" if role is TensorRole.WEIGHT_GRAD else "activation"]:
        x = _randn(shape, seed=3)
        try:
            _, y = _roundtrip(spec, x, _info(x, role))
        except CompressorError as e:
            assert "\n" not in str(e) and str(e).startswith(name), str(e)
            continue
        assert y.shape == x.shape and y.dtype == x.dtype, (spec, shape)
        assert _rel_err(x, y) <= max(_bound(name), 1.0) + 1e-6, (spec, shape, _rel_err(x, y))


@pytest.mark.parametrize("name, spec", CASES)
def test_empty_tensor_roundtrips_or_is_refused_clearly(name, spec):
    role = _main_role(name)
    x = torch.zeros((0,) if role is TensorRole.WEIGHT_GRAD else (0, 5))
    try:
        _, y = _roundtrip(spec, x, _info(x, role))
    except CompressorError:
        return  # a clear refusal is documented behaviour
    assert y.shape == x.shape and y.dtype == x.dtype


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")], ids=["nan", "inf", "-inf"])
@pytest.mark.parametrize("name, spec", CASES)
def test_non_finite_input_raises_or_passes_through_exactly(name, spec, bad):
    """Never a silent wrong number: a clear error, or (lossless ``none``) the exact input back."""
    role = _main_role(name)
    x = _randn(_shape_for(role, (4, 8, 24)))
    x.view(-1)[37] = bad
    if name in LOSSLESS:
        _, y = _roundtrip(spec, x, _info(x, role))
        assert y.dtype == x.dtype and torch.allclose(y, x, rtol=0, atol=0, equal_nan=True)
        return
    with pytest.raises(CompressorError, match="non-finite|NaN|Inf"):
        _roundtrip(spec, x, _info(x, role))


@pytest.mark.parametrize("name, spec", CASES)
def test_compress_keeps_no_autograd_graph(name, spec):
    cls = get_class(name)
    role = _main_role(name)
    x = _randn(_shape_for(role, (4, 8, 24))).requires_grad_()
    payload = compressors.build(spec).compress(x, _info(x, role))
    if not cls.differentiable:
        assert not any(t.requires_grad or t.grad_fn is not None for t in payload), spec


@pytest.mark.parametrize("name, spec", CASES)
def test_sender_and_receiver_stay_in_sync_over_steps(name, spec):
    """Separate instances over several steps of slowly drifting data (stateful plugins)."""
    role = _main_role(name)
    sender, receiver = compressors.build(spec), compressors.build(spec)
    base = _randn(_shape_for(role, (4, 8, 24)))
    for step in range(4):
        x = base + 0.1 * _randn(base.shape, seed=100 + step)
        _, y = _roundtrip(spec, x, _info(x, role, step=step, seed=step), sender, receiver)
        assert y.shape == x.shape and bool(torch.isfinite(y).all())
        assert _rel_err(x, y) <= 1.5 * max(_bound(name), 1.0), (spec, step, _rel_err(x, y))
    # evaluation passes (training=False) work too
    _, y = _roundtrip(spec, base, _info(base, role, step=-1, seed=99, training=False), sender, receiver)
    assert y.shape == base.shape


@pytest.mark.parametrize("name, spec", [c for c in CASES if c.values[1] and get_class(c.values[0]).linear])
def test_linear_compressors_sum_payloads(name, spec):
    """linear=True promises decompress(sum of payloads) == sum of decompressions (same seed)."""
    role = TensorRole.WEIGHT_GRAD if TensorRole.WEIGHT_GRAD in get_class(name).roles else _main_role(name)
    a, b = _randn(_shape_for(role, (4, 8, 24)), seed=1), _randn(_shape_for(role, (4, 8, 24)), seed=2)
    info = _info(a, role, seed=5)
    pa, ya = _roundtrip(spec, a, info)
    pb, yb = _roundtrip(spec, b, info)
    summed = tuple(u + v for u, v in zip(pa, pb))
    y = compressors.build(spec).decompress(summed, info)
    assert y.shape == ya.shape and torch.allclose(y, ya + yb, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "name, spec", [c for c in CASES if c.values[1] and get_class(c.values[0]).reduce is not Compressor.reduce]
)
def test_custom_reduce_with_two_replicas(name, spec):
    """A custom ``reduce`` returns the same approximate mean on every replica (threads + barrier)."""
    xs = [_randn((BUCKET_NUMEL,), seed=s) for s in (1, 2)]
    instances = [compressors.build(spec), compressors.build(spec)]
    results: list = [None, None]
    errors: list = []
    barrier = threading.Barrier(2, timeout=10)  # a replica that raises early breaks it
    slots: list = [None, None]

    def all_reduce_for(rank):
        def all_reduce(t):
            slots[rank] = t.clone()
            barrier.wait()
            total = slots[0] + slots[1]
            barrier.wait()
            return total
        return all_reduce

    def replica(rank):
        try:
            x = xs[rank]
            results[rank] = instances[rank].reduce(x, _info(x, TensorRole.WEIGHT_GRAD, seed=3), all_reduce_for(rank))
        except BaseException as e:  # noqa: BLE001 - surfaced below
            errors.append(e)

    threads = [threading.Thread(target=replica, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    if results[0] is None:
        assert results[1] is None
        return
    assert torch.equal(results[0], results[1])
    mean = (xs[0] + xs[1]) / 2
    assert results[0].shape == mean.shape and _rel_err(mean, results[0]) <= max(_bound(name), 1.0) + 1e-6
