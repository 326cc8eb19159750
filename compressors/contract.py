"""The generic compressor contract as pytest tests, for the built-ins and any plugin.

Every compressor must pass these: round trip on a separate sender and receiver instance
(shape, dtype, device, finite output, error bound), payload only tensors and bytes counted
from them, every declared role, determinism from ``info.seed``, state isolation between
instances, evaluation passes that leave the state alone, bf16 / odd / degenerate / empty /
non-finite inputs, no autograd graph, linearity and custom ``reduce`` where declared.

Which compressors are tested is decided at collection time (``pytest_generate_tests``):

* ``--compressor SPEC`` (repeatable): exactly these specs;
* else ``--plugin MODULE_OR_FILE`` (repeatable): every compressor those plugins register;
* else every name in ``compressors.available()`` (built-ins and installed plugins), each at
  ``DEFAULT_SPECS[name]`` or its default spec.

Run it with ``mpcbench check my_comp.py ['mine(k=4)' ...]`` (this file, with pytest's
output), ``pytest tests/compressors/test_roundtrip.py --plugin my_comp.py`` or, from any
test module, ``from compressors.contract import *``. The options come from the mpcbench
pytest plugin (``suite.bench.pytest_plugin``); without it, every registered name is tested.
"""

from __future__ import annotations

import dataclasses
import inspect
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, NoReturn, Sequence

import pytest
import torch

import compressors
from compressors.api import (
    Compressor,
    CompressorError,
    TensorInfo,
    TensorRole,
    payload_dtype_problem,
    payload_nbytes,
    payload_type_problem,
)
from compressors.registry import default_spec, get_class, load_plugin, parse_spec

__all__ = [
    "Case",
    "contract_cases",
    "plugin_compressors",
    "pytest_generate_tests",
    "DEFAULT_SPECS",
    "REL_ERROR_BOUND",
    "test_class_declarations_are_sane",
    "test_roundtrip_keeps_shape_dtype_device_and_error_bound",
    "test_payload_bytes_are_counted_and_smaller_than_raw",
    "test_weight_grad_bucket_payload_is_smaller_than_raw",
    "test_same_seed_gives_same_payload",
    "test_instances_share_no_state",
    "test_evaluation_leaves_state_alone",
    "test_zeros_roundtrip_to_zeros",
    "test_bf16_input",
    "test_odd_shapes",
    "test_degenerate_shapes_roundtrip_or_are_refused_clearly",
    "test_empty_tensor_roundtrips_or_is_refused_clearly",
    "test_non_finite_input_raises_or_passes_through_exactly",
    "test_compress_keeps_no_autograd_graph",
    "test_sender_and_receiver_stay_in_sync_over_steps",
    "test_linear_compressors_sum_payloads",
    "test_custom_reduce_with_two_replicas",
    "private_compressor_cache",
    "contract_root_causes",
]

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
DEFAULT_BOUND = 1.0  # unknown plugins (and any spec given explicitly): no worse than sending zeros
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


# --------------------------------------------------------------------------- which compressors
@dataclass(frozen=True)
class Case:
    """One compressor under test: its registered name, the spec built (None: skipped, with why)."""

    name: str
    spec: str | None
    skip: str = ""
    explicit: bool = False  # given with --compressor: its family bound does not apply

    @property
    def cls(self) -> type[Compressor]:
        return get_class(self.name)


def _default_case(name: str) -> Case:
    if name in DEFAULT_SPECS:
        return Case(name, DEFAULT_SPECS[name])
    cls = get_class(name)
    if cls.requires:
        return Case(name, None, f"{name} requires model features {sorted(cls.requires)}; test it with a fake feature")
    try:
        return Case(name, default_spec(name))
    except CompressorError as e:
        return Case(name, None, f"{e}; name a spec: mpcbench check PLUGIN '{name}(...)'")


def plugin_compressors(target: str) -> list[str]:
    """Import a plugin (module name or ``.py`` file) and return the names it registers.

    Names registered on this import, plus (for a plugin imported earlier, e.g. through its
    entry point) every registered class whose source file is the plugin's file or lies in its
    package folder. Raises :class:`CompressorError` (one line) if it fails to import.
    """
    from compressors import registry

    compressors.available()  # built-ins and entry points first: they are not this plugin's
    before = dict(registry._REGISTRY)
    load_plugin(target)
    names = {n for n, c in registry._REGISTRY.items() if before.get(n) is not c}
    if target.endswith(".py") or "/" in target:
        where = Path(target).resolve()
    else:
        import importlib

        where = Path(getattr(importlib.import_module(target), "__file__", "") or ".").resolve()
    if where.name == "__init__.py":
        where = where.parent
    for n in compressors.available():
        try:
            src = Path(inspect.getfile(get_class(n))).resolve()
        except (TypeError, OSError):
            continue
        if src == where or where in src.parents:
            names.add(n)
    return sorted(names)


