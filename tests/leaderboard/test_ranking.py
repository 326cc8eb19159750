"""Ranking logic on fixture records: flattening, aggregation math, significance, rules, Pareto ranks."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from leaderboard import ranking
from leaderboard.ranking import RULES, aggregate, pareto_front, pareto_ranks, rank, significance_marker, to_frame


def _row(agg: pd.DataFrame, task: str, compressor: str, entry: str = "local") -> pd.Series:
    sel = agg[(agg.task == task) & (agg.compressor == compressor) & (agg.entry == entry)]
    assert len(sel) == 1, (task, compressor, entry)
    return sel.iloc[0]


# --------------------------------------------------------------------------- to_frame
def test_to_frame_one_row_per_record_with_measured_ratios(records, lb):
    frame = to_frame(records)
    assert len(frame) == len(records) == 2 * 4 * 3
    r = frame[(frame.task == "cifar10") & (frame.compressor == "quant(bits=4)") & (frame.seed == 0)].iloc[0]
    rec = next(x for x in records if x["record_id"] == r.record_id)
    fwd = rec["bytes"]["forward"]
    assert r.ratio_forward == pytest.approx(fwd["raw"] / fwd["wire"])
    assert math.isnan(r.ratio_dp)  # dp sent nothing: no ratio, not a fake 1.0
    assert r.ratio_total == pytest.approx(2 * fwd["raw"] / (2 * fwd["wire"]))
    assert r.bytes_per_step_total == pytest.approx(sum(rec["bytes_per_step"].values()))
    assert r.final_metric == rec["final_metric"]
    assert r.entry == "local" and r.latest
    assert ranking.network_profiles(frame) == ["100Gbps", "10Gbps", "1Gbps", "100Mbps", "80Mbps"]  # fastest first
    # the time model's, from the record's bytes and costs; never the record's own stored times
    assert r["time_to_target_s@80Mbps"] == lb.modeled_at(rec, "80Mbps")
    assert r["time_to_target_s@80Mbps"] != rec["modeled"]["80Mbps"]["time_to_target_s"]


def test_ratio_comes_from_bytes_not_from_the_records_claim(lb):
    rec = lb.make_record("cifar10", "fp16", 0, compression_ratio={"forward": 1000.0, "total": 1000.0})
    assert to_frame([rec]).iloc[0].ratio_total == pytest.approx(2.0)


def test_rerun_of_a_cell_supersedes_the_older_record(lb):
    failed = lb.make_record("cifar10", "fp16", 0, record_id="old", status="failed", created="2026-01-01T00:00:00+00:00")
    ok = lb.make_record("cifar10", "fp16", 0, record_id="new", created="2026-02-01T00:00:00+00:00")
    frame = to_frame([ok, failed])  # order in the file does not matter, `created` does
    assert dict(zip(frame.record_id, frame.latest)) == {"new": True, "old": False}
    agg = aggregate(frame)
    assert agg.iloc[0].n == 1 and agg.iloc[0].n_failed == 0


def test_empty_input_gives_empty_frames():
    frame = to_frame([])
    agg = aggregate(frame)
    assert frame.empty and agg.empty
    assert rank(agg, "pareto").empty


# --------------------------------------------------------------------------- aggregate
def test_aggregate_mean_std_n_delta_and_welch_p(records):
    agg = aggregate(to_frame(records))
    assert len(agg) == 8
    base = [r["final_metric"] for r in records if r["task"] == "cifar10" and r["compressor"] == "none"]
    topk = [r["final_metric"] for r in records if r["task"] == "cifar10" and r["compressor"] == "topk(ratio=0.1)"]
    row = _row(agg, "cifar10", "topk(ratio=0.1)")
    assert row.n == 3 and row.seeds == [0, 1, 2]
    assert row.metric_mean == pytest.approx(np.mean(topk))
    assert row.metric_std == pytest.approx(np.std(topk, ddof=1))
    assert row.delta == pytest.approx(np.mean(topk) - np.mean(base))
    assert row.p_value == pytest.approx(stats.ttest_ind(topk, base, equal_var=False).pvalue)
    assert row.significance == "***"  # 4 points of accuracy lost at +-0.4 noise
    assert row.baseline_entry == "local"
    b = _row(agg, "cifar10", "none")
    assert b.significance == "baseline" and b.delta == 0 and math.isnan(b.p_value)
    assert b.ratio_total == pytest.approx(1.0)


def test_n_too_small_gives_nan_p_and_a_marker(lb):
    recs = lb.make_records(tasks=("cifar10",), compressors=("none",)) + [lb.make_record("cifar10", "fp16", 0)]
    row = _row(aggregate(to_frame(recs)), "cifar10", "fp16")
    assert row.n == 1 and math.isnan(row.p_value) and row.significance == "n too small"
    assert math.isnan(row.metric_std)
    assert not math.isnan(row.delta)


def test_failed_seeds_are_counted_not_averaged(lb):
    recs = lb.make_records(tasks=("cifar10",), compressors=("none", "fp16"))
    recs.append(lb.make_record("cifar10", "fp16", 3, status="failed", error="CompressorError: NaN in payload"))
    agg = aggregate(to_frame(recs))
    row = _row(agg, "cifar10", "fp16")
    assert row.n == 3 and row.n_failed == 1
    assert row.metric_mean == pytest.approx(np.mean([r["final_metric"] for r in recs[3:6]]))
    table = ranking.display_table(rank(agg, "pareto"))
    assert dict(zip(table.compressor, table.failed)) == {"none": "", "fp16": "1"}
    assert "failed" not in ranking.display_table(rank(agg[agg.compressor == "none"], "pareto"))


def test_time_to_target_mean_over_reached_seeds_and_fraction(lb):
    recs = []
    for seed in range(3):
        r = lb.make_record("cifar10", "fp16", seed)
        if seed == 2:
            lb.never_reached(r)  # this seed never reached the target
        recs.append(r)
    row = _row(aggregate(to_frame(recs)), "cifar10", "fp16")
    reached = [lb.modeled_at(r, "80Mbps") for r in recs[:2]]
    assert row["time_to_target_s@80Mbps"] == pytest.approx(np.mean(reached))
    assert row["reached@80Mbps"] == pytest.approx(2 / 3)
    assert row["reached@1Gbps"] == pytest.approx(2 / 3)  # reaching is a step count: the same on every link


def test_baseline_prefers_the_same_entry(lb):
    mine = [
        dict(lb.make_record("cifar10", c, s, record_id=f"m{c}{s}"), entry="mine")
        for c in ("none", "fp16")
        for s in range(2)
    ]
    mine[0]["final_metric"] = mine[1]["final_metric"] = 0.30  # my machine's baseline is much worse
    ref = lb.make_records(tasks=("cifar10",), compressors=("none",))
    agg = aggregate(to_frame(mine + ref))
    row = _row(agg, "cifar10", "fp16", entry="mine")
    assert row.baseline_entry == "mine" and row.delta > 0.2
    assert row.baseline_kind == "own"


def test_no_third_party_baseline_only_the_maintainers(lb):
    """Issue 12: an entry without its own baseline is compared with the maintainers' baseline,
    marked as such, never with another submitter's ``none`` records (forged or not)."""
    ref = lb.make_records(tasks=("cifar10",), compressors=("none",))
    other = [dict(lb.make_record("cifar10", "fp16", s, record_id=f"o{s}"), entry="other") for s in range(3)]
    row = _row(aggregate(to_frame(ref + other)), "cifar10", "fp16", entry="other")
    assert row.baseline_entry == "" and row.significance == "no baseline" and math.isnan(row.delta)
    forged = [
        dict(lb.make_record("cifar10", "none", s, record_id=f"f{s}", final_metric=0.99), entry="0-attacker")
        for s in range(5)
    ]
    maint = [dict(r, entry=ranking.MAINTAINERS) for r in ref]
    agg = aggregate(to_frame(maint + forged + other))
    row = _row(agg, "cifar10", "fp16", entry="other")
    assert row.baseline_entry == ranking.MAINTAINERS and row.baseline_kind == "maintainers"
    assert abs(row.delta) < 0.02  # the forged 0.99 baseline moved nothing
    table = ranking.display_table(rank(agg, "pareto"))
    assert table.loc[table.entry == "other", "Δ vs none"].iloc[0].endswith("(vs maintainers')")


