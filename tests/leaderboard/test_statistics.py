"""The minimal detectable difference and the "not resolved" mark (issue 18)."""

from __future__ import annotations

import json
import math

import pytest

from leaderboard.frame import to_frame
from leaderboard.rules import rank
from leaderboard.statistics import MEASURED_SPREAD, aggregate, minimal_detectable_difference
from leaderboard.views import display_table


def test_mdd_matches_the_issue_figure():
    # cifar10 quick: seed std 0.027, 3 vs 3 seeds -> about 6 points reach p < 0.05
    assert minimal_detectable_difference(0.027, 3, 3) == pytest.approx(2.7764 * 0.027 * math.sqrt(2 / 3), rel=1e-3)


def test_mdd_grows_with_power_and_eval_noise_and_shrinks_with_seeds():
    base = minimal_detectable_difference(0.02, 3, 3)
    assert minimal_detectable_difference(0.02, 3, 3, power=0.8) > base
    assert minimal_detectable_difference(0.02, 3, 3, eval_samples=512, metric_level=0.5) > base
    assert minimal_detectable_difference(0.02, 3, 3, eval_samples=512, metric_level=None) == base  # a loss: no term
    assert minimal_detectable_difference(0.02, 10, 10) < base


@pytest.mark.parametrize("std,n,nb", [(math.nan, 3, 3), (0.02, 0, 3), (0.02, 3, 0), (-1.0, 3, 3)])
def test_mdd_is_nan_without_inputs(std, n, nb):
    assert math.isnan(minimal_detectable_difference(std, n, nb))


def test_differences_below_the_mdd_are_marked_not_resolved(records):
    agg = aggregate(to_frame(records))
    cifar = agg[agg.task == "cifar10"].set_index("compressor")
    # fixtures: fp16 equals none up to +-0.004 seed noise; topk loses 0.04 with tiny noise
    assert cifar.loc["fp16", "resolved"] == False  # noqa: E712 - pandas boolean NA
    assert cifar.loc["topk(ratio=0.1)", "resolved"] == True  # noqa: E712
    assert cifar.loc["fp16", "mdd"] > abs(cifar.loc["fp16", "delta"])
    ranked = rank(agg[agg.task == "cifar10"], "quality_at_ratio")
    table = display_table(ranked).set_index("compressor")
    assert table.loc["fp16", "Δ vs none"].endswith("not resolved")
    assert "not resolved" not in table.loc["topk(ratio=0.1)", "Δ vs none"]
    # none and fp16 are within the MDD of each other: the second is not ranked apart from the first
    assert "≈" in table.iloc[1]["rank"] and "≈" not in table.iloc[0]["rank"]


def test_single_seed_rows_use_the_measured_task_spread(lb):
    recs = [lb.make_record("cifar10", c, 0) for c in ("none", "fp16")]
    for r in recs:
        r["tier"] = r["config"]["tier"] = "quick"
    agg = aggregate(to_frame(recs)).set_index("compressor")
    assert agg.loc["fp16", "significance"] == "n too small"
    known = MEASURED_SPREAD[("cifar10", "quick")]  # from suite/results/tier_spread.json (3 seeds: df 2)
    assert known.df == 2 and 0 < known.seed_std < 0.1
    assert agg.loc["fp16", "mdd"] == pytest.approx(minimal_detectable_difference(known.seed_std, 1, 1, df=2))
    assert agg.loc["fp16", "mdd"] == pytest.approx((4.3027 + 0) * known.seed_std * math.sqrt(2), rel=1e-3)  # t(.975, 2)
    assert agg.loc["fp16", "mdd_source"].startswith("measured: none, seeds 0")


@pytest.mark.parametrize("df", [1, 2, 3.7, 4, 10, 58.3, 300])
def test_student_t_matches_scipy(df):
    from scipy import stats

    from leaderboard.statistics import t_cdf, t_ppf

    for t in (-40.0, -3.1, -1.0, -0.01, 0.0, 0.5, 2.2, 12.0):
        assert t_cdf(t, df) == pytest.approx(stats.t.cdf(t, df), rel=1e-9, abs=1e-14)
    for q in (0.5, 0.8, 0.975, 0.9995):
        assert t_ppf(q, df) == pytest.approx(stats.t.ppf(q, df), rel=1e-8)


def test_time_to_quality_has_modeled_lines_and_the_measured_emulated_curve(lb):
    from leaderboard.networks import Link
    from leaderboard.views import time_to_quality_frame

    plain = lb.make_record("cifar10", "none", 0)
    linked = lb.make_record("cifar10", "fp16", 1, record_id="e" * 32, cell_key="linked")
    linked["network"] = {"link": "100mbit", "emulated": True, "measured": {"step_s": 0.5}}
    frame = to_frame([linked, plain])  # the linked record first: the next one must still be modeled
    ttq = time_to_quality_frame(frame, Link(1e9, 5e-4))
    assert set(ttq.source) == {"modeled", "emulated 100mbit"}
    emu = ttq[ttq.source == "emulated 100mbit"]
    assert list(emu.time_s) == [p["wall_s"] for p in linked["curve"]]  # measured, not modeled
    modeled = ttq[ttq.source == "modeled"]
    assert (modeled.groupby("label").time_s.apply(lambda s: s.is_monotonic_increasing)).all()
    assert set(modeled.compressor) == {"none", "fp16"}  # every record after a linked one still gets its line


def test_compressors_are_shown_with_their_parameters(lb):
    r = lb.make_record("cifar10", "quant(bits=4)", 0)
    r["specs_resolved"] = {"forward": "quant(bits=4, scale=row)", "backward": "quant(bits=4, scale=row)", "dp": "none"}
    agg = aggregate(to_frame([r, lb.make_record("cifar10", "none", 0)]))
    table = display_table(rank(agg, "pareto"))
    # the short name as typed in the compressor column, every parameter in the spec column
    assert set(table.compressor) == {"quant(bits=4)", "none"}
    assert "quant(bits=4, scale=row)" in set(table.spec) and "none" in set(table.spec)


def test_custom_link_time_to_target_uses_the_interpolated_target_step(lb):
    from leaderboard.networks import Link, cumulative_times, remodel

    rec = lb.make_record("cifar10", "none", 0)
    reached = rec["reached_target_step"]
    link = Link(3e8, 2e-3)
    timing = json.dumps(rec["timing_inputs"])
    rounded = remodel(to_frame([rec]), link)[f"time_to_target_s@{link.name}"].iloc[0]
    assert rounded == pytest.approx(cumulative_times(timing, link, [reached])[0])  # no target_step: the evaluation
    rec["timing_inputs"]["target_step"] = reached - 10.5
    inter = remodel(to_frame([rec]), link)[f"time_to_target_s@{link.name}"].iloc[0]
    assert inter == pytest.approx(cumulative_times(json.dumps(rec["timing_inputs"]), link, [reached - 10.5])[0])
    assert inter < rounded
