"""``mpcbench compare STORE``: a results store's rows against the maintainers' rows, for an author's CI.

    result = compare(store_frame, maintainers_frame, network="1Gbps", fail_above=0.02)
    write_compare(result, sys.stdout)        # one table; result.failed: rows past the threshold

Each row of the store (one compressor of one task, tier and run setup on one machine class) is
set against the maintainers' row (:data:`leaderboard.frame.MAINTAINERS`) of the same task, tier
and setup: their run of the same compressor where they have one (a reproduction), else their
``none`` (what the compression costs). Quality: the difference of the means with Welch's test
and the minimal detectable difference (:func:`leaderboard.statistics.quality_difference`, the
page's own test); compression ratio and modeled time-to-target side by side, read from the
aggregate's columns (no time is computed here). ``fail_above``: a row whose quality is worse than
its reference by more than this (in the metric's units, worse in the metric's own direction) fails.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TextIO

import pandas as pd

from leaderboard.frame import BASELINE, MAINTAINERS
from leaderboard.safe_text import plain
from leaderboard.statistics import MEASURED_SPREAD, NOT_RESOLVED, aggregate, quality_difference
from leaderboard.views import short_name

__all__ = ["CompareResult", "compare", "write_compare"]

_SAME = ("task", "tier", "setup")


@dataclass
class CompareResult:
    """The comparison table (one line per store row), the rows past the threshold, and the rows
    that had no maintainers' row of their task, tier and setup to compare with."""

    table: pd.DataFrame
    failed: list[str] = field(default_factory=list)
    unmatched: list[str] = field(default_factory=list)
    network: str | None = None
    fail_above: float | None = None


def _fmt(v: float | None, spec: str = ".4g") -> str:
    return "-" if v is None or v != v else format(v, spec)


def _quality(r: dict) -> str:
    sd = r.get("metric_std", math.nan)
    return f"{_fmt(r['metric_mean'])}" + (f" ± {_fmt(sd, '.2g')}" if sd == sd else "") + f" (n={int(r['n'])})"


def _time(r: dict, network: str | None) -> str:
    if not network:
        return "-"
    t, reached = r.get(f"time_to_target_s@{network}", math.nan), r.get(f"reached@{network}", 0.0)
    if t != t:
        return "not reached"
    seeds = int(round(reached * r["n"]))
    return f"{t:.3g} s" + ("" if seeds == r["n"] else f" ({seeds}/{int(r['n'])} seeds)")


def _reference(r: dict, maint: dict[tuple, dict[str, dict]]) -> dict | None:
    """The maintainers' row of the same compressor where they ran it, else their ``none``."""
    rows = maint.get(tuple(r[k] for k in _SAME), {})
    return rows.get(r["compressor"]) or rows.get(BASELINE)


def compare(
    store: pd.DataFrame, maintainers: pd.DataFrame, *, network: str | None = None, fail_above: float | None = None
) -> CompareResult:
    """``store``'s rows (records of a results store, :mod:`leaderboard.index` rows) against the
    ``maintainers`` records of the same task, tier and setup (see the module docstring)."""
    mine = aggregate(store[store["status"] == "ok"]) if len(store) else store
    theirs = aggregate(maintainers[(maintainers["status"] == "ok") & (maintainers["entry"] == MAINTAINERS)])
    maint: dict[tuple, dict[str, dict]] = {}
    for r in theirs.to_dict("records") if len(theirs) else []:
        if r["n"] > 0:
            maint.setdefault(tuple(r[k] for k in _SAME), {})[r["compressor"]] = r
    out, failed, unmatched = [], [], []
    for r in mine.to_dict("records") if len(mine) else []:
        name = f"{r['task']}/{r['tier']} {short_name(r)}"
        ref = _reference(r, maint)
        if ref is None or r["n"] == 0:
            unmatched.append(f"{name} ({r['setup']})")
            continue
        d = quality_difference(
            (r["metric_mean"], r["metric_std"] ** 2, int(r["n"])),
            (ref["metric_mean"], ref["metric_std"] ** 2, int(ref["n"])),
            MEASURED_SPREAD.get((r["task"], r["tier"])),
        )
        worse = -d.delta if r["higher_is_better"] else d.delta  # > 0: worse than the reference
        past = fail_above is not None and worse > fail_above
        if past:
            failed.append(f"{name}: {d.delta:+.4g} {r['metric_name']} vs the maintainers' {short_name(ref)}")
        test = d.significance + (f", {NOT_RESOLVED}" if d.resolved is False else "")
        out.append(
            {
                "task": r["task"],
                "tier": r["tier"],
                "setup": r["setup"],
                "compressor": short_name(r),
                "vs maintainers'": short_name(ref),
                "metric": r["metric_name"],
                "yours": _quality(r),
                "theirs": _quality(ref),
                "Δ": f"{d.delta:+.4g}",
                "p": _fmt(d.p_value, ".2g"),
                "test": test,
                "MDD": _fmt(d.mdd, ".3g"),
                "ratio yours / theirs": f"{_fmt(r.get('ratio_total'), '.3g')} / {_fmt(ref.get('ratio_total'), '.3g')}",
                f"time-to-target @ {network}": f"{_time(r, network)} / {_time(ref, network)}",
                "verdict": "FAIL" if past else "ok",
            }
        )
    return CompareResult(pd.DataFrame(out), failed, unmatched, network, fail_above)


def write_compare(result: CompareResult, out: TextIO) -> None:
    """The table, then one line per row past the threshold and per row with nothing to compare."""
    if len(result.table):
        threshold = (
            "" if result.fail_above is None else f"; a row worse than theirs by more than {result.fail_above:g} fails"
        )
        out.write(
            "your rows against the maintainers' (records/mpcbench-baselines) of the same task, tier and setup: "
            "their run of your compressor, else their none. Δ = yours - theirs (Welch's t-test over seeds; "
            f"MDD: the minimal detectable difference); ratio and modeled time yours / theirs{threshold}\n"
        )
        out.write(result.table.map(lambda v: plain(v, 80)).to_string(index=False) + "\n")  # record text: inert
    for line in result.unmatched:
        out.write(f"not compared (no maintainers' row of this task, tier and setup): {plain(line)}\n")
    for line in result.failed:
        out.write(f"FAIL: {plain(line)}\n")
