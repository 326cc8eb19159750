"""Issue 36: targets that mean something. Every task states its strongest trivial predictor; every
ranked tier's target beats it by at least the tier's minimal detectable difference, and the
uncompressed run meets the target on every committed seed."""

from __future__ import annotations

import math

import pytest

from leaderboard.index import load_index
from leaderboard.statistics import MEASURED_SPREAD, minimal_detectable_difference
from suite.bench.matrix_file import load_matrix
from suite.results import COMMITTED_RECORDS
from suite.results.task_catalog import TASKS_DIR, catalog, read_description

RANKED_TIERS = ("quick", "plateau")  # the CPU tiers whose committed records the board ranks


@pytest.fixture(scope="module")
def committed():
    frame = load_index([], [str(COMMITTED_RECORDS)]).frame
    return frame[(frame["status"] == "ok") & frame["latest"] & frame["maintainers"].astype(bool)]


def _tier_mdd(task: str, tier: str, committed) -> float:
    """3 vs 3 seeds at the measured seed std (tier_spread.json), else at the committed none seeds' std."""
    known = MEASURED_SPREAD.get((task, tier))
    if known is not None:
        return minimal_detectable_difference(known.seed_std, 3, 3)
    none = committed[(committed.task == task) & (committed.tier == tier) & (committed.compressor == "none")]
    if len(none) < 2:
        pytest.skip(f"{task}/{tier}: no measured spread and fewer than 2 committed none seeds yet")
    return minimal_detectable_difference(float(none["final_metric"].std(ddof=1)), 3, 3)


def test_every_task_states_its_strongest_trivial_predictor():
    for path in sorted(TASKS_DIR.glob("*.py")):
        d = read_description(path)
        if d is None:
            continue
        assert d.trivial is not None and d.trivial_note, f"{path.name}: DESCRIPTION needs trivial and trivial_note"
        lo, hi = d.metric_range or (-math.inf, math.inf)
        assert lo <= d.trivial <= hi


def _ranked():
    m = load_matrix()
    return [(task, tier) for tier in RANKED_TIERS if tier in m.tiers for task in m.tier(tier).tasks]


@pytest.mark.parametrize(("task", "tier"), _ranked())
def test_the_target_beats_the_trivial_predictor_by_the_tiers_mdd(task, tier, committed):
    d = catalog()[task]
    margin = (d.targets[tier] - d.trivial_score) * (1 if d.higher_is_better else -1)
    mdd = _tier_mdd(task, tier, committed)
    assert margin >= mdd, (
        f"{task}/{tier}: target {d.targets[tier]} beats the trivial {d.trivial_score} by {margin:.3g} < MDD {mdd:.3g}"
    )


@pytest.mark.parametrize(("task", "tier"), _ranked())
def test_none_meets_the_target_on_every_committed_seed(task, tier, committed):
    none = committed[(committed.task == task) & (committed.tier == tier) & (committed.compressor == "none")]
    if none.empty:
        pytest.skip(f"no committed none records of {task}/{tier}")
    d = catalog()[task]
    assert (none["target"] == d.targets[tier]).all()  # the board reads every record at the current target
    # a learning-rate sweep's runs (seed 100 and up, never judged: benchmarks/dp_momentum_plateau.py) may
    # miss the target at a rate the sweep rejects
    missed = none[none["reached_target_step"].isna() & (none["seed"] < 100)]
    assert missed.empty, (
        f"{task}/{tier}: none misses the target {d.targets[tier]} on {list(missed['seed'])} ({list(missed['setup'])})"
    )


def test_a_superseded_target_is_read_at_the_new_one(lb):
    """wikitext2 quick was 7.0 (above the unigram's 6.65): a record written then is read at 6.1."""
    from leaderboard.frame import to_frame

    curve = [{"step": s, "metric": m, "metric_uncompressed": None, "train_loss": 1.0, "wall_s": float(s)}
             for s, m in ((30, 6.9), (60, 6.7), (90, 6.69), (120, 6.688))]  # fmt: skip
    rec = lb.make_record("wikitext2", "powersgd", 0, metric_name="val_loss", higher_is_better=False, target=7.0,
                         final_metric=6.688, final_metric_uncompressed=6.688, reached_target_step=30, curve=curve)  # fmt: skip
    import json

    path = COMMITTED_RECORDS / "mpcbench-baselines" / "quick-cpu-2core-wikitext2.jsonl"
    real = next(json.loads(x) for x in path.read_text().splitlines() if json.loads(x)["status"] == "ok")
    rec["timing_inputs"] = {**real["timing_inputs"], "target_step": 30.0}  # met 7.0 at step 30
    row = to_frame([rec]).iloc[0]
    assert row["target"] == 6.1 and math.isnan(row["reached_target_step"])
    assert all(math.isnan(row[c]) for c in row.index if c.startswith("time_to_target_s@"))
    rec["curve"][-1]["metric"] = 6.0
    row = to_frame([rec]).iloc[0]
    assert row["reached_target_step"] == 120
