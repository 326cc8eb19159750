"""Re-modeling older records in worker processes (the cold index's hot spot, issue 35): the rows are
the serial build's, value for value, and the re-modeling budget bounds the workers too."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from leaderboard import frame, remodel_pool
from suite import settings
from suite.results.time_model import TIME_MODEL_VERSION

BASELINES = Path(__file__).resolve().parents[2] / "records" / "mpcbench-baselines"


def _old_records(n: int) -> list[dict]:
    """``n`` committed records of an older network model (re-modeled when rows are built), smallest first."""
    from leaderboard.submissions import load_entry

    records, _ = load_entry(BASELINES)
    old = [r for r in records if r.get("model_version") is None and isinstance(r.get("timing_inputs"), dict)]
    old.sort(key=lambda r: len(json.dumps(r["timing_inputs"])))
    for r in old:  # simulated, not read from the entry's times.json (leaderboard.times_file)
        r.pop("retimed", None)
    if len(old) < n:
        pytest.skip("the committed records hold no records of an older network model")
    return old[:n]


@pytest.fixture
def fresh(monkeypatch):
    frame._remodel.cache_clear()
    frame._COSTS.clear()
    monkeypatch.setattr(remodel_pool, "MIN_REQUESTS", 1)
    monkeypatch.setattr(settings, "usable_cpus", lambda: 2)
    monkeypatch.delenv("MPCBENCH_INDEX_WORKERS", raising=False)
    yield
    frame._remodel.cache_clear()
    frame._COSTS.clear()


def test_rows_remodeled_in_workers_equal_the_serial_ones(fresh, monkeypatch):
    records = _old_records(3)
    budget = frame.RemodelBudget()
    par = frame.to_frame([dict(r) for r in records], details=False, budget=budget)
    assert len(budget.prefetched) == 3 and budget.left < frame.REMODEL_BUDGET_S  # the workers' CPU counted
    frame._remodel.cache_clear()
    frame._COSTS.clear()
    monkeypatch.setenv("MPCBENCH_INDEX_WORKERS", "1")  # serial
    serial_budget = frame.RemodelBudget()
    ser = frame.to_frame([dict(r) for r in records], details=False, budget=serial_budget)
    assert not serial_budget.prefetched
    pd.testing.assert_frame_equal(par, ser)
    assert (par["model_version"] == float(TIME_MODEL_VERSION)).all()


def test_the_workers_share_the_budget_and_an_empty_one_remodels_nothing(fresh):
    records = _old_records(2)
    none_left = frame.RemodelBudget(seconds=0.0)
    rows = frame.to_frame([dict(r) for r in records], details=False, budget=none_left)
    assert not none_left.prefetched and none_left.skipped == 2 and rows["model_version"].isna().all()
    text = json.dumps(records[0]["timing_inputs"], sort_keys=True, separators=(",", ":"))
    request = (text, tuple(p for p in records[0]["modeled"] if p in frame.model.PROFILES))
    assert remodel_pool.remodel_in_workers([request] * 20, 0.0) == {}
