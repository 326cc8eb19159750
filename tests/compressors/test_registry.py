"""Registry: @register, spec parsing and building, error messages, plugin loading and discovery."""

from __future__ import annotations

import importlib.metadata
import sys
import textwrap
import types

import pytest
import torch

import compressors
from compressors import Compressor, CompressorError, registry
from compressors.registry import Spec, check_choice, check_range


@pytest.fixture
def sandbox(monkeypatch):
    """A private copy of the registry state: test classes never leak into available()."""
    registry.discover()  # built-ins and real plugins in first, then copy
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.setattr(registry, "_PLUGIN_ERRORS", dict(registry._PLUGIN_ERRORS))
    monkeypatch.setattr(registry, "_DISCOVERED", True)
    return registry


class _Ident(Compressor):
    """Identity test compressor with a validated parameter."""

    def __init__(self, gain: float = 1.0, mode: str = "a"):
        self.gain = check_range("ident", "gain", gain, 0.0, 10.0)
        self.mode = check_choice("ident", "mode", mode, ["a", "b"])

    def compress(self, x, info):
        return (x.detach().clone(),)

    def decompress(self, payload, info):
        return payload[0]


class _Wrap(Compressor):
    """Wrapper test compressor: takes a nested spec."""

    def __init__(self, inner: Compressor, depth: int = 1):
        self.inner = inner
        self.depth = depth


# --------------------------------------------------------------------------- @register
def test_register_makes_a_class_buildable_and_sets_its_name(sandbox):
    cls = type("Fresh", (_Ident,), {})
    assert sandbox.register("fresh_test")(cls) is cls
    assert cls.name == "fresh_test" and "fresh_test" in compressors.available()
    c = compressors.build("fresh_test(gain=2.5, mode=b)")
    assert isinstance(c, cls) and c.gain == 2.5 and c.mode == "b"
    assert c.spec == "fresh_test(gain=2.5, mode=b)"


def test_duplicate_name_raises_naming_both_classes(sandbox):
    with pytest.raises(CompressorError, match="already taken by the built-in compressors.builtins.sparsification.TopK"):
        sandbox.register("topk")(type("Other", (_Ident,), {}))
    assert compressors.get_class("topk").__name__ == "TopK"  # untouched


def test_a_duplicate_name_names_the_plugin_even_when_the_builtin_registers_second(sandbox):
    """A plugin loaded before the built-ins are imported takes the name first; the error the built-in then
    meets must still tell the plugin's author to rename, never the built-in."""
    plugin = type("MyTopK", (_Ident,), {"__module__": "my_plugin_module"})
    builtin = type("TopK", (_Ident,), {"__module__": "compressors.builtins.sparsification"})
    sandbox.register("topk_order_case")(plugin)
    with pytest.raises(CompressorError) as e:
        sandbox.register("topk_order_case")(builtin)
    msg = str(e.value)
    assert "the plugin class MyTopK (my_plugin_module)" in msg
    assert "taken by the built-in compressors.builtins.sparsification.TopK" in msg
    assert "@register('topk_order_case_mine')" in msg and "\n" not in msg


def test_reregistering_the_same_class_is_idempotent(sandbox):
    cls = compressors.get_class("topk")
    sandbox.register("topk")(cls)  # e.g. a module reload
    assert compressors.get_class("topk") is cls


@pytest.mark.parametrize("bad", ["not a name", "1abc", "", "a-b"])
def test_register_rejects_non_identifier_names(sandbox, bad):
    with pytest.raises(CompressorError, match="identifier"):
        sandbox.register(bad)


def test_register_rejects_non_compressor_classes(sandbox):
    with pytest.raises(CompressorError, match="must subclass"):
        sandbox.register("plain_test")(type("Plain", (), {}))


def test_unknown_name_lists_valid_names():
    with pytest.raises(CompressorError) as e:
        compressors.build("topkk(ratio=0.1)")
    msg = str(e.value)
    assert "unknown compressor 'topkk'" in msg
    for name in ("none", "topk", "quant", "powersgd"):
        assert name in msg
    assert "\n" not in msg


