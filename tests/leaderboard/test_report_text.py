"""Issue 12, A17 and A18: record text in ``mpcbench report`` is inert, in markdown and on a terminal."""

from __future__ import annotations

import pytest

from suite.bench.cli import main

EVIL = "evil\x1b[2J\x1b[31mred\r\n# Heading\n<script>alert(1)</script> *bold* [x](javascript:1) | col \u202eexe.txt"


def _store(tmp_path, lb):
    recs = [
        lb.make_record("cifar10", "none", 0),
        lb.make_record("cifar10", EVIL, 0, record_id="evil-0"),
        lb.make_record("cifar10", "fp16", 0, status="failed", error="boom \x1b[1A\x1b[2Kfake ok line", record_id="f-0"),
    ]
    return lb.write_jsonl(tmp_path / "store.jsonl", recs)


def test_a18_terminal_report_prints_no_control_characters(tmp_path, lb, capsys):
    assert main(["report", "--results", str(_store(tmp_path, lb))]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\r" not in out and "\u202e" not in out
    assert "evil?[2J?[31mred # Heading" in out  # the name is still readable, on one line
    assert not any(line.startswith("# Heading") for line in out.splitlines())
    assert "boom ?[1A?[2Kfake ok line" in out


def test_a17_markdown_report_escapes_markup_html_and_newlines(tmp_path, lb, capsys):
    assert main(["report", "--results", str(_store(tmp_path, lb)), "--format", "markdown"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("|")]
    evil = [line for line in rows if "evil" in line]
    assert len(evil) == 1  # one table row: the newline did not end the row or start a heading
    assert not any(line.lstrip().startswith("#") for line in out.splitlines())
    assert "<script>" not in out and "&lt;script&gt;" in evil[0]
    assert "\\*bold\\*" in evil[0] and "\\[x\\]" in evil[0] and "\\| col" in evil[0]
    header = rows[0]
    assert evil[0].count(" | ") == header.count(" | ")  # the '|' in the name added no column


@pytest.mark.parametrize("text", ["a\x00b", "\x1b]0;title\x07", "x\u2028y", "\x9b31m", "z\u200bw"])
def test_plain_leaves_one_printable_line(text):
    from leaderboard.safe_text import plain

    s = plain(text)
    assert s.isprintable() and "\n" not in s


def test_markdown_cell_keeps_ordinary_text():
    from leaderboard.safe_text import markdown_cell

    assert markdown_cell("topk(ratio=0.1)") == "topk(ratio=0.1)"
    assert markdown_cell("a_b") == "a\\_b"