@pytest.mark.parametrize(
    "p,n,nb,marker",
    [
        (0.0001, 3, 3, "***"),
        (0.005, 3, 3, "**"),
        (0.04, 3, 3, "*"),
        (0.05, 3, 3, "n.s."),
        (0.5, 5, 3, "n.s."),
        (0.0001, 1, 3, "n too small"),
        (0.0001, 3, 1, "n too small"),
        (math.nan, 3, 3, "n.s."),
    ],
)
def test_significance_marker(p, n, nb, marker):
    assert significance_marker(p, n, nb) == marker


# --------------------------------------------------------------------------- rules
def test_every_rule_has_an_explanation():
    assert set(RULES) == {"quality_at_ratio", "time_to_target", "pareto"}
    for rule in RULES.values():
        assert len(rule.explanation) > 200 and rule.title


def test_quality_at_ratio_respects_min_ratio_and_direction_of_better(records):
    agg = aggregate(to_frame(records))
    r = rank(agg, "quality_at_ratio", min_ratio=3.0)
    cifar = r[r.task == "cifar10"]
    assert list(cifar.compressor[:2]) == ["quant(bits=4)", "topk(ratio=0.1)"]  # ratio 7.4 and 5 are eligible
    assert list(cifar["rank"][:2]) == [1, 2] and cifar["rank"][2:].isna().all()
    # perplexity: lower is better, so the baseline-quality entries come first
    shake = rank(agg, "quality_at_ratio")
    shake = shake[shake.task == "shakespeare"]
    assert shake.iloc[-1].compressor == "topk(ratio=0.1)"
    assert shake["metric_mean"].is_monotonic_increasing
    cifar_all = rank(agg, "quality_at_ratio")
    assert cifar_all[cifar_all.task == "cifar10"]["metric_mean"].is_monotonic_decreasing
    # direction: dp sent nothing, so nothing reaches a dp ratio
    assert rank(agg, "quality_at_ratio", min_ratio=1.0, direction="dp")["rank"].isna().all()