def contract_cases(specs: Sequence[str] = (), plugins: Sequence[str] = ()) -> list[Case]:
    """The compressors to test: ``specs``, else the plugins' compressors, else every registered name."""
    for p in plugins:
        load_plugin(p)
    if specs:
        return [Case(parse_spec(s).name, compressors.canonical_spec(s), explicit=True) for s in specs]
    if plugins:
        names = sorted({n for p in plugins for n in plugin_compressors(p)})
        if not names:
            raise CompressorError(
                f"plugin(s) {', '.join(plugins)} registered no compressor: decorate a compressors.Compressor subclass "
                "with @compressors.register('name')"
            )
        return [_default_case(n) for n in names]
    return [_default_case(n) for n in compressors.available()]


_CASES_KEY = pytest.StashKey[Any]()


def _session_cases(config: pytest.Config) -> list[Case]:
    """Cases for this pytest session, from ``--compressor`` / ``--plugin`` (planned once)."""
    if _CASES_KEY not in config.stash:
        # the options of suite.bench.options (pytest dests ``mpcbench_<flag>``), read loosely: no import of suite
        specs = list(getattr(config.option, "mpcbench_compressor", None) or [])
        plugins = list(getattr(config.option, "mpcbench_plugin", None) or [])
        try:
            config.stash[_CASES_KEY] = contract_cases(specs, plugins)
        except CompressorError as e:
            config.stash[_CASES_KEY] = str(e)
    cases = config.stash[_CASES_KEY]
    if isinstance(cases, str):
        pytest.fail(f"mpcbench contract: {cases}", pytrace=False)
    return cases


def _only(predicate: Callable[[Case], bool], who: str) -> Callable:
    """Decorator: the test applies only to compressors for which ``predicate`` holds (``who``: which ones)."""

    def deco(fn: Callable) -> Callable:
        setattr(fn, "_contract_filter", (predicate, who))  # noqa: B010 (an attribute of a function: typed code cannot assign it)
        return fn

    return deco


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize ``case`` (and ``role``: every role the class declares) from the session's cases."""
    if "case" not in metafunc.fixturenames:
        return
    keep, who = getattr(metafunc.function, "_contract_filter", (None, ""))
    params = []
    for c in _session_cases(metafunc.config):
        skip = c.skip
        if not skip and keep is not None and not keep(c):
            skip = f"{c.name}: not applicable (only for compressors {who})"
        marks = [pytest.mark.skip(reason=skip)] if skip else []
        label = c.spec if c.explicit else c.name
        if "role" in metafunc.fixturenames:
            for role in sorted(c.cls.roles, key=lambda r: r.value):
                params.append(pytest.param(c, role, id=f"{label}-{role.value}", marks=marks))
        else:
            params.append(pytest.param(c, id=label, marks=marks))
    argnames = ["case", "role"] if "role" in metafunc.fixturenames else ["case"]
    metafunc.parametrize(argnames, params if len(argnames) > 1 else [p for p in params])


@pytest.fixture(autouse=True)
def private_compressor_cache(tmp_path, monkeypatch):
    """Stateful plugins (AQ-SGD buffers) write under the cache dir: keep it per test."""
    monkeypatch.setenv("MPCBENCH_CACHE_DIR", str(tmp_path / "cache"))


# --------------------------------------------------------------------------- root causes
# One bug of a plugin (a NaN in decompress, a float64 payload, an exception) breaks most clauses:
# the first clause that meets it fails naming it, every later clause that meets the same cause
# is skipped naming it and where it was reported, so ``check`` lists one failure per bug.
_CAUSES_KEY = pytest.StashKey[dict]()
_current: dict[str, Any] = {"causes": {}, "test": ""}


@pytest.fixture(autouse=True)
def contract_root_causes(request):
    """Point the round-trip helpers at this session's causes and name the running clause."""
    causes = request.config.stash.setdefault(_CAUSES_KEY, {})
    _current.update(causes=causes, test=request.node.name)
    yield


