"""A ranking rule is one class: its question, controls and rank marks reach the report and the page
without either naming it (issue 27: adding a rule touches one file plus its test)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from leaderboard import rules
from leaderboard.rules import Rule
from suite.bench import cli
from suite.bench.cli import main

APP = Path(__file__).resolve().parents[2] / "leaderboard" / "app.py"


class FewestBytes(Rule):
    """Rank by wire bytes per step, fewest first; every rank marked with a tilde (to see it shown)."""

    def question(self, metric, *, higher_is_better=True, target=None, network=None, min_ratio=None):
        return f"Q: which compressor sends the fewest bytes? (min ratio {min_ratio})"

    def keys(self, out, quality_key, *, min_ratio, network, direction):
        return [out[f"bytes_per_step_{direction}"].where(out["n"] > 0)]

    def rank_labels(self, ranked):
        return [f"~{int(r)}" for r in ranked["rank"]]


@pytest.fixture
def fewest(monkeypatch):
    rule = FewestBytes("fewest_bytes", "Fewest bytes", "Fewest wire bytes per step first.", controls=("min_ratio",))
    monkeypatch.setitem(rules.RULES, rule.name, rule)
    monkeypatch.setattr(cli.RULE_CHOICES, "_values", None)  # --rule's choices are read once per process
    return rule


def test_an_unknown_control_is_refused_when_the_rule_is_made():
    with pytest.raises(ValueError, match="unknown control.*valid: network, min_ratio"):
        FewestBytes("x", "X", "x", controls=("bandwidth",))


def test_the_report_asks_the_rules_question_and_shows_its_marks(fewest, tmp_path, lb, capsys):
    store = lb.write_jsonl(tmp_path / "store.jsonl", lb.make_records())
    assert main(["report", "--results", str(store), "--rule", "fewest_bytes", "--min-ratio", "2"]) == 0
    out = capsys.readouterr().out
    assert "ranking: Fewest bytes" in out
    assert out.count("Q: which compressor sends the fewest bytes? (min ratio 2.0)") == 2  # cifar10, shakespeare
    assert "~1" in out and "~4" in out


def test_the_page_shows_the_rules_question_controls_and_marks(fewest, monkeypatch, records_dir):
    monkeypatch.setenv("MPCBENCH_RECORDS", str(records_dir))
    monkeypatch.setenv("MPCBENCH_RESULTS", "")
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    at.selectbox(key="rule").select("time_to_target").run()
    assert not [n for n in at.number_input if n.key == "min_ratio"]  # time_to_target has no such control
    at.selectbox(key="rule").select("fewest_bytes").run()
    assert not at.exception, [e.value for e in at.exception]
    assert [n for n in at.number_input if n.key == "min_ratio"]  # the rule asked for it
    shown = [t.value for t in at.text] + [m.value for m in at.markdown]  # the question leads the page, in bold
    assert any("which compressor sends the fewest bytes?" in v for v in shown), shown
    table: pd.DataFrame = at.main.dataframe[0].value
    assert table["rank"].iloc[0] == "~1" and all(r.startswith("~") for r in table["rank"])
    assert table["compressor"].iloc[0] == "quant(bits=4)"  # the fewest bytes in the fixture (13.5%)
