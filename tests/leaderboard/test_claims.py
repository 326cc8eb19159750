"""The reproductions: claims as data, judged against records with the tier's state (issues 24, 36)."""

from __future__ import annotations

import pytest
import yaml

from leaderboard.claims import (
    NOT_TESTABLE,
    Claim,
    claims_table,
    evaluation_means,
    judge,
    last_quarter_gain,
    load_claims,
    plateau_curves,
)
from leaderboard.frame import to_frame
from suite.bench.cli import main
from suite.bench.matrix_file import _entry, load_matrix


def _frame(lb, values, task="cifar10", uncompressed=None, gain=0.0, machine=None, setup_stages=None, gains=None):
    """Records whose final metrics are ``values[compressor]`` (one per seed); every curve flat over its
    last quarter but for ``gain`` (in metric units, added over the last 120 of 200 steps; ``gains``:
    per compressor instead)."""
    recs = []
    for comp, vals in values.items():
        for seed, v in enumerate(vals):
            r = lb.make_record(task, comp, seed, record_id=f"{comp}-{seed}")
            r["final_metric"] = v
            r["final_metric_uncompressed"] = (uncompressed or {}).get(comp, vals)[seed]
            g = (gains or {}).get(comp, gain)
            for p in r["curve"]:
                p["metric"] = v - g * max(0.0, (200 - p["step"]) / 120)
            if machine and comp in machine:
                r["provenance"] = {**r["provenance"], "machine": {**r["provenance"]["machine"], "cpu": machine[comp]}}
            if setup_stages and comp in setup_stages:
                r["run"] = {**r["run"], "n_stages": setup_stages[comp]}
            recs.append(r)
    return to_frame(recs).assign(maintainers=True)


def _claim(**kw) -> Claim:
    base = dict(id="x", paper="P", claim="c", task="cifar10", tier="quick", entry="fp16", compressor="fp16")
    return Claim(**{**base, "compare_to": "none", "expect": "worse", **kw})


def test_worse_better_close_and_no_records_verdicts_on_hand_made_records(lb):
    frame = _frame(lb, {"none": [0.50, 0.52, 0.51], "fp16": [0.40, 0.43, 0.41], "bf16": [0.501, 0.519, 0.51]})
    v = judge(_claim(), frame)
    # paired by seed: d = (-0.10, -0.09, -0.10), mean -0.0967, sd 0.00577 -> t = -29.0 on 2 df,
    # two-sided p = 1 - |t| / sqrt(t^2 + 2) = 0.00119
    assert v.test == "paired by seed" and v.effect == pytest.approx(-0.09667, abs=1e-4)
    assert v.p == pytest.approx(0.00119, abs=2e-5) and v.verdict == "reproduced"
    assert v.state.plateaued is True and v.state.floor is False and v.state.same_machine is True
    assert judge(_claim(expect="better"), frame).verdict == "contradicted"
    close = judge(_claim(compressor="bf16", expect="close", tolerance=0.01), frame)
    assert close.verdict == "reproduced" and -0.01 <= close.low and close.high <= 0.01
    far = judge(_claim(expect="close", tolerance=0.01), frame)
    assert far.verdict == "contradicted"
    wide = judge(_claim(compressor="bf16", expect="close", tolerance=0.001), frame)
    assert wide.verdict == "not resolvable at this tier" and "MDD" in wide.why
    missing = judge(_claim(compressor="topk(ratio=0.05)"), frame)
    assert missing.verdict == NOT_TESTABLE and missing.why == "no records at this tier (topk(ratio=0.05))"
    one = judge(_claim(), frame[~((frame.compressor == "fp16") & (frame.seed > 0))])
    assert one.verdict == NOT_TESTABLE and "1 seed(s) of fp16" in one.why


def test_refuted_when_the_interval_excludes_the_claimed_size(lb):
    frame = _frame(lb, {"none": [0.50, 0.52, 0.51], "fp16": [0.502, 0.521, 0.511]})
    # effect +0.0013 with a tight paired interval: a claimed gain of 0.05 or more is ruled out, no opposite effect
    v = judge(_claim(expect="better", min_effect=0.05), frame)
    assert v.verdict == "refuted in this configuration" and "excludes the claimed effect of 0.05" in v.why
    assert judge(_claim(expect="better"), frame).verdict == "not resolvable at this tier"  # no size stated
    worse = judge(_claim(expect="worse", min_effect=0.05), frame)
    assert worse.verdict == "refuted in this configuration"


