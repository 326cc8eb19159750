"""leaderboard.frame: one row per record; modeled times from one network model."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leaderboard.frame import to_frame
from suite.results.network import MODEL_VERSION, PROFILES, TimingInputs, model_run


def test_records_of_an_older_network_model_are_re_modeled_and_current_ones_kept(lb):
    current = lb.make_record("cifar10", "none", 0)
    older = {k: v for k, v in current.items() if k != "model_version"}  # written before versions: re-model
    older["record_id"] = "0" * 32
    stale = dict(current, model_version=MODEL_VERSION - 1, record_id="1" * 32)
    rows = to_frame([current, older, stale], details=False).set_index("record_id")
    fresh = model_run(TimingInputs.from_dict(current["timing_inputs"]), {p: PROFILES[p] for p in current["modeled"]})
    for prof, stored in current["modeled"].items():
        col = f"total_s@{prof}"
        assert rows.loc[current["record_id"], col] == stored["total_s"]  # the current model's own times
        for rid in (older["record_id"], stale["record_id"]):
            assert rows.loc[rid, col] == pytest.approx(fresh[prof]["total_s"])
        assert fresh[prof]["total_s"] != pytest.approx(stored["total_s"])  # the fixture's times are not the model's
    assert list(rows.model_version) == [MODEL_VERSION] * 3
    # no usable inputs: the stored times stay, and the row says it does not know the model
    bare = {k: v for k, v in older.items() if k != "timing_inputs"}
    row = to_frame([bare], details=False).iloc[0]
    assert row["total_s@1Gbps"] == current["modeled"]["1Gbps"]["total_s"] and math.isnan(row["model_version"])


_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(alphabet=st.characters(codec=None), max_size=6)  # lone surrogates too
    | st.sampled_from(["null", "a null b", "é", "\u2028"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=16,
)


@settings(max_examples=300, deadline=None)
@given(timing=st.dictionaries(st.text(max_size=4), _json_values, max_size=5))
def test_the_index_inputs_text_reads_back_as_json_text(timing):
    """Issue 28: the index stores ``timing_inputs`` as orjson's text where that is cheaper and
    lossless; ``canonical_inputs`` gives back exactly json's compact text, whichever was stored."""
    from leaderboard.frame import canonical_inputs, inputs_text

    exact = json.dumps(timing, separators=(",", ":"))
    assert inputs_text(timing) == exact
    assert canonical_inputs(inputs_text(timing, exact=False)) == exact


def test_the_index_inputs_text_without_orjson(monkeypatch):
    import leaderboard.frame as frame

    timing = {"a": [1.5e-05, None, float("nan")], "b": {"c": 1}}
    monkeypatch.setattr(frame, "_orjson", None)
    assert frame.inputs_text(timing, exact=False) == json.dumps(timing, separators=(",", ":"))
    assert frame.canonical_inputs(frame.inputs_text({"b": 2.5e-7})) == '{"b":2.5e-07}'
