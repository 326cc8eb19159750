"""Issue 36: the page's Reproductions section shows each verdict with the tier's state (the same
verdicts as ``mpcbench report --claims``) and the plateau tier's learning curves."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

from leaderboard.claims import claims_table, evaluation_means, judge, load_claims, plateau_curves
from leaderboard.index import load_index

REPO = Path(__file__).resolve().parents[2]
APP = REPO / "leaderboard" / "app.py"


def test_the_reproductions_section_shows_verdicts_with_the_tier_state_and_the_plateau_curves(monkeypatch):
    monkeypatch.setenv("MPCBENCH_RECORDS", str(REPO / "records"))
    monkeypatch.setenv("MPCBENCH_RESULTS", "")
    at = AppTest.from_file(str(APP), default_timeout=120).run()
    assert not at.exception, [e.value for e in at.exception]
    shown = next(d.value for d in at.main.dataframe if "tier state" in d.value.columns)
    assert list(shown.columns[:5]) == ["verdict", "claim", "paper", "task / tier", "tier state"]
    frame = load_index([], [str(REPO / "records")]).frame
    expected = claims_table([judge(c, frame) for c in load_claims()])
    assert list(shown["claim"]) == list(expected["claim"])
    assert list(shown["verdict"]) == list(expected["verdict"]) and list(shown["tier state"]) == list(
        expected["tier state"]
    )
    evaluated = next(d.value for d in at.main.dataframe if "without compression" in d.value.columns)
    assert evaluated.astype(str).values.tolist() == evaluation_means(frame).astype(str).values.tolist()
    curves = plateau_curves(frame)
    charts = [e for e in at.main if getattr(e, "type", None) == "vega_lite_chart"]
    # the page's own charts (time to target against bandwidth, Pareto, time to quality, curves, profiles)
    # plus one per plateau-tier (task, setup)
    assert len(charts) == 5 + len(curves.groupby(["task", "setup"]))