def test_not_worse_and_stated_claims(lb):
    frame = _frame(lb, {"none": [0.50, 0.52, 0.51], "fp16": [0.499, 0.522, 0.509]})
    assert judge(_claim(expect="not_worse", tolerance=0.01), frame).verdict == "reproduced"
    stated = judge(_claim(expect="stated"), frame)
    assert stated.verdict == "measured (no direction stated)" and stated.effect == stated.effect
    # a stated row has no verdict to withhold: with a gap still moving it stays "measured", and its
    # state line says the gap still moves
    values = {"none": [0.50, 0.52, 0.51], "fp16": [0.40, 0.43, 0.41]}
    rising = judge(_claim(expect="stated"), _frame(lb, values, gains={"fp16": 0.2}))
    assert (
        rising.verdict == "measured (no direction stated)"
        and "not plateaued (the gap changes by" in rising.state.text()
    )


def test_the_plateau_is_the_gaps_and_the_baselines_own_level_decides_nothing(lb):
    values = {"none": [0.50, 0.52, 0.51], "fp16": [0.40, 0.43, 0.41]}
    # both curves still climb alike: the gap has stopped moving, so the difference is decided; the
    # baseline's own rise is on the line, marked as not deciding
    alike = judge(_claim(), _frame(lb, values, gain=0.2))
    # curve: v - 0.2 * (200 - step) / 120 for steps 80..200; at 150 (3/4 of 200): v - 0.0833
    assert alike.state.gain == pytest.approx(0.0833, abs=1e-3) and alike.state.gap_gain == pytest.approx(0.0, abs=1e-9)
    assert alike.state.plateaued is True and alike.verdict == "reproduced"
    assert "the gap changes by +0 over its last quarter" in alike.state.text()
    assert "none's own level +0.0833 (shown, not deciding)" in alike.state.text()
    # a flat baseline and an arm still closing in: the gap moves, the verdict waits
    closing = judge(_claim(), _frame(lb, values, gains={"fp16": 0.2}))
    assert closing.state.gain == pytest.approx(0.0) and closing.state.gap_gain == pytest.approx(0.0833, abs=1e-3)
    assert closing.state.plateaued is False and closing.verdict == NOT_TESTABLE
    assert "the gap (fp16 - none) still moves by +0.0833" in closing.why
    # paired seeds: the gap's change is the mean of the per-seed differences (seed 0's arm rises by 0.1
    # after step 150, the others and the baseline stay flat: (0.1 + 0 + 0) / 3)
    flat = [[0.5] * 5, [0.52] * 5, [0.51] * 5]
    arm = [[0.3, 0.3, 0.3, 0.3, 0.4], [0.31] * 5, [0.32] * 5]
    assert judge(_claim(), _curved(lb, {"none": flat, "fp16": arm})).state.gap_gain == pytest.approx(0.1 / 3)
    # a close claim: a flat gap is not enough when the arm itself still moves by more than the MDD
    near = {"none": [0.50, 0.52, 0.51], "bf16": [0.501, 0.519, 0.51]}
    both_move = judge(_claim(compressor="bf16", expect="close", tolerance=0.01), _frame(lb, near, gain=0.05))
    assert both_move.state.gap_gain == pytest.approx(0.0, abs=1e-9) and both_move.verdict == NOT_TESTABLE
    assert "bf16's own curve still moves by +0.0208" in both_move.why
    # the limit is the comparison's MDD (the smallest effect it resolves)
    assert both_move.state.gain_limit == pytest.approx(both_move.mdd)


def test_no_step_is_chosen_on_the_reported_evaluation(lb):
    """The verdict reads the last evaluation of the tier's fixed step count: a baseline past its best (its
    reported curve peaks earlier) is not re-judged at its best step, whatever the comparison reads there."""
    none = [[0.50, 0.58, 0.600 + j, 0.57, 0.55 + j] for j in (0.0, 0.002, -0.001)]
    # close to none at the end, far from it at none's best step (120): only the end counts, and the gap's
    # change over the last quarter (-0.0225 per seed against the MDD) decides whether it may be judged
    caught_up = [[0.30, 0.38, 0.400 + j, 0.50, 0.55 + j] for j in (0.001, -0.001, 0.0005)]
    v = judge(_claim(expect="close", tolerance=0.01), _curved(lb, {"none": none, "fp16": caught_up}))
    assert v.mean == pytest.approx(0.55017, abs=1e-4) and v.mean_ref == pytest.approx(0.55033, abs=1e-4)
    assert "best" not in v.state.text() and "best" not in v.why
    assert v.state.gap_gain == pytest.approx(0.10, abs=5e-3) and v.verdict == NOT_TESTABLE  # the arm still closes in
    # both fall back alike from step 120: the gap is flat, so the end decides (the old rule re-judged at step 120)
    worse = [[0.30, 0.38, 0.400 + j, 0.37, 0.35 + j] for j in (0.001, -0.002, 0.0)]
    v = judge(_claim(), _curved(lb, {"none": none, "fp16": worse}))
    assert v.state.gain < 0 and v.state.plateaued is True and v.verdict == "reproduced"
    assert v.mean == pytest.approx(0.34967, abs=1e-4)