def test_time_to_target_depends_on_the_network(records):
    agg = aggregate(to_frame(records))
    fast = rank(agg, "time_to_target", network="100Gbps")
    slow = rank(agg, "time_to_target", network="80Mbps")
    first = lambda t: t[t.task == "cifar10"].iloc[0].compressor  # noqa: E731
    assert first(fast) == "none"  # compute-bound: compression only costs time
    assert first(slow) == "quant(bits=4)"  # bandwidth-bound: fewest bytes wins
    with pytest.raises(ValueError, match="unknown network profile 'dialup'; valid: 100Gbps, 10Gbps, 1Gbps, 100Mbps"):
        rank(agg, "time_to_target", network="dialup")


def test_time_to_target_never_reached_ranks_last(lb):
    recs = lb.make_records(tasks=("cifar10",))
    for r in recs:
        if r["compressor"] == "quant(bits=4)" or (r["compressor"] == "fp16" and r["seed"] == 0):
            lb.never_reached(r)
    r = rank(aggregate(to_frame(recs)), "time_to_target", network="100Mbps")
    # topk is fastest among all-seeds-reached; fp16 (2/3 reached) after; quant (never) last
    assert list(r.compressor) == ["topk(ratio=0.1)", "none", "fp16", "quant(bits=4)"]
    assert list(r["rank"]) == [1, 2, 3, 4]


def test_pareto_rank_rule(records):
    agg = aggregate(to_frame(records))
    r = rank(agg, "pareto")
    cifar = r[r.task == "cifar10"].set_index("compressor")
    # quant: fewest bytes; none/fp16 best quality (fp16 with half the bytes); topk is dominated by quant
    assert cifar.loc["quant(bits=4)", "rank"] == 1
    assert cifar.loc["topk(ratio=0.1)", "rank"] == 2
    assert (r["rank"] == r["pareto_rank"]).all()


def test_unknown_rule_and_direction_are_rejected(records):
    agg = aggregate(to_frame(records))
    with pytest.raises(ValueError, match="valid rules: quality_at_ratio, time_to_target, pareto"):
        rank(agg, "best")
    with pytest.raises(ValueError, match="unknown direction"):
        rank(agg, "pareto", direction="sideways")


