"""The board's rows on another accelerator and model size: projected time, per (task, tier, setup).

The measured view answers "what did this machine measure"; this one answers "what would these
bytes and codec costs mean on an H100 training GPT-2 124M". Each row's timing inputs are priced
by the time model with a :class:`suite.results.projection.Projection`
(:func:`leaderboard.index.load_details` with ``projection``): compute from the counted FLOPs at
the profile's peak x MFU, the codec from the row's measured multiple of a copy on the profile's
copy, the wire bytes scaled to the size. Quality, compression ratio and steps-to-target stay the
measured run's: the table says so in its header, and every row that cannot be projected (no FLOP
count for its setup, a run from before codec multiples) is listed with its reason, never
silently dropped. ``mpcbench report --hardware NAME [--model-size NAME] [--mfu X]`` prints it;
the page's hardware selector shows the same table (:mod:`leaderboard.views_projected`).
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Any, TextIO

import pandas as pd

from leaderboard.bandwidth import PERCENTS, format_bps, record_bandwidths
from leaderboard.crossover import crossover_text, crossovers, time_to_target_by_bandwidth
from leaderboard.names import display_name
from leaderboard.networks import Link, remodel
from leaderboard.safe_text import markdown_cell, plain, table_text
from leaderboard.statistics import tier_seeds
from suite.results.projection import Projection

__all__ = ["projected_table", "display", "write_projection", "KEYS"]

KEYS = ["task", "tier", "setup", "entry", "compressor"]


def _n_steps(timing: str) -> int:
    try:
        d = json.loads(timing)
        counts = d.get("counts") or [1] * len(d.get("steps") or [])
        return int(sum(counts))
    except (ValueError, TypeError, AttributeError):
        return 0


def projection_link(link: Link, projection: Projection | None) -> Link:
    """``link`` with the projected hardware's own tensor-parallel link (NVLink 4 on an H100, PCIe on a
    consumer card); unchanged for a profile without one (this machine: the network model's)."""
    tp_link = projection.profile().tp_link if projection is not None else None
    return link if tp_link is None else replace(link, intra=tp_link)


def projected_curves(rows: pd.DataFrame, link: Link, projection: Projection | None) -> pd.DataFrame:
    """Time to target against bandwidth (:func:`leaderboard.crossover.time_to_target_by_bandwidth`) of
    ``rows`` at ``link``'s latency, tensor-parallel traffic over the projected hardware's link."""
    timed = rows[rows["timing_inputs"].astype(bool)] if len(rows) else rows
    if timed.empty:
        return pd.DataFrame()
    return time_to_target_by_bandwidth(timed, link.latency_s, intra=projection_link(link, projection).intra)


def projected_table(rows: pd.DataFrame, link: Link, projection: Projection | None = None) -> pd.DataFrame:
    """One row per (task, tier, setup, entry, compressor) of ``rows`` (projected rows from
    :func:`leaderboard.index.load_details` with a projection; ok and latest records only):
    ``seeds``, measured ``quality`` (mean), projected ``step_s`` (median over seeds),
    ``time_to_target_s`` at ``link`` (mean over the seeds that reached the target) with
    ``reached``, the link bandwidth for 50/90/99 % compute utilization (``link_50`` ..; median),
    and ``note`` (why a row has no projection). With ``projection``, tensor-parallel traffic crosses
    its hardware's ``tp_link`` (:func:`projection_link`)."""
    link = projection_link(link, projection)
    ok = rows[(rows["status"] == "ok") & rows["latest"]] if len(rows) else rows
    if ok.empty:
        return pd.DataFrame(
            columns=[*KEYS, "name", "seeds", "quality", "step_s", "time_to_target_s", "reached", "note"]
        )
    timed = remodel(ok, link)
    col = f"time_to_target_s@{link.name}"
    timed["step_s"] = [
        (t / n) if (n := _n_steps(s)) and t == t else math.nan
        for t, s in zip(timed[f"total_s@{link.name}"], timed["timing_inputs"])
    ]
    bws = pd.DataFrame([record_bandwidths(t) if t else {} for t in timed["timing_inputs"]], index=timed.index)
    data = pd.concat([timed, bws], axis=1)
    out = []
    for key, g in data.groupby(KEYS, sort=True, dropna=False):
        row: dict[str, Any] = dict(zip(KEYS, key))
        row["name"] = display_name(str(key[4]))
        row["seeds"] = len(g)
        row["quality"] = float(g["final_metric"].mean())
        row["step_s"] = float(g["step_s"].median()) if g["step_s"].notna().any() else math.nan
        reached = g[col].dropna()
        row["time_to_target_s"] = float(reached.mean()) if len(reached) else math.nan
        row["reached"] = f"{len(reached)}/{len(g)}"
        for pct in PERCENTS:
            c = f"link_{pct}"
            row[c] = float(g[c].median()) if c in g and g[c].notna().any() else math.nan
        notes = sorted({n for n in g.get("projection_note", pd.Series("", index=g.index)) if n})
        row["note"] = "; ".join(notes)
        out.append(row)
    # a ranking, as the board's rules rank: per setup, rows at the tier's designed seeds first, then
    # those with fewer; within each, rows whose every seed reached the target by projected time, then
    # those where some did, then the rest
    table = pd.DataFrame(out)
    table["_short"] = [n < tier_seeds(str(t)) for n, t in zip(table["seeds"], table["tier"])]
    table["_never"] = table["time_to_target_s"].isna()
    table["_partial"] = [int(r.split("/")[0]) < n for r, n in zip(table["reached"], table["seeds"])]
    order = ["task", "tier", "setup", "_short", "_never", "_partial", "time_to_target_s", "step_s", "name"]
    return table.sort_values(order).drop(columns=["_short", "_never", "_partial"]).reset_index(drop=True)


def _seconds(v: float) -> str:
    if not isinstance(v, float) or math.isnan(v):
        return "-"
    if v < 1e-3:
        return f"{v * 1e6:.3g} us"
    if v < 1:
        return f"{v * 1e3:.3g} ms"
    return f"{v:.3g} s"


def display(table: pd.DataFrame, network: str) -> pd.DataFrame:
    """Readable cells: seconds with units, bandwidths with units, the note last."""
    if table.empty:
        return table
    t = pd.DataFrame(
        {
            "compressor": table["name"],
            "seeds": table["seeds"],
            "quality (measured)": table["quality"].map(lambda v: f"{v:.4g}"),
            "step (projected)": table["step_s"].map(_seconds),
            f"to target @ {network}": [
                f"{_seconds(v)} ({r})" if v == v else f"never ({r})"
                for v, r in zip(table["time_to_target_s"], table["reached"])
            ],
        }
    )
    for pct in PERCENTS:
        t[f"link {pct}%"] = table[f"link_{pct}"].map(format_bps)
    t["not projected because"] = table["note"]
    if not t["not projected because"].astype(bool).any():
        t = t.drop(columns="not projected because")
    return t


def write_projection(rows: pd.DataFrame, projection: Projection, link: Link, fmt: str, out: TextIO) -> None:
    """``mpcbench report --hardware``: the projection's assumptions, then per (task, tier, setup)
    the projected table and where each compressor starts to pay off against ``none``."""
    table = projected_table(rows, link, projection)
    if fmt == "csv":
        table.to_csv(out, index=False)
        return
    inert = markdown_cell if fmt == "markdown" else plain
    out.write(inert(f"PROJECTED, not measured: {projection.describe()}.") + "\n")
    out.write(
        "Rows with 'not projected because' have no FLOP count for their setup or no codec multiples; "
        "everything else on this page was measured on the calibrated CPU.\n"
    )
    if table.empty:
        out.write("no ok records to project\n")
        return
    for (task, tier, setup), g in table.groupby(["task", "tier", "setup"], sort=True):
        out.write("\n" + inert(f"== {task} / {tier} / {setup} (projected onto {projection.hardware}"
                               f"{' at ' + projection.model_size if projection.model_size else ''}) ==") + "\n")  # fmt: skip
        if g["note"].astype(bool).all():  # nothing in this setup can be projected: one line, not a table
            out.write(inert(f"not projected: {'; '.join(sorted(set(g['note'])))}") + "\n")
            continue
        out.write(table_text(display(g.reset_index(drop=True), link.name), fmt) + "\n")
        view = rows[(rows["task"] == task) & (rows["tier"] == tier) & (rows["setup"] == setup)]
        curves = projected_curves(view, link, projection)
        for line in crossover_text(crossovers(curves), link.latency_s) if len(curves) else []:
            out.write(inert(line) + "\n")