def test_last_quarter_gain_interpolates_and_signs_by_direction():
    pts = [(100.0, 0.2), (200.0, 0.4), (400.0, 0.7)]
    assert last_quarter_gain(pts, True) == pytest.approx(0.15)  # at 300: 0.4 + 0.5 * 0.3 = 0.55; 0.7 - 0.55
    assert last_quarter_gain([(100.0, 3.0), (200.0, 2.0)], False) == pytest.approx(0.5)  # at 150: 2.5; loss falls
    assert last_quarter_gain([(10.0, 1.0)], True) != last_quarter_gain([(10.0, 1.0)], True)  # NaN


def test_both_sides_at_the_trivial_predictor_is_not_testable(lb):
    # shakespeare's character frequencies score 3.35 nats: two collapsed rows say nothing
    frame = _frame(lb, {"none": [3.352, 3.349, 3.351], "fp16": [3.36, 3.362, 3.358]}, task="shakespeare")
    v = judge(_claim(task="shakespeare"), frame)
    assert v.state.floor is True and v.verdict == NOT_TESTABLE and "trivial predictor" in v.why
    assert "at the floor" in v.state.text()


def test_welch_when_the_seeds_differ_and_lower_is_better_for_a_loss(lb):
    frame = _frame(lb, {"none": [2.10, 2.12, 2.11], "fp16": [2.40, 2.45, 2.42]}, task="shakespeare")
    frame.loc[(frame.compressor == "fp16"), "seed"] = [5, 6, 7]
    v = judge(_claim(task="shakespeare"), frame)
    assert v.test.startswith("Welch") and v.effect == pytest.approx(-(2.4233 - 2.11), abs=1e-3)  # higher loss = worse
    assert v.verdict == "reproduced"


def test_no_pairing_across_machine_classes(lb):
    values = {"none": [0.50, 0.52, 0.51], "fp16": [0.40, 0.43, 0.41]}
    frame = _frame(lb, values, machine={"fp16": "Another CPU"})
    v = judge(_claim(), frame)
    assert v.test == "Welch (different machine classes: no pairing)" and v.state.same_machine is False
    assert "different machine classes" in v.state.text()
    # the same machine class for both when the comparison has it: paired again
    both = _frame(lb, values, machine={"fp16": "Another CPU", "none": "Another CPU"})
    assert judge(_claim(), both).test == "paired by seed"


def _staged(lb, comp, seed, stages, value):
    """A record of ``comp`` in ``stages`` pipeline stages whose curve and final metric are ``value``."""
    r = lb.make_record("cifar10", comp, seed, record_id=f"{comp}-{stages}-{seed}")
    r["final_metric"] = value
    r["run"] = {**r["run"], "n_stages": stages}
    r["cell_key"] = f"{comp}{stages}{seed}"
    for p in r["curve"]:
        p["metric"] = value
    return r


def test_the_comparison_is_taken_in_the_claim_rows_setup(lb):
    recs = [
        _staged(lb, comp, seed, stages, v)
        for seed, (a, b, c) in enumerate([(0.40, 0.50, 0.30), (0.41, 0.52, 0.31), (0.42, 0.51, 0.29)])
        for comp, v, stages in (("fp16", a, 3), ("none", b, 3), ("none", c, 2))
    ]
    frame = to_frame(recs).assign(maintainers=True)
    v = judge(_claim(), frame)
    assert v.mean_ref == pytest.approx(0.51) and v.state.setup.startswith("3 stages")


def test_same_models_without_compression_and_both_evaluations_shown(lb):
    frame = _frame(lb, {"topk": [0.41, 0.43, 0.40]}, uncompressed={"topk": [0.23, 0.26, 0.31]})
    c = _claim(compressor="topk", compare_to="topk", evaluation="uncompressed_vs_compressed")
    v = judge(c, frame)
    assert v.mean == pytest.approx(0.2667, abs=1e-4) and v.mean_ref == pytest.approx(0.4133, abs=1e-4)
    assert v.verdict == "reproduced"
    row = claims_table([v]).iloc[0]
    assert "evaluated without compression" in row["configuration"]
    assert row["with / without compression at evaluation"] == "0.4133 / 0.2667"