def _root_cause(spec: str, kind: str, message: str) -> NoReturn:
    """Fail with ``message`` the first time ``spec`` meets a cause of this ``kind``; skip every
    later clause that meets it, naming the cause and the clause that reported it."""
    causes: dict[tuple[str, str], str] = _current["causes"]
    first = causes.setdefault((spec, kind), _current["test"])
    if first != _current["test"]:
        pytest.skip(f"{spec}: skipped, depends on '{kind}' (reported in {first})")
    pytest.fail(message, pytrace=False)


def _one_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"


def _call(spec: str, what: str, fn: Callable[[], Any]) -> Any:
    """``fn()`` (a plugin's compress or decompress); an exception other than CompressorError (the
    documented refusal, which clauses test for) is a root cause."""
    try:
        return fn()
    except CompressorError:
        raise
    except Exception as e:  # noqa: BLE001 - the plugin's own bug, reported once
        _root_cause(spec, f"{what} raised {type(e).__name__}", f"{spec}: {what} raised {_one_line(e)}")


def _decompress(spec: str, comp: Compressor, payload: tuple, info: TensorInfo) -> torch.Tensor:
    """``comp.decompress``; non-finite values decoded from a finite payload are its own (a root cause)."""
    y = _call(spec, "decompress", lambda: comp.decompress(payload, info))
    if isinstance(y, torch.Tensor) and y.is_floating_point() and not bool(torch.isfinite(y.detach()).all()):
        if all(bool(torch.isfinite(t).all()) for t in payload if isinstance(t, torch.Tensor) and t.is_floating_point()):
            bad = int((~torch.isfinite(y.detach())).sum())
            _root_cause(
                spec,
                "decompress returned NaN/Inf",
                f"{spec}: decompress returned {bad} non-finite value(s) (NaN/Inf) of {y.numel()} from a finite "
                "payload: the decoder made them",
            )
    return y


# --------------------------------------------------------------------------- helpers
def _main_role(case: Case) -> TensorRole:
    roles = case.cls.roles
    return TensorRole.ACTIVATION if TensorRole.ACTIVATION in roles else sorted(roles, key=lambda r: r.value)[0]


def _shape_for(role: TensorRole, activation_shape: tuple[int, ...]) -> tuple[int, ...]:
    return (BUCKET_NUMEL,) if role is TensorRole.WEIGHT_GRAD else activation_shape


def _info(x: torch.Tensor, role: TensorRole, *, step: int = 0, seed: int = 1234, training: bool = True) -> TensorInfo:
    ids = None
    if role is not TensorRole.WEIGHT_GRAD:
        ids = torch.arange(x.shape[0] if x.dim() else 1, dtype=torch.int64)
    return TensorInfo(
        role=role,
        boundary=0,
        microbatch=0,
        step=step,
        shape=x.shape,
        dtype=x.dtype,
        device=x.device,
        sample_ids=ids,
        seed=seed,
        training=training,
    )


def _randn(shape, *, seed: int = 0, dtype=torch.float32, device="cpu") -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(dtype=dtype, device=device)


def _rel_err(x: torch.Tensor, y: torch.Tensor) -> float:
    x, y = x.detach().double(), y.detach().double()
    return float((x - y).norm() / x.norm().clamp_min(1e-30))


def _compress(spec: str, comp: Compressor, x: torch.Tensor, info: TensorInfo) -> tuple:
    """``comp.compress``, with a payload that is no tuple of tensors (or too wide) failing the test in one
    line: the runtime's rules in its words, never the payload's repr (a Python list of floats is megabytes)."""
    payload = _call(spec, "compress", lambda: comp.compress(x, info))
    if why := payload_type_problem(payload):
        _root_cause(spec, "payload not a tuple of tensors", f"{spec}: compress must return a tuple of tensors, {why}")
    if why := payload_dtype_problem(payload, x.dtype):
        _root_cause(spec, "payload wider than the input", f"{spec}: compress: {why}")
    return payload


def _roundtrip(spec: str, x: torch.Tensor, info: TensorInfo, sender=None, receiver=None):
    """Compress on a sender instance, decompress on a separate receiver instance (as the runtime does)."""
    sender = sender or compressors.build(spec)
    receiver = receiver or compressors.build(spec)
    with torch.no_grad():
        payload = _compress(spec, sender, x, info)
        y = _decompress(spec, receiver, payload, info)
    return payload, y


