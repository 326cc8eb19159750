"""Tensor-parallel records on the leaderboard (issue 25): the setup says tp=2, the label names
the TP compressor, and the per-kind byte columns (tp_forward, tp_backward) join the total."""

from __future__ import annotations

from leaderboard.frame import BYTE_DIRECTIONS, _spec_label, setup_label


def test_setup_and_label_name_tensor_parallelism():
    record = {"config": {"stages": 2, "tp": 2, "schedule": "1f1b", "mode": "single"}}
    assert "tp=2" in setup_label(record)
    assert "tp" not in setup_label({"config": {"stages": 2, "tp": 1}})
    specs = {"forward": "none", "backward": "none", "dp": "none", "tp_forward": "quant(bits=8)"}
    assert _spec_label({**specs, "tp_backward": "quant(bits=8)"}, "x") == "none | tp quant(bits=8)"
    assert _spec_label({**specs, "tp_backward": "none"}, "x") == "none | tp fwd=quant(bits=8),bwd=none"
    assert _spec_label({"forward": "topk", "backward": "topk", "dp": "none"}, "x") == "topk"


def test_tp_kinds_are_byte_directions_next_to_the_total():
    assert {"tp_forward", "tp_backward", "total"} <= set(BYTE_DIRECTIONS)