def test_every_row_of_a_tier_with_and_without_compression_side_by_side(lb):
    frame = _frame(lb, {"none": [0.70, 0.72], "aqsgd": [0.60, 0.66]}, uncompressed={"aqsgd": [0.75, 0.73]})
    frame.loc[(frame["compressor"] == "none") & (frame["seed"] == 1), "status"] = "failed"  # not a seed it ran
    table = evaluation_means(frame, tier="quick").set_index("compressor")
    assert table.loc["aqsgd"].tolist()[:1] + table.loc["aqsgd"].tolist()[2:] == [
        "cifar10", "2", "0.63 ± 0.042", "0.74 ± 0.014", "+0.1100"
    ]  # fmt: skip
    assert table.loc["none"].tolist()[2:] == ["1", "0.7", "0.7", "+0.0000"]
    assert table.loc["none", "setup"] == frame.loc[frame["compressor"] == "none", "setup"].iloc[0] != ""
    assert evaluation_means(frame, tier="plateau").empty


def test_bad_claims_are_refused_with_the_claim_named(tmp_path):
    with pytest.raises(ValueError, match="claim 'x': unknown expect 'faster'"):
        _claim(expect="faster")
    with pytest.raises(ValueError, match="needs a positive tolerance"):
        _claim(expect="close")
    with pytest.raises(ValueError, match="min_effect is a positive size"):
        _claim(expect="close", tolerance=0.1, min_effect=0.1)
    with pytest.raises(ValueError, match="unknown column"):
        _claim(column="step_s")
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump({"claims": [{"id": "a", "paper": "P"}]}))
    with pytest.raises(ValueError, match=r"claim 1 \(a\): missing claim, task"):
        load_claims(p)


def test_the_committed_claims_are_matrix_entries_of_their_tier_and_cover_every_seed():
    claims = load_claims()
    assert len(claims) >= 12 and len({c.id for c in claims}) == len(claims)
    m = load_matrix()
    for c in claims:  # the published configuration parses as a matrix entry, on a task of the tier
        assert c.task in m.tier(c.tier).tasks
        _entry(c.entry, f"claim {c.id}")
    assert {"000", "001", "002", "003"} <= {c.seed for c in claims}


def test_report_claims_prints_every_claim_with_a_verdict_and_the_tier_state(capsys):
    assert main(["report", "--records", "records", "--claims"]) == 0
    out = capsys.readouterr().out
    for c in load_claims():
        assert f": {c.id} ({c.paper}" in out and f", {c.task} / {c.tier})" in out
    verdicts = [line.split(":")[0] for line in out.splitlines() if line and line[0].isupper() and ": " in line]
    assert set(verdicts) <= {v.upper() for v in __import__("leaderboard.claims").claims.VERDICTS}
    assert out.count("  tier state: ") == len(load_claims())
    # every state line leads with the gap's trend (or says why a claim has none)
    states = [line for line in out.splitlines() if line.startswith("  tier state: ")]
    assert all("gap" in line for line in states), [line for line in states if "gap" not in line]


def test_a_setup_keeps_one_compressor_name_apart_and_a_time_column_is_lower_better(lb):
    import pandas as pd

    # "none" in two setups: the 4-stage rows must not stand in for the replicated ones
    frame = _frame(lb, {"none": [0.70, 0.71, 0.72], "fp16": [0.60, 0.61, 0.62]})
    replicated = frame[frame["compressor"] == "none"].assign(setup="1 stage, dp=2", final_metric=[0.5, 0.51, 0.52])
    frame = pd.concat([frame, replicated], ignore_index=True)
    mine = _claim(expect="not_worse", tolerance=0.02)
    assert judge(mine, frame).mean_ref == pytest.approx(0.71)  # the claim's own row's setup
    there = judge(_claim(expect="not_worse", tolerance=0.02, setup="1 stage, dp=2", compressor="none"), frame)
    assert there.mean == pytest.approx(0.51) and there.verdict == "reproduced"
    assert judge(_claim(expect="not_worse", tolerance=0.02), frame).verdict == "contradicted"  # 0.1 below
    slow = frame.assign(compress_s=[0.01 if c == "fp16" else 0.001 for c in frame["compressor"]])
    slow.loc[slow["compressor"] == "fp16", "compress_s"] += [0.0, 0.0001, 0.0002]
    v = judge(_claim(column="compress_s", expect="worse"), slow)
    assert v.metric == "compress_s" and v.effect < 0 and v.verdict == "reproduced"
    assert "timing claim" in v.state.text()