def _bound(case: Case) -> float:
    return DEFAULT_BOUND if case.explicit else REL_ERROR_BOUND.get(case.name, DEFAULT_BOUND)


def _assert_same(a: tuple, b: tuple, what: str) -> None:
    assert len(a) == len(b), f"{what}: {len(a)} vs {len(b)} payload tensors"
    for i, (u, v) in enumerate(zip(a, b)):
        assert u.dtype == v.dtype and u.shape == v.shape and torch.equal(u, v), f"{what}: payload tensor {i} differs"


def _drive(case: Case, role: TensorRole, pair: tuple, steps: range, *, shape=(4, 8, 24), offset: int = 0) -> list:
    """Training round trips on ``pair`` over ``steps`` of slowly drifting data; returns the outputs."""
    base = _randn(_shape_for(role, shape), seed=offset)
    out = []
    for step in steps:
        x = base + 0.1 * _randn(base.shape, seed=1000 + offset + step)
        out.append(_roundtrip(case.spec, x, _info(x, role, step=step, seed=step), *pair))
    return out


# --------------------------------------------------------------------------- tests
def test_class_declarations_are_sane(case):
    cls = case.cls
    assert issubclass(cls, Compressor) and cls.name == case.name
    assert cls.roles and set(cls.roles) <= set(TensorRole), f"{case.name}: roles must be a non-empty set of TensorRole"
    assert compressors.build(case.spec).spec == compressors.canonical_spec(case.spec)
    assert (inspect.getdoc(cls) or "").strip(), f"{case.name} has no docstring (its first line is its summary)"


@pytest.mark.parametrize("device", DEVICES)
def test_roundtrip_keeps_shape_dtype_device_and_error_bound(case, role, device):
    x = _randn(_shape_for(role, (4, 32, 384)), device=device)
    payload, y = _roundtrip(case.spec, x, _info(x, role))
    assert y.shape == x.shape and y.dtype == x.dtype and y.device == x.device, (
        f"{case.spec}: decompress returned {tuple(y.shape)} {y.dtype} on {y.device}, "
        f"expected {tuple(x.shape)} {x.dtype} on {x.device}"
    )
    assert all(t.device == x.device for t in payload), [t.device for t in payload]
    assert bool(torch.isfinite(y).all()), f"{case.spec}: non-finite output"
    assert _rel_err(x, y) <= _bound(case) + 1e-6, f"{case.spec}: relative error {_rel_err(x, y):.4f} > {_bound(case)}"