# --------------------------------------------------------------------------- Pareto by hand
def test_pareto_ranks_hand_made_case():
    # x = bytes (smaller better), y = quality (larger better)
    df = pd.DataFrame(
        {"x": [1, 2, 3, 2, 4, 3, 5, np.nan, 3], "y": [1, 3, 4, 2, 4, 3, 1, 9, 4]},
        index=list("abcdefghi"),
    )
    ranks = pareto_ranks(df, "x", "y")
    # front 1: a(1,1) b(2,3) c(3,4) and its twin i(3,4); e(4,4) is dominated by c;
    # front 2: d(2,2) f(3,3) e(4,4); front 3: g(5,1); h has NaN
    assert pd.isna(ranks["h"])
    assert ranks.drop("h").to_dict() == {"a": 1, "b": 1, "c": 1, "i": 1, "d": 2, "f": 2, "e": 2, "g": 3}
    assert list(pareto_front(df, "x", "y")) == [True, True, True, False, False, False, False, False, True]
    # lower-is-better quality (perplexity) flips the y axis
    low = pareto_ranks(df, "x", "y", maximize_y=False)
    assert low["a"] == 1 and low["c"] > 1


# --------------------------------------------------------------------------- views
def test_display_table_strings(records):
    agg = aggregate(to_frame(records))
    table = ranking.display_table(rank(agg[agg.task == "cifar10"], "pareto"), network="1Gbps")
    # the answer first: name, quality, its delta, time-to-target and its delta, the ratio; then who and the rest
    assert list(table.columns[:7]) == [
        "rank",
        "compressor",
        "accuracy",
        "Δ vs none",
        "time-to-target @ 1Gbps",
        "Δ time vs none",
        "ratio total",
    ]
    assert list(table.columns[7:9]) == ["entry", "ratio fwd / bwd / dp"] and table.columns[-1] == "spec"
    row = table[table.compressor == "topk(ratio=0.1)"].iloc[0]
    assert row["accuracy"].endswith("(n=3)") and "±" in row["accuracy"]
    assert row["Δ vs none"].startswith("-0.04") and row["Δ vs none"].endswith("***")
    assert row["ratio fwd / bwd / dp"] == "5 / 5 / -" and row["ratio total"] == "5x"
    assert row["time-to-target @ 1Gbps"].removesuffix(" †").endswith("(3/3)")


def test_curves_and_detail(records):
    frame = to_frame(records)
    curves = ranking.curve_frame(frame, [("local", "fp16")])
    assert set(curves.compressor) == {"fp16"} and set(curves.seed) == {0, 1, 2}
    assert len(curves) == 2 * 3 * 5  # 2 tasks x 3 seeds x 5 points
    d = ranking.entry_detail(frame, "cifar10", "quick", "local", "fp16")
    assert d["specs"] == {"forward": "fp16", "backward": "fp16", "dp": "none"}
    assert len(d["seeds"]) == 3 and d["plugin_hash"] and d["provenance"]["git_commit"] == "0123abc"
    assert d["config"]["task"] == "cifar10"


def test_record_warnings_are_counted_per_entry_and_listed_in_the_detail(lb):
    """Warnings (e.g. payloads larger than the raw tensors) reach the table and the detail view;
    a superseded record's warnings do not count, and a hostile ``warnings`` field is coerced."""
    warn = "forward: compressed payloads are larger than the raw tensors (wire 800 B > raw 200 B, ratio 0.25x)"
    recs = lb.make_records(tasks=("cifar10",), compressors=("none", "fp16"))
    for r in recs:
        if r["compressor"] == "fp16" and r["seed"] < 2:
            r["warnings"] = [warn, "backward: two\nlines"]
    old = lb.make_record(
        "cifar10", "fp16", 0, record_id="old", created="2025-01-01T00:00:00+00:00", warnings=["stale"] * 5
    )
    odd = lb.make_record("shakespeare", "none", 0, warnings="one bare string")
    junk = lb.make_record("shakespeare", "fp16", 0, warnings={"not": "a list"})
    frame = to_frame([*recs, old, odd, junk])
    assert frame.loc[frame.record_id == "old", "n_warnings"].item() == 5
    assert dict(zip(frame.task + frame.compressor, frame.n_warnings))["shakespearenone"] == 1
    assert frame.loc[frame.task + frame.compressor == "shakespearefp16", "warnings"].item() == []
    agg = aggregate(frame)
    row = _row(agg, "cifar10", "fp16")
    assert row.n_warnings == 4 and row.warned_seeds == 2  # the superseded record's 5 are not counted
    assert _row(agg, "cifar10", "none").n_warnings == 0
    table = ranking.display_table(rank(agg[agg.task == "cifar10"], "pareto"))
    assert dict(zip(table.compressor, table.warnings)) == {"none": "", "fp16": "⚠ 4"}
    baseline_only = agg[(agg.compressor == "none") & (agg.task == "cifar10")]
    assert "warnings" not in ranking.display_table(rank(baseline_only, "pareto"))
    d = ranking.entry_detail(frame, "cifar10", "quick", "local", "fp16")
    assert d["warnings"] == [
        {"seed": 0, "warning": warn},
        {"seed": 0, "warning": "backward: two lines"},
        {"seed": 1, "warning": warn},
        {"seed": 1, "warning": "backward: two lines"},
    ]
    assert [s["warnings"] for s in d["seeds"] if s["latest"]][2] == []