def test_a_verdict_from_fewer_than_the_tiers_designed_seeds_says_so(lb):
    # the plateau tier is designed for 5 seeds (matrix.yaml): 3 of them give an interim verdict, and the
    # line says so, since running seeds until p < 0.05 and stopping there would be optional stopping
    frame = _frame(lb, {"none": [0.50, 0.52, 0.51], "fp16": [0.40, 0.43, 0.41]}).assign(tier="plateau")
    v = judge(_claim(tier="plateau"), frame)
    assert v.state.designed_seeds == 5 and "3 of 5 designed seeds (interim" in v.state.text()
    five = _frame(lb, {"none": [0.50, 0.52, 0.51, 0.50, 0.52], "fp16": [0.40, 0.43, 0.41, 0.40, 0.42]})
    full = judge(_claim(tier="plateau"), five.assign(tier="plateau"))
    assert full.state.seeds == 5 and "designed seeds" not in full.state.text()


def test_report_claims_lists_only_the_named_tiers_claims(capsys):
    """`report --claims --tier plateau` narrows the records to that tier; listing the quick tier's
    claims beside them would show every one as "no records at this tier"."""
    assert main(["report", "--records", "records", "--claims", "--tier", "plateau"]) == 0
    out = capsys.readouterr().out
    plateau = [c for c in load_claims() if c.tier == "plateau"]
    assert plateau and all(f": {c.id} ({c.paper}" in out for c in plateau)
    assert all(f": {c.id} ({c.paper}" not in out for c in load_claims() if c.tier != "plateau")


def test_a_compressors_curves_in_two_setups_are_two_curves_never_averaged(lb):
    """The plateau tier runs shakespeare `none` in 4 stages for 800 steps and with 2 replicas for 600:
    one mean over both would be a curve nobody trained."""
    recs = [_staged(lb, "none", seed, stages, v) for seed in range(2) for stages, v in ((3, 0.50), (2, 0.30))]
    frame = to_frame(recs).assign(maintainers=True)
    curves = plateau_curves(frame, tier="quick")
    assert sorted(curves.groupby("setup")["metric"].mean().round(6).tolist()) == [0.3, 0.5]
    assert set(curves["seeds"]) == {2}
    table = evaluation_means(frame, tier="quick")
    assert len(table) == 2 and table["setup"].str.startswith(("2 stages", "3 stages")).all()


def _curved(lb, curves):
    """Records whose curves are ``curves[compressor][seed]`` (metric at steps 40..200); the final
    metric is the curve's last point."""
    recs = []
    for comp, per_seed in curves.items():
        for seed, values in enumerate(per_seed):
            r = lb.make_record("cifar10", comp, seed, record_id=f"{comp}-{seed}")
            for p, v in zip(r["curve"], values):
                p["metric"] = p["metric_uncompressed"] = v
            r["final_metric"] = r["final_metric_uncompressed"] = values[-1]
            recs.append(r)
    return to_frame(recs).assign(maintainers=True)


def test_every_line_shows_both_sides_measured_ratio_and_a_short_code_is_not_at_the_claims_bytes(lb):
    """AQ-SGD sending its first visits in full runs at a fraction of its code's ratio: "close to
    uncompressed" there is mostly uncompressed training, so a claim naming its code's ratio waits."""
    frame = _frame(lb, {"none": [0.50, 0.52, 0.51], "fp16": [0.501, 0.519, 0.511]})
    arm = frame["compressor"] == "fp16"
    frame.loc[arm, "spec_forward"] = "aqsgd(bits=2)"
    frame.loc[arm, "ratio_forward"] = [1.4, 1.5, 1.45]
    frame.loc[~arm, ["spec_forward", "spec_backward", "spec_dp"]] = "none"
    c = _claim(expect="close", tolerance=0.02)
    v = judge(c, frame)
    assert v.verdict == "reproduced" and v.ratio.startswith("1.45x fwd") and v.ratio_ref == "uncompressed (1x)"
    row = claims_table([v]).iloc[0]
    assert "measured 1.45x fwd" in row["configuration"] and "measured uncompressed (1x)" in row["vs"]
    short = judge(_claim(expect="close", tolerance=0.02, min_ratio=8, ratio_of="forward"), frame)
    assert short.verdict == NOT_TESTABLE and "ran at 1.45x (forward), short of the 8x its code stands for" in short.why
    frame.loc[arm, "ratio_forward"] = 15.0
    assert judge(_claim(expect="close", tolerance=0.02, min_ratio=8, ratio_of="forward"), frame).verdict == "reproduced"
    with pytest.raises(ValueError, match="unknown ratio_of"):
        _claim(min_ratio=8, ratio_of="sideways")