@pytest.mark.parametrize("shape", ACTIVATION_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_payload_bytes_are_counted_and_smaller_than_raw(case, shape):
    """Steady-state bytes: the second step on the same samples (AQ-SGD's first visit is exact)."""
    role = _main_role(case)
    x = _randn(_shape_for(role, shape) if role is not TensorRole.WEIGHT_GRAD else (int(torch.tensor(shape).prod()),))
    sender, receiver = compressors.build(case.spec), compressors.build(case.spec)
    _roundtrip(case.spec, x, _info(x, role, step=0, seed=1), sender, receiver)
    x = x + 0.1 * _randn(x.shape, seed=1)
    info = _info(x, role, step=1, seed=2)
    payload, _ = _roundtrip(case.spec, x, info, sender, receiver)
    assert payload_nbytes(payload) == sum(t.numel() * t.element_size() for t in payload)
    assert info.raw_nbytes == x.numel() * x.element_size()
    if case.name not in LOSSLESS:
        nbytes, raw = payload_nbytes(payload), info.raw_nbytes  # numbers in the message, not the tensors
        assert nbytes < raw, f"{case.spec}: payload {nbytes} B is not smaller than raw {raw} B"


@_only(lambda c: c.name not in LOSSLESS and TensorRole.WEIGHT_GRAD in c.cls.roles, "with the weight_grad role")
def test_weight_grad_bucket_payload_is_smaller_than_raw(case):
    x = _randn((BUCKET_NUMEL,))
    sender, receiver = compressors.build(case.spec), compressors.build(case.spec)
    _roundtrip(case.spec, x, _info(x, TensorRole.WEIGHT_GRAD, step=0), sender, receiver)
    info = _info(x, TensorRole.WEIGHT_GRAD, step=1)
    payload, _ = _roundtrip(case.spec, x, info, sender, receiver)
    nbytes, raw = payload_nbytes(payload), info.raw_nbytes
    assert nbytes < raw, f"{case.spec}: payload {nbytes} B is not smaller than raw {raw} B"


def test_same_seed_gives_same_payload(case):
    """Randomness comes from ``info.seed`` only: fresh instances, same input and seed, same bits."""
    role = _main_role(case)
    x = _randn(_shape_for(role, (4, 8, 24)))
    torch.manual_seed(1)  # a plugin drawing from the global RNG instead of info.seed fails here
    p1, y1 = _roundtrip(case.spec, x, _info(x, role, seed=7))
    torch.manual_seed(2)
    p2, y2 = _roundtrip(case.spec, x, _info(x, role, seed=7))
    _assert_same(p1, p2, f"{case.spec}: same input and info.seed")
    assert torch.equal(y1, y2), f"{case.spec}: same payload decoded differently"


def test_instances_share_no_state(case):
    """Two sender/receiver pairs (two boundaries) must not see each other: no class or module state."""
    role = _main_role(case)
    build = compressors.build
    alone = _drive(case, role, (build(case.spec), build(case.spec)), range(3))
    a, b = (build(case.spec), build(case.spec)), (build(case.spec), build(case.spec))
    for step in range(3):  # interleave pair a with a pair b fed other data
        _drive(case, role, b, range(step, step + 1), offset=77)
        ((p, y),) = _drive(case, role, a, range(step, step + 1))
        _assert_same(alone[step][0], p, f"{case.spec}: step {step} beside another instance pair")
        assert torch.equal(alone[step][1], y), f"{case.spec}: step {step} output changed by another instance pair"


def test_evaluation_leaves_state_alone(case):
    """An evaluation pass (``info.training`` False) between training steps changes nothing after it."""
    role = _main_role(case)
    build = compressors.build
    plain = _drive(case, role, (build(case.spec), build(case.spec)), range(3))
    pair = (build(case.spec), build(case.spec))
    _drive(case, role, pair, range(2))
    x = _randn(_shape_for(role, (4, 8, 24)), seed=55)
    _roundtrip(case.spec, x, _info(x, role, step=2, seed=99, training=False), *pair)
    ((p, y),) = _drive(case, role, pair, range(2, 3))
    _assert_same(plain[2][0], p, f"{case.spec}: training step after an evaluation pass")
    assert torch.equal(plain[2][1], y), f"{case.spec}: an evaluation pass changed the next training output"


def test_zeros_roundtrip_to_zeros(case):
    role = _main_role(case)
    x = torch.zeros(_shape_for(role, (4, 8, 24)))
    _, y = _roundtrip(case.spec, x, _info(x, role))
    assert y.shape == x.shape and float(y.abs().max()) <= 1e-6, f"{case.spec}: zeros decode to max |y| {y.abs().max()}"


def test_bf16_input(case):
    role = _main_role(case)
    x = _randn(_shape_for(role, (4, 32, 384)), dtype=torch.bfloat16)
    _, y = _roundtrip(case.spec, x, _info(x, role))
    assert y.dtype == torch.bfloat16 and y.shape == x.shape, f"{case.spec}: bf16 in, {y.dtype} {tuple(y.shape)} out"
    assert _rel_err(x, y) <= _bound(case) + BF16_SLACK


def test_odd_shapes(case):
    role = _main_role(case)
    shapes = ODD_BUCKET_SHAPES if role is TensorRole.WEIGHT_GRAD else ODD_ACTIVATION_SHAPES
    for shape in shapes:
        x = _randn(shape, seed=len(shape))
        _, y = _roundtrip(case.spec, x, _info(x, role))
        assert y.shape == x.shape and y.dtype == x.dtype, (case.spec, shape)
        assert _rel_err(x, y) <= max(_bound(case), 1.0) + 1e-6, (case.spec, shape, _rel_err(x, y))


def test_degenerate_shapes_roundtrip_or_are_refused_clearly(case):
    role = _main_role(case)
    for shape in DEGENERATE_SHAPES["bucket" if role is TensorRole.WEIGHT_GRAD else "activation"]:
        x = _randn(shape, seed=3)
        try:
            _, y = _roundtrip(case.spec, x, _info(x, role))
        except CompressorError as e:
            assert "\n" not in str(e) and str(e).startswith(case.name), f"one line starting with the name: {e}"
            continue
        assert y.shape == x.shape and y.dtype == x.dtype, (case.spec, shape)
        assert _rel_err(x, y) <= max(_bound(case), 1.0) + 1e-6, (case.spec, shape, _rel_err(x, y))


def test_empty_tensor_roundtrips_or_is_refused_clearly(case):
    role = _main_role(case)
    x = torch.zeros((0,) if role is TensorRole.WEIGHT_GRAD else (0, 5))
    try:
        _, y = _roundtrip(case.spec, x, _info(x, role))
    except CompressorError:
        return  # a clear refusal is documented behaviour
    assert y.shape == x.shape and y.dtype == x.dtype


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")], ids=["nan", "inf", "-inf"])
def test_non_finite_input_raises_or_passes_through_exactly(case, bad):
    """Never a silent wrong number: a clear error, or (lossless ``none``) the exact input back."""
    role = _main_role(case)
    x = _randn(_shape_for(role, (4, 8, 24)))
    x.view(-1)[37] = bad
    if case.name in LOSSLESS:
        _, y = _roundtrip(case.spec, x, _info(x, role))
        assert y.dtype == x.dtype and torch.allclose(y, x, rtol=0, atol=0, equal_nan=True)
        return
    with pytest.raises(CompressorError, match="non-finite|NaN|Inf"):  # compressors.check_finite does this
        _roundtrip(case.spec, x, _info(x, role))


def test_compress_keeps_no_autograd_graph(case):
    role = _main_role(case)
    x = _randn(_shape_for(role, (4, 8, 24))).requires_grad_()
    payload = _compress(case.spec, compressors.build(case.spec), x, _info(x, role))
    if not case.cls.differentiable:
        assert not any(t.requires_grad or t.grad_fn is not None for t in payload), f"{case.spec}: detach the payload"


def test_sender_and_receiver_stay_in_sync_over_steps(case):
    """Separate instances over several steps of slowly drifting data (stateful plugins)."""
    role = _main_role(case)
    sender, receiver = compressors.build(case.spec), compressors.build(case.spec)
    base = _randn(_shape_for(role, (4, 8, 24)))
    for step in range(4):
        x = base + 0.1 * _randn(base.shape, seed=100 + step)
        _, y = _roundtrip(case.spec, x, _info(x, role, step=step, seed=step), sender, receiver)
        assert y.shape == x.shape and bool(torch.isfinite(y).all())
        assert _rel_err(x, y) <= 1.5 * max(_bound(case), 1.0), (case.spec, step, _rel_err(x, y))
    # evaluation passes (training=False) work too
    _, y = _roundtrip(case.spec, base, _info(base, role, step=-1, seed=99, training=False), sender, receiver)
    assert y.shape == base.shape


@_only(lambda c: c.cls.linear, "declaring linear = True")
def test_linear_compressors_sum_payloads(case):
    """linear=True promises decompress(sum of payloads) == sum of decompressions (same seed)."""
    role = TensorRole.WEIGHT_GRAD if TensorRole.WEIGHT_GRAD in case.cls.roles else _main_role(case)
    a, b = _randn(_shape_for(role, (4, 8, 24)), seed=1), _randn(_shape_for(role, (4, 8, 24)), seed=2)
    info = _info(a, role, seed=5)
    pa, ya = _roundtrip(case.spec, a, info)
    pb, yb = _roundtrip(case.spec, b, info)
    summed = tuple(u + v for u, v in zip(pa, pb))
    y = _decompress(case.spec, compressors.build(case.spec), summed, info)
    assert y.shape == ya.shape and torch.allclose(y, ya + yb, rtol=1e-5, atol=1e-6), f"{case.spec} is not linear"


@_only(lambda c: c.cls.reduce is not Compressor.reduce, "with a custom reduce")
def test_custom_reduce_with_two_replicas(case):
    """A custom ``reduce`` returns the same approximate mean on every replica (threads + barrier;
    a synchronous ``all_reduce``, no parameter layout; a returned Future is waited for)."""
    xs = [_randn((BUCKET_NUMEL,), seed=s) for s in (1, 2)]
    instances = [compressors.build(case.spec), compressors.build(case.spec)]
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
            x = xs[rank].clone()  # reduce may overwrite the bucket
            info = dataclasses.replace(_info(x, TensorRole.WEIGHT_GRAD, seed=3), replicas=2)
            out = instances[rank].reduce(x, info, all_reduce_for(rank))
            results[rank] = out.wait() if isinstance(out, torch.futures.Future) else out
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
    assert results[0].shape == mean.shape and _rel_err(mean, results[0]) <= max(_bound(case), 1.0) + 1e-6