# --------------------------------------------------------------------------- run setups
def _in_setup(rec: dict, **run) -> dict:
    """``rec`` as if it ran under other settings: ``run`` fields and the matching config fields."""
    rec = dict(rec, run={**rec["run"], **run}, config=dict(rec["config"]))
    cfg_names = {"n_stages": "stages"}
    for k, v in run.items():
        rec["config"][cfg_names.get(k, k)] = v
    rec["cell_key"] = f"{rec['cell_key']}-{sorted(run.items())}"  # another cell, as CellConfig.key() would say
    rec["record_id"] = f"{rec['record_id']}-{sorted(run.items())}"
    return rec


def test_setup_label_from_run_and_config(lb):
    rec = lb.make_record("cifar10", "fp16", 0)
    assert ranking.setup_label(rec) == "3 stages, 1f1b, M=4, cpu"
    rec["config"].update(steps=50, compress_warmup_steps=10)
    rec["run"].update(dp=2, schedule="gpipe", mode="torchrun")
    assert ranking.setup_label(rec) == "3 stages, gpipe, M=4, cpu, dp=2, 50 steps, warm-up 10"
    # a failed record has no run: the config says what it knows (stages null = task default: omitted)
    cfg = {"stages": None, "dp": 1, "schedule": "1f1b", "microbatches": None, "mode": "single", "device": "cpu"}
    assert ranking.setup_label({"run": None, "config": cfg}) == "1f1b, cpu"
    assert ranking.setup_label({"config": {}}) == ""  # old / minimal record: nothing known, still works
    assert ranking.setup_label({"run": {"schedule": "a\nvery " + "long " * 50}}).count("\n") == 0


def test_the_launch_mode_is_not_part_of_the_setup(lb):
    """One process and torchrun give the same losses and bytes, and times come from the time model:
    a plugin run with the defaults (torchrun) sits in one row and one table with the built-ins."""
    single = lb.make_record("cifar10", "fp16", 0)
    torchrun = _in_setup(lb.make_record("cifar10", "fp16", 1), mode="torchrun")
    base = _in_setup(lb.make_record("cifar10", "none", 0), mode="single")
    assert ranking.setup_label(single) == ranking.setup_label(torchrun) == ranking.setup_label(base)
    agg = aggregate(to_frame([single, torchrun, base]))
    assert len(agg) == 2 and set(agg.setup) == {"3 stages, 1f1b, M=4, cpu"}
    assert sorted(_row(agg, "cifar10", "fp16").seeds) == [0, 1]


def test_same_seed_in_two_setups_is_two_rows_not_two_seeds(lb):
    single = lb.make_record("cifar10", "fp16", 0)
    gpipe = _in_setup(single, schedule="gpipe")
    gpipe["time"] = dict(single["time"], step_s=10 * single["time"]["step_s"])
    frame = to_frame([single, gpipe])
    assert frame.latest.all()  # different cells, both count
    agg = aggregate(frame)
    assert len(agg) == 2
    assert sorted(agg.setup) == ["3 stages, 1f1b, M=4, cpu", "3 stages, gpipe, M=4, cpu"]
    for r in agg.itertuples():
        assert r.n == 1 and r.seeds == [0]
        assert r.step_s == pytest.approx(single["time"]["step_s"] * (10 if "gpipe" in r.setup else 1))  # not averaged


