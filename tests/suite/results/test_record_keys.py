"""The record's key lists live in the schema (``suite.results.records``); the record builder,
the runner's summaries and the leaderboard's frame follow them, so a key added there reaches
all three."""

from __future__ import annotations

from suite.bench.record_builder import failed_record
from suite.bench.runner import summarize_record
from suite.pipeline.config import CellConfig
from suite.results.records import IDENTITY_KEYS, METRIC_KEYS, QUALITY_KEYS, validate_record


def _failed() -> dict:
    prov = {"git_commit": None, "git_dirty": None, "machine": {}}
    return failed_record(CellConfig(task="cifar10"), "RuntimeError: boom", prov)


def test_a_failed_record_has_exactly_the_schema_metric_keys_null():
    rec = validate_record(_failed())
    assert set(QUALITY_KEYS) <= set(METRIC_KEYS)
    assert all(rec[k] is None for k in METRIC_KEYS)
    assert set(IDENTITY_KEYS) <= set(rec) and not set(IDENTITY_KEYS) & set(METRIC_KEYS)


def test_summaries_and_the_frame_carry_every_identity_and_quality_key():
    from leaderboard.frame import to_frame

    rec = _failed()
    summary = summarize_record(rec)
    assert set(IDENTITY_KEYS) | set(QUALITY_KEYS) <= set(summary)
    assert summary["cell_key"] == rec["cell_key"] and summary["final_metric"] is None
    for frame in (to_frame([]), to_frame([rec])):
        assert set(IDENTITY_KEYS) | set(QUALITY_KEYS) <= set(frame.columns)
