"""What the page must say when it cannot show what the reader asked for.

An author who opens ``?entry=NAME`` after a smoke-tier run would otherwise see the quick tier
(where the maintainers' baselines are) without their entry, and no word why. Pure functions
over the index frame (columns ``entry``, ``task``, ``tier``, ``maintainers``), so the page and
its tests agree on the wording.
"""

from __future__ import annotations

from typing import Sequence

import pandas as pd

from leaderboard.frame import MAINTAINERS
from leaderboard.safe_text import markdown_cell

__all__ = ["entry_tier", "entry_notice", "baseline_notice", "notice_text"]


def _rows_of(shown: pd.DataFrame, entry: str) -> pd.DataFrame:
    return shown[shown["entry"] == entry] if entry and len(shown) else shown.iloc[:0]


def entry_tier(shown: pd.DataFrame, entry: str, task: str, tiers: Sequence[str], default: str) -> str:
    """The tier the page opens on: ``default``, unless the entry named in the URL has no rows
    there on ``task`` and has some on another of ``tiers`` (the first of those)."""
    mine = _rows_of(shown, entry)
    own = set(mine.loc[mine["task"] == task, "tier"])
    if not own or default in own:
        return default
    return next((t for t in tiers if t in own), default)


def notice_text(note: str) -> str:
    """A notice as the page renders it (``st.info`` reads markdown): inert text. A notice quotes the
    URL's ``?entry=`` value, which anyone can write: ``[x](https://...)`` or ``![](...)`` must stay text."""
    return markdown_cell(note)


def entry_notice(shown: pd.DataFrame, entry: str, task: str, tier: str) -> str | None:
    """One sentence when the entry named in the URL has no rows on this task and tier: where it
    does have rows, or that it has none at all. None when it is shown (or none was named)."""
    if not entry or " / " in entry:  # a row label, not an entry id: the detail picker handles it
        return None
    mine = _rows_of(shown, entry)
    if ((mine["task"] == task) & (mine["tier"] == tier)).any():
        return None
    if mine.empty:
        return (
            f"Entry {entry!r} (from the URL) has no successful records among the sources read; "
            "check the name, or tick 'Include local results' if it is in your results store."
        )
    where = ", ".join(f"{t} / {r}" for t, r in sorted(set(zip(mine["task"], mine["tier"]))))
    return f"Entry {entry!r} (from the URL) has no records on {task} / {tier}; it has records on: {where}."


def baseline_notice(shown: pd.DataFrame, task: str, tier: str) -> str | None:
    """One sentence when this task and tier has no maintainers' baseline rows but another tier
    of the task has, naming those tiers (where an author can run to be ranked beside them)."""
    if not len(shown):
        return None
    maint = shown["maintainers"] if "maintainers" in shown else shown["entry"] == MAINTAINERS
    here = (shown["task"] == task) & (shown["tier"] == tier)
    if (here & maint.astype(bool)).any():
        return None
    tiers = sorted(set(shown.loc[(shown["task"] == task) & maint.astype(bool), "tier"]))
    if not tiers:  # none on this task at all (e.g. a board of local results only): nothing to point to
        return None
    listed = ", ".join(tiers)
    return (
        f"No maintainers' baselines ({MAINTAINERS}) on the {tier} tier of {task}; they exist on: {listed}. "
        f"Run your entry with `--tier {tiers[0]}` to be ranked beside them."
    )