# --------------------------------------------------------------------------- spec parsing
@pytest.mark.parametrize(
    "text, expected",
    [
        ("none", Spec("none")),
        ("topk(ratio=0.1)", Spec("topk", (), (("ratio", 0.1),))),
        (
            "quant(bits=4, scale=row, rounding=stochastic)",
            Spec("quant", (), (("bits", 4), ("scale", "row"), ("rounding", "stochastic"))),
        ),
        ("topk(per_sample=true)", Spec("topk", (), (("per_sample", True),))),
        ("x(a='two words', b=-3, c=none)", Spec("x", (), (("a", "two words"), ("b", -3), ("c", None)))),
        ("ef(topk(ratio=0.1))", Spec("ef", (Spec("topk", (), (("ratio", 0.1),)),))),
        (
            "ef(inner=ef21(quant(bits=2)))",
            Spec("ef", (), (("inner", Spec("ef21", (Spec("quant", (), (("bits", 2),)),))),)),
        ),
    ],
)
def test_parse_spec(text, expected):
    assert compressors.parse_spec(text) == expected


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("", "empty compressor spec"),
        ("topk(ratio=", "cannot parse"),
        ("topk(**kw)", "'**' is not allowed"),
        ("topk(ratio=[0.1])", "unsupported value"),
        ("a.b", "expected name"),
        ("topk(ratio=0.1\x00)", "NUL byte"),  # Python 3.11's ast.parse raised ValueError, not a spec error
    ],
)
def test_parse_errors_name_the_text(text, fragment):
    with pytest.raises(CompressorError, match=fragment.replace("(", r"\(").replace("*", r"\*")):
        compressors.parse_spec(text)


@pytest.mark.parametrize(
    "spec, fragment",
    [
        ("quant(bits=9)", "quant: parameter bits=9 must be an integer in [1, 8]"),
        ("quant(bits=2.5)", "quant: parameter bits=2.5 must be an integer in [1, 8]"),
        ("quant(scale=col)", "quant: parameter scale='col' is not allowed; allowed values: tensor, row, block"),
        ("quant(rounding=up)", "parameter rounding='up' is not allowed; allowed values: nearest, stochastic"),
        ("quant(block=1)", "quant: parameter block=1 must be an integer"),
        ("qsgd(levels=0)", "qsgd: parameter levels=0 must be an integer in [1, 127]"),
        ("qsgd(bucket=1)", "qsgd: parameter bucket=1 is not allowed"),
        ("topk(ratio=0)", "topk: parameter ratio=0 must be a number"),
        ("topk(ratio=1.5)", "topk: parameter ratio=1.5 must be a number"),
        ("randomk(unbiased=3)", "randomk: parameter unbiased=3 must be true or false"),
        (
            "topk(granularity=row)",
            "topk: parameter granularity='row' is not allowed; allowed values: tensor, sample, token",
        ),
        ("randomk(ratio=-0.1)", "randomk: parameter ratio=-0.1"),
        ("threshold(sample=2)", "threshold: parameter sample=2"),
        ("powersgd(rank=0)", "powersgd: parameter rank=0 must be an integer"),
        ("powersgd(warm_start=1)", "powersgd: parameter warm_start=1 must be true or false"),
        ("quant(bitz=4)", "quant: unknown parameter 'bitz'; valid parameters: bits, scale, block, rounding, range"),
        ("quant(4, bits=4)", "quant: parameter 'bits' given twice"),
        ("quant(1, row, 64, nearest, minmax, 5)", "quant: takes at most 5 positional argument(s)"),
        ("quant(bits=topk)", "quant: parameter bits='topk' must be an integer in [1, 8]"),
        ("quant(bits=topk(ratio=0.1))", "quant: parameter 'bits' does not take a compressor spec"),
        ("ef", "ef: missing required parameter(s) inner"),
        ("ef(inner=3)", "ef: parameter 'inner' must be a compressor spec"),
        ("ef(topk(ratio=7))", "topk: parameter ratio=7"),
        ("ef(nonsense)", "unknown compressor 'nonsense'"),
    ],
)
def test_bad_parameters_name_the_parameter(spec, fragment):
    with pytest.raises(CompressorError) as e:
        compressors.build(spec)
    assert fragment in str(e.value), str(e.value)
    assert "\n" not in str(e.value)


def test_positional_arguments_map_to_parameters_in_order():
    q = compressors.build("quant(4, block, 32)")
    assert (q.bits, q.scale, q.block) == (4, "block", 32)