def test_a_rerun_of_a_seed_in_the_same_setup_counts_once(lb):
    # stages null (task default) and stages=3 are two cell keys for the same experiment
    old = lb.make_record("cifar10", "fp16", 0, record_id="old", created="2026-01-01T00:00:00+00:00")
    new = lb.make_record(
        "cifar10",
        "fp16",
        0,
        record_id="new",
        created="2026-02-01T00:00:00+00:00",
        cell_key="another-key",
        config={**old["config"], "stages": None},
    )
    frame = to_frame([old, new])
    assert dict(zip(frame.record_id, frame.latest)) == {"old": False, "new": True}
    row = aggregate(frame).iloc[0]
    assert row.n == 1 and row.seeds == [0]


def test_a_failed_record_without_run_joins_its_setups_row(lb):
    recs = [lb.make_record("cifar10", "fp16", s) for s in range(2)]
    for r in recs:
        r["config"]["stages"] = None  # the task's default, resolved to 3 in run
    failed = lb.make_record("cifar10", "fp16", 2, status="failed", run=None, config=recs[0]["config"])
    agg = aggregate(to_frame([*recs, failed]))
    assert len(agg) == 1
    assert agg.iloc[0].setup == "3 stages, 1f1b, M=4, cpu" and agg.iloc[0].n == 2 and agg.iloc[0].n_failed == 1


def test_delta_uses_the_baseline_of_the_same_setup(lb):
    recs = []
    for s in range(3):
        base = lb.make_record("cifar10", "none", s)
        base_tr = _in_setup(base, schedule="gpipe", n_stages=2)
        base_tr["final_metric"] = base["final_metric"] - 0.2  # the torchrun setup trains much worse
        fp16 = lb.make_record("cifar10", "fp16", s)
        fp16_tr = _in_setup(fp16, schedule="gpipe", n_stages=2)
        fp16_tr["final_metric"] = fp16["final_metric"] - 0.2
        recs += [base, base_tr, fp16, fp16_tr]
    agg = aggregate(to_frame(recs))
    assert len(agg) == 4 and set(agg.n) == {3}
    by = {(r.compressor, r.setup): r for r in agg.itertuples()}
    single, torch2 = "3 stages, 1f1b, M=4, cpu", "2 stages, gpipe, M=4, cpu"
    assert by["none", single].significance == by["none", torch2].significance == "baseline"
    for setup in (single, torch2):
        mine = [r["final_metric"] for r in recs if r["compressor"] == "fp16" and ranking.setup_label(r) == setup]
        base = [r["final_metric"] for r in recs if r["compressor"] == "none" and ranking.setup_label(r) == setup]
        row = by["fp16", setup]
        assert row.delta == pytest.approx(np.mean(mine) - np.mean(base))  # near 0, not +-0.2
        assert abs(row.delta) < 0.01 and row.baseline_entry == "local"
        assert row.p_value == pytest.approx(stats.ttest_ind(mine, base, equal_var=False).pvalue)


def test_a_setup_without_baseline_is_marked_not_compared_across_setups(lb):
    recs = lb.make_records(tasks=("cifar10",), compressors=("none", "fp16"))
    recs += [_in_setup(lb.make_record("cifar10", "fp16", s), device="cuda") for s in range(3)]
    agg = aggregate(to_frame(recs))
    cuda = agg[agg.setup.str.endswith("cuda")].iloc[0]
    assert cuda.compressor == "fp16" and cuda.n == 3
    assert cuda.significance == "no baseline" and math.isnan(cuda.delta) and math.isnan(cuda.p_value)
    assert cuda.baseline_entry == ""
    assert _row(agg[~agg.setup.str.endswith("cuda")], "cifar10", "fp16").significance != "no baseline"
    table = ranking.display_table(rank(agg, "pareto"))
    cuda_row = table[table.setup.str.endswith("cuda")].iloc[0]
    assert cuda_row["Δ vs none"] == "no baseline"


