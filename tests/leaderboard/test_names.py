"""Short display names: a label per built-in, a plugin's declared one, the spec as typed otherwise."""

from __future__ import annotations

import pytest

from compressors.registry import available, get_class
from leaderboard.names import BUILTIN_LABELS, display_name


def test_every_builtin_compressor_has_a_label():
    builtins = {n for n in available() if get_class(n).__module__.startswith("compressors.builtins.")}
    assert builtins == set(BUILTIN_LABELS)
    assert all(0 < len(label) <= 16 for label in BUILTIN_LABELS.values())


@pytest.mark.parametrize(
    "typed, shown",
    [
        ("topk", "top-k 10%"),
        ("ef(topk)", "EF(top-k 10%)"),
        ("fwd=ae,bwd=none", "fwd=autoencoder 1/8,bwd=none"),
        ("none|tp=quant", "none|tp=int8"),
        ("topk(ratio=0.01)", "topk(ratio=0.01)"),  # parameters given: shown as typed
        ("fwd=topk,bwd=ef(topk, memory=microbatch)", "fwd=top-k 10%,bwd=ef(topk, memory=microbatch)"),
        ("mine", "mine"),  # a plugin without a label
    ],
)
def test_display_name_replaces_default_builtins_only(typed, shown):
    assert display_name(typed) == shown


def test_a_plugins_declared_label_is_used():
    assert display_name("ef(mine)", {"mine": "sign 1-bit"}) == "EF(sign 1-bit)"


def test_the_runner_records_a_plugins_declared_label(tmp_path, restore_registry):
    from compressors.registry import load_plugin
    from suite.bench.record_builder import display_label

    (tmp_path / "labelled.py").write_text(
        "from compressors import Compressor, register\n"
        "@register('labelled_cc')\n"
        "class Labelled(Compressor):\n"
        "    label = 'sign 1-bit'\n"
        "    def compress(self, x, info): return (x,)\n"
        "    def decompress(self, p, info): return p[0]\n"
    )
    load_plugin(str(tmp_path / "labelled.py"))
    assert display_label("ef(labelled_cc)", ["ef(labelled_cc)"]) == "EF(sign 1-bit)"
    assert display_label("topk", ["topk"]) == ""  # built-ins: the board's own table
