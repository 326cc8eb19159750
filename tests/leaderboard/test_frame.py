"""leaderboard.frame: one row per record; modeled times from one network model."""

from __future__ import annotations

import math

import pytest

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
