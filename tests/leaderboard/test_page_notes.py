"""What the page says when it cannot show what the reader asked for: an entry named in the URL
that is not on the selected task and tier, and a tier without the maintainers' baselines."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from leaderboard.page_notes import baseline_notice, entry_notice, entry_tier

APP = Path(__file__).resolve().parents[2] / "leaderboard" / "app.py"


def _shown(*rows: tuple[str, str, str, bool]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["entry", "task", "tier", "maintainers"])


BOARD = _shown(
    ("mpcbench-baselines", "cifar10", "quick", True),
    ("mine", "cifar10", "smoke", False),
    ("mine", "sst2", "quick", False),
)


def test_an_entry_only_on_another_tier_opens_that_tier():
    assert entry_tier(BOARD, "mine", "cifar10", ["smoke", "quick"], "quick") == "smoke"
    assert entry_tier(BOARD, "mine", "sst2", ["smoke", "quick"], "quick") == "quick"
    assert entry_tier(BOARD, "", "cifar10", ["smoke", "quick"], "quick") == "quick"
    assert entry_tier(BOARD, "nobody", "cifar10", ["smoke", "quick"], "quick") == "quick"


def test_an_entry_not_on_this_task_and_tier_is_said_with_where_it_is():
    note = entry_notice(BOARD, "mine", "cifar10", "quick")
    assert note is not None and "no records on cifar10 / quick" in note and "cifar10 / smoke, sst2 / quick" in note
    assert entry_notice(BOARD, "mine", "cifar10", "smoke") is None
    assert "no successful records" in (entry_notice(BOARD, "typo", "cifar10", "quick") or "")
    assert entry_notice(BOARD, "", "cifar10", "quick") is None
    assert entry_notice(BOARD, "mine / topk", "cifar10", "quick") is None  # a row label: the picker's job


def test_a_tier_without_maintainers_baselines_names_the_tiers_that_have_them():
    note = baseline_notice(BOARD, "cifar10", "smoke")
    assert note is not None and "they exist on: quick" in note and "--tier quick" in note
    assert baseline_notice(BOARD, "cifar10", "quick") is None
    assert baseline_notice(BOARD, "sst2", "quick") is None  # no baselines on the task at all: nothing to point to


@pytest.mark.parametrize("entry", ["smoke-only", "no-such-entry"])
def test_the_page_says_why_the_url_entry_is_not_in_the_table(monkeypatch, tmp_path, lb, entry):
    from leaderboard.frame import MAINTAINERS

    root = tmp_path / "records"
    lb.write_entry(root, MAINTAINERS, lb.make_records(tasks=("cifar10",), compressors=("none",), seeds=(0,)))
    smoke = [dict(r, tier="smoke") for r in lb.make_records(tasks=("cifar10",), compressors=("fp16",), seeds=(0,))]
    lb.write_entry(root, "smoke-only", [dict(r, record_id="S" + r["record_id"][1:]) for r in smoke])
    monkeypatch.setenv("MPCBENCH_RECORDS", str(root))
    monkeypatch.setenv("MPCBENCH_RESULTS", "")
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.query_params["entry"] = entry
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    infos = [i.value for i in at.info]
    if entry == "smoke-only":  # opened on its tier, and told where the baselines are
        assert at.selectbox(key="tier").value == "smoke"
        assert any("they exist on: quick" in i for i in infos), infos
    else:
        assert at.selectbox(key="tier").value == "quick"
        assert any("'no-such-entry' (from the URL) has no successful records" in i for i in infos), infos


def test_the_urls_entry_is_shown_as_text_never_markdown():
    """Issue 35: ?entry= was rendered as markdown in the notice (a live link and an image)."""
    from leaderboard.page_notes import notice_text

    hostile = "[click](https://evil.example) ![x](https://evil.example/i.png) <b>bold</b>"
    note = entry_notice(pd.DataFrame(columns=["entry", "task", "tier", "status"]), hostile, "cifar10", "quick")
    shown = notice_text(note)
    assert "](" not in shown.replace("\\](", "") and "<b>" not in shown and "\\[click\\]" in shown
