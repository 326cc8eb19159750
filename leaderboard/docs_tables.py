"""The tables docs/reproductions.md shows, generated from the committed records by the same code as
``mpcbench report --records records --claims / --score --format markdown``.

    python -m leaderboard.docs_tables            # rewrite the generated blocks of the page
    python -m leaderboard.docs_tables --check    # exit 1 (and say which block) when the page differs

A generated block sits between ``<!-- generated: NAME -->`` and ``<!-- end generated: NAME -->``;
the text around the blocks is hand-written. ``tests/leaderboard/test_docs_tables.py`` fails when a
block differs from what the records give, so the page cannot drift from the command.
"""

from __future__ import annotations

import argparse
import io
import re
import sys
from pathlib import Path
from typing import Callable

import pandas as pd

from suite.results import COMMITTED_RECORDS

__all__ = ["PAGE", "BLOCKS", "generated_blocks", "render", "main"]

PAGE = Path(__file__).resolve().parents[1] / "docs" / "reproductions.md"


def _claims(frame: pd.DataFrame) -> str:
    from leaderboard.report import write_claims

    out = io.StringIO()
    write_claims(frame, "markdown", out)
    return out.getvalue()


def _score(frame: pd.DataFrame) -> str:
    from leaderboard.report import write_score

    out = io.StringIO()
    write_score(frame, "markdown", out, tier="quick")
    return out.getvalue()


def _plateau_curves(frame: pd.DataFrame) -> str:
    from leaderboard.claims import panel_title, plateau_curves
    from leaderboard.report import markdown

    curves = plateau_curves(frame)
    if curves.empty:
        return "(no plateau-tier records yet)\n"
    parts = []
    for (task, setup), g in curves.groupby(["task", "setup"], sort=True):
        wide = g.pivot_table(index="step", columns="compressor", values="metric").sort_index()
        seeds = g.groupby("compressor")["seeds"].max()
        wide.columns = [f"{c} ({int(seeds[c])} seeds)" for c in wide.columns]
        table = wide.reset_index().map(lambda v: f"{v:.4g}" if isinstance(v, float) else str(v))
        parts.append(f"{panel_title(task, setup)} (mean over seeds at each evaluation):\n\n" + markdown(table) + "\n")
    return "\n".join(parts)


def _plateau_evaluation(frame: pd.DataFrame) -> str:
    from leaderboard.claims import evaluation_means
    from leaderboard.report import markdown

    table = evaluation_means(frame)
    return "(no plateau-tier records yet)\n" if table.empty else markdown(table) + "\n"


BLOCKS: dict[str, Callable[[pd.DataFrame], str]] = {
    "claims": _claims,
    "plateau-curves": _plateau_curves,
    "plateau-evaluation": _plateau_evaluation,
    "score": _score,
}


def _committed_frame(records: Path = COMMITTED_RECORDS) -> pd.DataFrame:
    from leaderboard.index import load_index

    return load_index([], [str(records)]).frame


def generated_blocks(frame: pd.DataFrame | None = None) -> dict[str, str]:
    """Each block's text from ``frame`` (default: the committed records, as ``report --records records``)."""
    frame = _committed_frame() if frame is None else frame
    return {name: make(frame) for name, make in BLOCKS.items()}


def _pattern(name: str) -> re.Pattern[str]:
    return re.compile(
        rf"(<!-- generated: {re.escape(name)} -->\n)(.*?)(<!-- end generated: {re.escape(name)} -->)", re.DOTALL
    )


def render(page: str, blocks: dict[str, str]) -> str:
    """``page`` with every generated block replaced by ``blocks``' text; a block the page lacks is an error."""
    for name, text in blocks.items():
        pat = _pattern(name)
        if not pat.search(page):
            raise ValueError(f"{PAGE.name}: no '<!-- generated: {name} -->' ... '<!-- end generated: {name} -->' block")
        body = "\n" + text.rstrip("\n") + "\n\n"
        page = pat.sub(lambda m, body=body: m.group(1) + body + m.group(3), page)  # type: ignore[misc]
    return page


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m leaderboard.docs_tables", description=__doc__.split("\n")[0])
    p.add_argument("--check", action="store_true", help="exit 1 when the page differs from the records")
    args = p.parse_args(argv)
    page = PAGE.read_text()
    fresh = render(page, generated_blocks())
    if args.check:
        if fresh != page:
            stale = [n for n in BLOCKS if _pattern(n).search(page).group(2) != _pattern(n).search(fresh).group(2)]  # type: ignore[union-attr]
            print(f"{PAGE}: generated block(s) out of date: {', '.join(stale)}; run python -m leaderboard.docs_tables")
            return 1
        return 0
    if fresh != page:
        PAGE.write_text(fresh)
        print(f"rewrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
