"""Records spell out every compressor parameter (``specs_resolved``), so ``quant`` reads ``quant(bits=8, ...)``."""

from __future__ import annotations

from suite.bench.record_builder import resolved_spec


def test_defaults_are_spelled_out_and_given_values_kept():
    full = resolved_spec("quant")
    assert full.startswith("quant(") and "bits=8" in full
    assert "bits=4" in resolved_spec("quant(bits=4)") and "bits=8" not in resolved_spec("quant(bits=4)")
    assert resolved_spec("none") == "none"
    assert "ratio=0.01" in resolved_spec("ef(topk(ratio=0.01))")


def test_an_unparsable_spec_is_kept_as_given():
    assert resolved_spec("bogus(") == "bogus("