def test_setup_column_only_when_setups_differ(lb, records):
    agg = aggregate(to_frame(records))
    assert "setup" not in ranking.display_table(rank(agg, "pareto"))  # one setup: the table as before
    mixed = records + [_in_setup(lb.make_record("cifar10", "fp16", 0), schedule="gpipe")]
    agg = aggregate(to_frame(mixed))
    table = ranking.display_table(rank(agg[agg.task == "cifar10"], "pareto"))
    cols = list(table.columns)
    assert cols[:2] == ["rank", "compressor"] and cols.index("setup") == cols.index("entry") + 1
    assert set(table.setup) == {"3 stages, 1f1b, M=4, cpu", "3 stages, gpipe, M=4, cpu"}
    assert len(table) == 5 and (table.compressor == "fp16").sum() == 2
    # the shakespeare rows have one setup: no column there
    assert "setup" not in ranking.display_table(rank(agg[agg.task == "shakespeare"], "pareto"))


def test_curves_and_detail_tell_setups_apart(lb):
    a = lb.make_record("cifar10", "fp16", 0)
    b = _in_setup(a, schedule="gpipe")
    frame = to_frame([a, b])
    curves = ranking.curve_frame(frame, [("local", "fp16")])  # a pair: every setup of it
    # one entry: the compressor names the line (no "local / " on every label)
    assert curves.label.nunique() == 2 and all(lab.startswith("fp16 / 3 stages") for lab in curves.label)
    tr = "3 stages, gpipe, M=4, cpu"
    only = ranking.curve_frame(frame, [("local", "fp16", tr)])
    assert set(only.setup) == {tr} and set(only.label) == {"fp16"}
    d = ranking.entry_detail(frame, "cifar10", "quick", "local", "fp16", tr)
    assert d["setup"] == tr and [s["record_id"] for s in d["seeds"]] == [b["record_id"]]
    both = ranking.entry_detail(frame, "cifar10", "quick", "local", "fp16")
    assert both["setup"] is None and len(both["seeds"]) == 2


def _brute_pareto_levels(xs, ys):
    """The definition: peel the non-dominated set off, level by level."""
    left, level, out = set(range(len(xs))), 1, [0] * len(xs)
    while left:
        front = {
            i
            for i in left
            if not any(xs[j] <= xs[i] and ys[j] >= ys[i] and (xs[j] < xs[i] or ys[j] > ys[i]) for j in left)
        }
        for i in front:
            out[i] = level
        left -= front
        level += 1
    return out


@pytest.mark.parametrize("seed", range(5))
def test_pareto_sweep_equals_the_definition_with_ties(seed):
    rng = np.random.default_rng(seed)
    xs = rng.integers(0, 8, 60).astype(float)  # few distinct values: many ties and duplicates
    ys = rng.integers(0, 8, 60).astype(float)
    got = pareto_ranks(pd.DataFrame({"x": xs, "y": ys}), "x", "y")
    assert list(got) == _brute_pareto_levels(list(xs), list(ys))


@pytest.mark.parametrize("rule", list(RULES))
def test_rows_short_of_the_tiers_seeds_rank_after_every_full_row_in_every_rule(lb, rule):
    """quick asks 3 seeds: a one-seed row with the best quality, fewest bytes and fastest time still
    ranks after every 3-seed row, marked; it used to lead the page's default rule ('0.5122 (n=1)')."""
    recs = lb.make_records(tasks=("cifar10",), compressors=("none", "fp16", "topk(ratio=0.1)"))
    lucky = lb.make_record("cifar10", "quant(bits=4)", 0, final_metric=0.99)
    ranked = rank(aggregate(to_frame([*recs, lucky])), rule, network="1Gbps")
    ranked = ranked[ranked["rank"].notna()]
    assert ranked["compressor"].iloc[-1] == "quant(bits=4)", ranked[["compressor", "rank", "n"]]
    last = ranked.iloc[-1]
    assert last["rank"] > ranked["rank"].iloc[:-1].max() and last["rank_label"].endswith("(1 of 3 seeds)")
    assert not any("seeds)" in label for label in ranked["rank_label"].iloc[:-1])


def test_page_report_and_submit_share_one_default_rule():
    from leaderboard.report import ReportOptions
    from suite.bench.cli import build_parser

    assert ranking.DEFAULT_RULE in RULES and ReportOptions().rule == ranking.DEFAULT_RULE
    for command in (["report"], ["submit", "records/x"]):
        assert build_parser().parse_args(command).rule == ranking.DEFAULT_RULE