def test_nested_wrappers_build_their_inner_compressor(sandbox):
    sandbox.register("wrap_test")(_Wrap)
    sandbox.register("ident_test")(_Ident)
    w = compressors.build("wrap_test(wrap_test(ident_test(gain=3)), depth=2)")
    assert isinstance(w.inner, _Wrap) and isinstance(w.inner.inner, _Ident)
    assert w.inner.inner.gain == 3 and w.depth == 2
    assert w.inner.inner.spec == "ident_test(gain=3)"
    # a bare word for a compressor-typed parameter is a spec with no arguments
    assert isinstance(compressors.build("wrap_test(ident_test)").inner, _Ident)
    with pytest.raises(CompressorError, match="ident: parameter gain=11"):
        compressors.build("wrap_test(ident_test(gain=11))")
    with pytest.raises(CompressorError, match="parameter 'depth' does not take a compressor spec"):
        compressors.build("wrap_test(ident_test, depth=ident_test(gain=1))")


def test_canonical_spec_normalizes_and_validates():
    assert compressors.canonical_spec(" quant( bits = 4 ,scale=row ) ") == "quant(bits=4, scale=row)"
    assert compressors.canonical_spec("randomk(unbiased=True)") == "randomk(unbiased=true)"
    assert compressors.canonical_spec("ef(topk( ratio=0.1 ))") == "ef(topk(ratio=0.1))"
    with pytest.raises(CompressorError):
        compressors.canonical_spec("quant(bits=9)")


def test_describe_reports_parameters_roles_and_summary():
    d = compressors.describe("quant")
    assert d["params"] == {"bits": 8, "scale": "row", "block": 64, "rounding": "nearest", "range": "minmax"}
    assert set(d["roles"]) == {
        "activation",
        "activation_grad",
        "weight_grad",
        "tp_activation",
        "tp_activation_grad",
        "pseudo_grad",
    }
    assert "Chen et al. 2021" in d["summary"] and d["requires"] == []
    assert compressors.describe("randomk")["linear"] is True


def test_source_hash_is_stable_and_covers_nested_specs():
    h = compressors.source_hash("topk(ratio=0.1)")
    assert len(h) == 16 and h == compressors.source_hash("topk(ratio=0.5)")
    assert compressors.source_hash("ef(topk(ratio=0.1))") != h
    assert compressors.source_hash("quant") != h


# --------------------------------------------------------------------------- plugins
def test_load_plugin_from_a_py_file(sandbox, tmp_path):
    f = tmp_path / "my_plugin.py"
    f.write_text(
        textwrap.dedent('''
        from compressors import Compressor, register

        @register("file_plugin_test")
        class Half(Compressor):
            """Halve (a test plugin)."""
            def compress(self, x, info):
                return ((x.detach() / 2),)
            def decompress(self, payload, info):
                return payload[0] * 2
    ''')
    )
    sandbox.load_plugin(str(f))
    assert "file_plugin_test" in compressors.available()
    c = compressors.build("file_plugin_test")
    assert torch.equal(c.decompress(c.compress(torch.ones(3), None), None), torch.ones(3))


def test_load_plugin_errors_are_one_line(sandbox, tmp_path):
    with pytest.raises(CompressorError, match="no such file"):
        sandbox.load_plugin(str(tmp_path / "missing.py"))
    bad = tmp_path / "bad.py"
    bad.write_text("raise RuntimeError('boom\\nsecond line')\n")
    with pytest.raises(CompressorError) as e:
        sandbox.load_plugin(str(bad))
    assert "RuntimeError: boom second line" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(CompressorError, match="failed to import: ModuleNotFoundError"):
        sandbox.load_plugin("no_such_module_for_mpcbench_tests")


def _fake_entry_points(monkeypatch, eps: list[importlib.metadata.EntryPoint]):
    seen = {}

    def entry_points(**kw):
        seen.update(kw)
        return [ep for ep in eps if ep.group == kw.get("group")]

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    return seen


