"""Issue 36: docs/reproductions.md's tables are the command's output, not a copy that drifts."""

from __future__ import annotations

import pytest

from leaderboard.docs_tables import BLOCKS, PAGE, generated_blocks, render


def test_the_pages_generated_blocks_equal_what_the_committed_records_give():
    page = PAGE.read_text()
    fresh = render(page, generated_blocks())
    assert fresh == page, "docs/reproductions.md differs from the records: run python -m leaderboard.docs_tables"


def test_the_claims_block_is_report_claims_markdown(capsys):
    from suite.bench.cli import main

    assert main(["report", "--records", "records", "--claims", "--format", "markdown"]) == 0
    assert capsys.readouterr().out.strip() in PAGE.read_text()


def test_render_replaces_only_the_blocks_and_refuses_a_page_without_one():
    page = "intro\n<!-- generated: claims -->\nold\n<!-- end generated: claims -->\noutro\n"
    assert render(page, {"claims": "new table\n"}) == (
        "intro\n<!-- generated: claims -->\n\nnew table\n\n<!-- end generated: claims -->\noutro\n"
    )
    with pytest.raises(ValueError, match="no '<!-- generated: score -->'"):
        render(page, {"score": "x"})
    assert set(BLOCKS) == {"claims", "plateau-curves", "plateau-evaluation", "score"}
