"""What link each entry needs: the bandwidth for 50, 90 and 99 % compute utilization, per task.

One row per (task, tier, compressor, setup) from the records' stored network-model inputs
(:func:`suite.results.network.utilization.bandwidths_for_utilization`: the modeled time on an ideal
network over the modeled time at a bandwidth, bisected; pipeline and data-parallel traffic on the
link between hosts, tensor-parallel traffic on the link inside a host, latency left out), next to
what the entry measured: quality (perplexity for language models), wire bytes per step, the
compressor's compute time per step. Seeds are summarized by their median bandwidth and mean
quality; ``seeds`` says how many there are. ``mpcbench report --bandwidth`` prints it and
``leaderboard/views_bandwidth.py`` shows it on the page. Plain pandas.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, TextIO

import pandas as pd

from leaderboard.safe_text import markdown_cell, plain, table_text
from suite.results.network.utilization import UTILIZATION_TARGETS, bandwidths_for_utilization

__all__ = ["PERCENTS", "record_bandwidths", "bandwidth_table", "format_bps", "write_bandwidth", "EXPLANATION"]

PERCENTS = tuple(f"{round(t * 100):d}" for t in UTILIZATION_TARGETS)
LM_METRICS = ("val_loss",)  # metrics in nats per token/character: perplexity = exp(metric)

EXPLANATION = (
    "Bandwidth at which modeled compute utilization (compute / (compute + exposed communication)) reaches "
    "50/90/99 %: pipeline and data-parallel traffic on the link between hosts ('link'), tensor-parallel traffic "
    "on the link inside a host ('intra-host'), the other link ideal, no latency; from each record's measured "
    "compute and wire bytes through the network model (median over seeds). An outer loop's all-reduce every h "
    "steps counts once per h steps. 'none needed': nothing crosses that link; 'unreachable': compute alone "
    "cannot reach it. Compute is this machine's CPU: a faster accelerator needs proportionally more bandwidth."
)


def record_bandwidths(timing: Any) -> dict[str, float]:
    """``{"link_50": bps, ..., "intra_99": bps}`` for one record's ``timing_inputs`` (dict or JSON
    text); inf where a target is unreachable, no keys for a record without inputs (NaN in a table)."""
    if isinstance(timing, str):
        import json

        timing = json.loads(timing) if timing else None
    if not isinstance(timing, Mapping) or not timing:
        return {}
    out: dict[str, float] = {}
    for kind, per in bandwidths_for_utilization(timing).items():
        name = "link" if kind == "inter" else "intra"
        for pct, bps in per.items():
            out[f"{name}_{pct}"] = math.inf if bps is None else float(bps)
    return out


def bandwidth_table(rows: pd.DataFrame) -> pd.DataFrame:
    """The table (see the module docstring) from leaderboard rows that carry ``timing_inputs``
    (:func:`leaderboard.index.load_details`); ok and latest records only."""
    ok = rows[(rows["status"] == "ok") & rows.get("latest", True)] if len(rows) else rows
    if ok.empty or "timing_inputs" not in ok:
        return pd.DataFrame()
    per = pd.DataFrame([record_bandwidths(t) for t in ok["timing_inputs"]], index=ok.index)
    data = pd.concat([ok, per], axis=1)
    keys = ["task", "tier", "compressor", "setup"]
    out = []
    for key, g in data.groupby(keys, sort=True, dropna=False):
        row: dict[str, Any] = dict(zip(keys, key))
        row["seeds"] = len(g)
        metric = str(g["metric_name"].iloc[0] or "")
        row["metric"] = metric
        row["quality"] = float(g["final_metric"].mean())
        row["perplexity"] = (
            math.exp(row["quality"]) if metric in LM_METRICS and math.isfinite(row["quality"]) else math.nan
        )
        row["bytes_per_step"] = float(g["bytes_per_step_total"].mean()) if "bytes_per_step_total" in g else math.nan
        row["ratio"] = float(g["ratio_total"].mean()) if "ratio_total" in g else math.nan
        row["compress_ms_per_step"] = float(g["compress_s"].mean()) * 1e3 if "compress_s" in g else math.nan
        for name in ("link", "intra"):
            for pct in PERCENTS:
                c = f"{name}_{pct}"
                row[c] = float(g[c].median()) if c in g and g[c].notna().any() else math.nan
        out.append(row)
    table = pd.DataFrame(out)
    if "intra_50" in table and table["intra_50"].isna().all():
        table = table.drop(columns=[c for c in table if c.startswith("intra_")])
    return table


def format_bps(v: Any) -> str:
    """``12.3 Mbit/s``; ``none needed`` for 0; ``unreachable`` for inf; ``-`` for no value (NaN)."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    v = float(v)
    if math.isinf(v):
        return "unreachable"
    if v == 0:
        return "none needed"
    for unit, scale in (("Tbit/s", 1e12), ("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if v >= scale:
            return f"{v / scale:.3g} {unit}"
    return f"{v:.3g} bit/s"


def display(table: pd.DataFrame) -> pd.DataFrame:
    """The table with readable cells (bandwidths with units, bytes in KB, rounded figures)."""
    if table.empty:
        return table
    t = pd.DataFrame(
        {
            "task": table["task"],
            "tier": table["tier"],
            "compressor": table["compressor"],
            "setup": table["setup"],
            "seeds": table["seeds"],
            "quality": table["quality"].map(lambda v: f"{v:.3f}"),
            "ppl": table["perplexity"].map(lambda v: "" if math.isnan(v) else f"{v:.3f}"),
            "KB/step": table["bytes_per_step"].map(lambda v: "" if math.isnan(v) else f"{v / 1e3:.1f}"),
            "ratio": table["ratio"].map(lambda v: "" if math.isnan(v) else f"{v:.0f}x"),
            "code ms/step": table["compress_ms_per_step"].map(lambda v: "" if math.isnan(v) else f"{v:.2f}"),
        }
    )
    for name, label in (("link", "link"), ("intra", "intra-host")):
        for pct in PERCENTS:
            c = f"{name}_{pct}"
            if c in table:
                t[f"{label} {pct}%"] = table[c].map(format_bps)
    return t


def write_bandwidth(rows: pd.DataFrame, fmt: str, out: TextIO) -> None:
    """``mpcbench report --bandwidth``: the table per task and tier, as text, markdown or CSV."""
    table = bandwidth_table(rows)
    if fmt == "csv":
        table.to_csv(out, index=False)
        return
    out.write(EXPLANATION + "\n")
    if table.empty:
        out.write("no ok records with network-model inputs\n")
        return
    shown = display(table)
    for (task, tier), g in shown.groupby(["task", "tier"], sort=True):
        inert = markdown_cell if fmt == "markdown" else plain
        out.write("\n" + inert(f"== {task} / {tier} ==") + "\n")
        out.write(table_text(g.drop(columns=["task", "tier"]), fmt) + "\n")