def test_entry_point_discovery_registers_plugins_and_isolates_broken_ones(sandbox, monkeypatch):
    mod = types.ModuleType("fake_mpcbench_plugin")

    class Neg(_Ident):
        """Negate twice (undecorated: registered under its entry-point name)."""

    mod.Neg = Neg
    monkeypatch.setitem(sys.modules, "fake_mpcbench_plugin", mod)
    group = compressors.ENTRY_POINT_GROUP
    seen = _fake_entry_points(
        monkeypatch,
        [
            importlib.metadata.EntryPoint("neg_plugin", "fake_mpcbench_plugin:Neg", group),
            importlib.metadata.EntryPoint("broken_plugin", "fake_missing_module_xyz:Cls", group),
            importlib.metadata.EntryPoint("other_group", "fake_mpcbench_plugin:Neg", "some.other.group"),
        ],
    )
    monkeypatch.setattr(registry, "_DISCOVERED", False)
    errors = compressors.discover()
    assert seen == {"group": "mpcbench.compressors"}
    assert compressors.get_class("neg_plugin") is Neg and Neg.name == "neg_plugin"
    assert "other_group" not in compressors.available()
    # the broken plugin is reported, not raised, and only its own name fails
    assert "broken_plugin" in errors and "fake_missing_module_xyz" in errors["broken_plugin"]
    assert "broken_plugin" in compressors.plugin_errors()
    with pytest.raises(CompressorError, match="plugin 'broken_plugin' .* failed to import: ModuleNotFoundError"):
        compressors.build("broken_plugin")
    assert isinstance(compressors.build("topk"), Compressor)
    # discovery runs once
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda **kw: pytest.fail("rediscovered"))
    compressors.available()


def test_entry_point_that_self_registers_is_not_registered_twice(sandbox, monkeypatch):
    mod = types.ModuleType("fake_mpcbench_selfreg")
    cls = sandbox.register("selfreg_test")(type("SelfReg", (_Ident,), {"__doc__": "x"}))
    mod.SelfReg = cls
    monkeypatch.setitem(sys.modules, "fake_mpcbench_selfreg", mod)
    _fake_entry_points(
        monkeypatch,
        [importlib.metadata.EntryPoint("selfreg_test", "fake_mpcbench_selfreg:SelfReg", compressors.ENTRY_POINT_GROUP)],
    )
    monkeypatch.setattr(registry, "_DISCOVERED", False)
    assert compressors.discover() == {}
    assert [n for n in compressors.available() if n == "selfreg_test"] == ["selfreg_test"]


def test_entry_point_name_clash_is_reported_not_raised(sandbox, monkeypatch):
    """A plugin claiming a taken name must not break discovery of the others."""
    mod = types.ModuleType("fake_mpcbench_clash")
    mod.Clash = type("Clash", (_Ident,), {"__doc__": "claims 'topk'"})
    mod.Fine = type("Fine", (_Ident,), {"__doc__": "fine"})
    monkeypatch.setitem(sys.modules, "fake_mpcbench_clash", mod)
    g = compressors.ENTRY_POINT_GROUP
    _fake_entry_points(
        monkeypatch,
        [
            importlib.metadata.EntryPoint("topk", "fake_mpcbench_clash:Clash", g),
            importlib.metadata.EntryPoint("fine_plugin", "fake_mpcbench_clash:Fine", g),
        ],
    )
    monkeypatch.setattr(registry, "_DISCOVERED", False)
    errors = compressors.discover()
    assert "already taken" in errors["topk"]
    assert compressors.get_class("topk").__name__ == "TopK"
    assert compressors.get_class("fine_plugin") is mod.Fine


def test_a_payload_wider_than_its_input_and_float32_is_named_with_the_fix():
    import torch

    from compressors.api import payload_dtype_problem

    x32, x16 = torch.zeros(4), torch.zeros(4, dtype=torch.bfloat16)
    why = payload_dtype_problem((torch.zeros(2, dtype=torch.uint8), x32.double()), x32.dtype)
    assert why is not None and why.startswith("payload tensor 1 is torch.float64, wider than the input's torch.float32")
    assert "cast it to the input's dtype or smaller" in why
    assert payload_dtype_problem((x32, x32.half()), x32.dtype) is None
    assert payload_dtype_problem((x16, x16.float()), x16.dtype) is None  # float32 scales beside bf16 values: fine
    assert payload_dtype_problem((x32.double(),), torch.float64) is None  # a float64 input may send float64


def test_compressor_names_include_a_bare_word_a_wrapper_takes_as_its_compressor():
    """``ef(mycomp)`` builds ``mycomp`` although the parser reads it as a word: whoever asks which
    compressors a spec runs (the default mode of submitted ones, verify) must see it."""
    from compressors.registry import compressor_names

    assert compressor_names("ef(mycomp)") == {"ef", "mycomp"}
    assert compressor_names("ef(quant(bits=4))") == {"ef", "quant"}
    assert compressor_names("unknown(x=other)") == {"unknown"}  # an unknown class's words are not read