def test_a_contradiction_in_a_configuration_the_paper_does_not_describe_names_what_ran(lb):
    values = {"none": [2.00, 2.01, 2.02], "fp16": [2.50, 2.55, 2.45]}
    frame = _frame(lb, values, task="shakespeare")
    frame["config"] = [
        {"optimizer": "sgd(momentum=0.9, clip=1)", "lr": 0.3 if comp == "fp16" else 1.0} for comp in frame["compressor"]
    ]
    plain = judge(_claim(task="shakespeare", expect="not_worse", tolerance=0.01), frame)
    assert plain.verdict == "contradicted" and plain.ran == "sgd(momentum=0.9, clip=1) at lr 0.3"
    assert plain.ran_ref == "sgd(momentum=0.9, clip=1) at lr 1"
    c = _claim(task="shakespeare", expect="not_worse", tolerance=0.01, departs="the abstract names no optimizer")
    v = judge(c, frame)
    assert v.verdict == "contradicted in this configuration"
    assert "ran sgd(momentum=0.9, clip=1) at lr 0.3, code fp16; the abstract names no optimizer" in v.why
    row = claims_table([v]).iloc[0]
    assert "ran sgd(momentum=0.9, clip=1) at lr 0.3" in row["configuration"] and "lr 1" in row["vs"]
    assert judge(_claim(task="shakespeare"), frame).verdict == "reproduced"  # departs only renames a contradiction


def test_judged_seeds_and_each_side_at_its_own_tuned_rate(lb):
    """A rate sweep's seed (100) chose each side's rate: it is left out before a setup is picked, and the
    comparison is taken in its own setup (its own rate), not the arm's; a setup word names the optimizer
    without a rate (a label part that starts with it)."""
    frame = _frame(lb, {"none": [0.50, 0.52, 0.51, 0.90], "fp16": [0.40, 0.43, 0.41, 0.10]})
    frame.loc[frame["seed"] == 3, "seed"] = 100
    rate = {"fp16": "0.3", "none": "1"}
    frame["setup"] = [
        f"1 stage, sgd momentum 0.9 lr {'9' if seed == 100 else rate[comp]}"
        for comp, seed in zip(frame["compressor"], frame["seed"])
    ]
    assert judge(_claim(), frame).verdict == NOT_TESTABLE  # the setups differ: no comparison in the arm's
    words = "1 stage, sgd momentum 0.9"
    v = judge(_claim(seeds=[0, 1, 2], setup=words, compare_setup=words), frame)
    assert (v.n, v.n_ref) == (3, 3) and v.mean_ref == pytest.approx(0.51) and v.verdict == "reproduced"
    assert v.state.setup == "1 stage, sgd momentum 0.9 lr 0.3"
    assert judge(_claim(seeds=[0, 1, 2], setup="1 stage, sgd mom", compare_setup=words), frame).n == 0  # whole words


def test_every_claim_cites_its_source_words_or_reads_as_the_projects_own_question():
    from leaderboard.claims import OWN_QUESTION, SEED_PAPERS, source_text

    claims = load_claims()
    for c in claims:
        text = source_text(c)
        if c.quote:
            assert text == f'{SEED_PAPERS[c.seed]}: "{c.quote}"' and len(c.quote.split()) <= 15  # a few words
        else:
            assert text.startswith(OWN_QUESTION)
    assert source_text(_claim(seed="003")) == f"{OWN_QUESTION} ({SEED_PAPERS['003']} does not state it)"
    with pytest.raises(ValueError, match="a quote needs the seed paper"):
        _claim(quote="words")
    # the quotes are the papers' own words (where the texts are on this machine)
    papers = __import__("pathlib").Path("/work/shared/papers")
    if not papers.is_dir():
        pytest.skip("the seed papers' texts are not on this machine")
    for c in claims:
        if c.quote:
            assert c.quote in " ".join((papers / SEED_PAPERS[c.seed]).read_text().split()), c.id
