"""The reproductions: claims as data, judged against records (issue 24, item 4)."""

from __future__ import annotations

import pytest
import yaml

from leaderboard.claims import Claim, claims_table, judge, load_claims
from leaderboard.frame import to_frame
from suite.bench.cli import main
from suite.bench.matrix_file import _entry, load_matrix


def _frame(lb, values: dict[str, list[float]], task: str = "cifar10", uncompressed: dict | None = None):
    recs = []
    for comp, vals in values.items():
        for seed, v in enumerate(vals):
            r = lb.make_record(task, comp, seed, record_id=f"{comp}-{seed}")
            r["final_metric"] = v
            r["final_metric_uncompressed"] = (uncompressed or {}).get(comp, vals)[seed]
            recs.append(r)
    return to_frame(recs).assign(maintainers=True)


def _claim(**kw) -> Claim:
    base = dict(id="x", paper="P", claim="c", task="cifar10", tier="quick", entry="fp16", compressor="fp16")
    return Claim(**{**base, "compare_to": "none", "expect": "worse", **kw})


def test_worse_better_close_and_not_run_verdicts_on_hand_made_records(lb):
    frame = _frame(lb, {"none": [0.50, 0.52, 0.51], "fp16": [0.40, 0.43, 0.41], "bf16": [0.501, 0.519, 0.51]})
    v = judge(_claim(), frame)
    # paired by seed: d = (-0.10, -0.09, -0.10), mean -0.0967, sd 0.00577 -> t = -29.0 on 2 df,
    # two-sided p = 1 - |t| / sqrt(t^2 + 2) = 0.00119
    assert v.test == "paired by seed" and v.effect == pytest.approx(-0.09667, abs=1e-4)
    assert v.p == pytest.approx(0.00119, abs=2e-5) and v.verdict == "reproduced"
    assert judge(_claim(expect="better"), frame).verdict == "contradicted"
    close = judge(_claim(compressor="bf16", expect="close", tolerance=0.01), frame)
    assert close.verdict == "reproduced" and -0.01 <= close.low and close.high <= 0.01
    far = judge(_claim(expect="close", tolerance=0.01), frame)
    assert far.verdict == "contradicted"
    wide = judge(_claim(compressor="bf16", expect="close", tolerance=0.001), frame)
    assert wide.verdict == "not resolvable at this tier" and "MDD" in wide.why
    missing = judge(_claim(compressor="topk(ratio=0.05)"), frame)
    assert missing.verdict == "not run" and "0 seed(s) of topk(ratio=0.05)" in missing.why


def test_welch_when_the_seeds_differ_and_lower_is_better_for_a_loss(lb):
    frame = _frame(lb, {"none": [2.10, 2.12, 2.11], "fp16": [2.40, 2.45, 2.42]}, task="shakespeare")
    frame.loc[(frame.compressor == "fp16"), "seed"] = [5, 6, 7]
    v = judge(_claim(task="shakespeare"), frame)
    assert v.test == "Welch" and v.effect == pytest.approx(-(2.4233 - 2.11), abs=1e-3)  # higher loss = worse
    assert v.verdict == "reproduced"


def test_same_models_without_compression(lb):
    frame = _frame(lb, {"topk": [0.41, 0.43, 0.40]}, uncompressed={"topk": [0.23, 0.26, 0.31]})
    c = _claim(compressor="topk", compare_to="topk", evaluation="uncompressed_vs_compressed")
    v = judge(c, frame)
    assert v.mean == pytest.approx(0.2667, abs=1e-4) and v.mean_ref == pytest.approx(0.4133, abs=1e-4)
    assert v.verdict == "reproduced"
    assert "evaluated without compression" in claims_table([v])["configuration"].iloc[0]


def test_bad_claims_are_refused_with_the_claim_named(tmp_path):
    with pytest.raises(ValueError, match="claim 'x': unknown expect 'faster'"):
        _claim(expect="faster")
    with pytest.raises(ValueError, match="needs a positive tolerance"):
        _claim(expect="close")
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump({"claims": [{"id": "a", "paper": "P"}]}))
    with pytest.raises(ValueError, match=r"claim 1 \(a\): missing claim, task"):
        load_claims(p)


def test_the_committed_claims_are_matrix_entries_of_their_tier():
    claims = load_claims()
    assert len(claims) >= 12 and len({c.id for c in claims}) == len(claims)
    m = load_matrix()
    for c in claims:  # the published configuration parses as a matrix entry, on a task of the tier
        assert c.task in m.tier(c.tier).tasks
        _entry(c.entry, f"claim {c.id}")


def test_report_claims_prints_every_claim_with_a_verdict(capsys):
    assert main(["report", "--records", "records", "--claims"]) == 0
    out = capsys.readouterr().out
    for c in load_claims():
        assert f": {c.id} ({c.paper}, {c.task} / {c.tier})" in out
    verdicts = [line.split(":")[0] for line in out.splitlines() if line and line[0].isupper() and ": " in line]
    assert set(verdicts) <= {"REPRODUCED", "CONTRADICTED", "NOT RESOLVABLE AT THIS TIER", "NOT RUN"}
