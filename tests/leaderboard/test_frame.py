"""leaderboard.frame: one row per record; modeled times from one network model."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leaderboard.frame import to_frame
from suite.results.network import MODEL_VERSION, PROFILES
from suite.results.time_model import TIME_MODEL_VERSION


def test_every_record_is_priced_by_the_time_model_and_stored_times_never_shown(lb):
    """Issue 44: the board's times are the time model's, whatever a record stores as its own modeled
    times or model version; a record without usable inputs has no modeled time at all."""
    from leaderboard.frame import board_times

    current = lb.make_record("cifar10", "none", 0)
    older = {k: v for k, v in current.items() if k != "model_version"}
    older["record_id"] = "0" * 32
    stale = dict(current, model_version=MODEL_VERSION - 1, record_id="1" * 32)
    rows = to_frame([current, older, stale], details=False).set_index("record_id")
    _, fresh = board_times(current)
    for prof in PROFILES:
        col = f"total_s@{prof}"
        for rid in (current["record_id"], older["record_id"], stale["record_id"]):
            assert rows.loc[rid, col] == fresh[prof]["total_s"]
    for prof, stored in current["modeled"].items():
        assert fresh[prof]["total_s"] != pytest.approx(stored["total_s"])  # the fixture's times are not the model's
    assert list(rows.model_version) == [TIME_MODEL_VERSION] * 3
    bare = {k: v for k, v in older.items() if k != "timing_inputs"}
    row = to_frame([bare], details=False).iloc[0]
    assert math.isnan(row.get("total_s@1Gbps", math.nan)) and math.isnan(row["model_version"])


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
