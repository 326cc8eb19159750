"""The mpcbench leaderboard: ``streamlit run leaderboard/app.py [-- --results PATH ... --records DIR ...]``.

Sources (first that applies): the command-line flags; the environment variables
``MPCBENCH_RESULTS`` / ``MPCBENCH_RECORDS`` (os.pathsep-separated lists; used by the tests);
else ``results/store.jsonl`` if it exists and the committed ``records/`` folder of the repo.

This file only renders: loading is :mod:`leaderboard.submissions`, every number and ranking
is :mod:`leaderboard.ranking`. Text that comes from records or submissions is untrusted, so it
only ever reaches the page through ``st.dataframe`` / ``st.text`` / ``st.json`` / selectbox
options / chart data, never through markdown or HTML.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import altair as alt
import pandas as pd
import streamlit as st

from leaderboard import ranking
from leaderboard.submissions import Problem, load_all

REPO = Path(__file__).resolve().parents[1]
TIER_ORDER = ("smoke", "quick", "gpu", "full")
DIRECTION_LABELS = {
    "total": "all directions",
    "forward": "forward (activations)",
    "backward": "backward (activation gradients)",
    "dp": "data-parallel (weight gradients)",
}


def _sources(argv: list[str]) -> tuple[list[str], list[str]]:
    """Results stores and records folders to show (see the module docstring)."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--results", action="append", default=[])
    parser.add_argument("--records", action="append", default=[])
    args, _ = parser.parse_known_args(argv)
    if args.results or args.records:
        return args.results, args.records
    env_results = [p for p in os.environ.get("MPCBENCH_RESULTS", "").split(os.pathsep) if p]
    env_records = [p for p in os.environ.get("MPCBENCH_RECORDS", "").split(os.pathsep) if p]
    if env_results or env_records:
        return env_results, env_records
    store = REPO / "results" / "store.jsonl"
    return ([str(store)] if store.exists() else []), [str(REPO / "records")]


def _signature(stores: list[str], records_dirs: list[str]) -> tuple:
    """(path, mtime, size) of every input file, so the cache reloads when a file changes."""
    sig = []
    paths = [Path(p) for p in stores]
    for d in map(Path, records_dirs):
        if d.is_dir():
            paths += [f for sub in sorted(d.iterdir()) if sub.is_dir() for f in sorted(sub.iterdir())]
    for p in paths:
        try:
            st_ = p.stat()
            sig.append((str(p), st_.st_mtime_ns, st_.st_size))
        except OSError:
            sig.append((str(p), None, None))
    return tuple(sig)


@st.cache_data(show_spinner="Loading results ...")
def _load(stores: tuple[str, ...], records_dirs: tuple[str, ...], sig: tuple):
    records, problems = load_all(stores, records_dirs)
    frame = ranking.to_frame(records)
    return frame, ranking.aggregate(frame), problems


def _skipped(problems: list[Problem]) -> None:
    """Every skipped file or record, as plain text in a table (paths and reasons are untrusted)."""
    label = f"Skipped files and records ({len(problems)})"
    if problems:
        st.warning(f"{len(problems)} file(s) or record(s) were skipped; see 'Skipped files and records' below.")
    with st.expander(label, expanded=False):
        if problems:
            st.dataframe(
                pd.DataFrame([{"path": p.path, "reason": p.reason} for p in problems]),
                hide_index=True,
                width="stretch",
            )
        else:
            st.text("Nothing was skipped.")


def _row_labels(table: pd.DataFrame) -> dict[str, tuple[str, str, str]]:
    """``entry / compressor`` (``/ setup`` too when the rows span several setups) -> the row's key."""
    several = table["setup"].nunique() > 1
    keys = zip(table["entry"], table["compressor"], table["setup"])
    return {f"{e} / {c}" + (f" / {s}" if several else ""): (e, c, s) for e, c, s in keys}


def _pareto_chart(table: pd.DataFrame, direction: str, metric: str, higher_is_better: bool) -> alt.Chart | None:
    col = f"bytes_per_step_{direction}"
    pts = table[(table["n"] > 0) & (table[col] > 0)].copy()
    if pts.empty:
        return None
    several_setups = pts["setup"].nunique() > 1  # then one point per (compressor, setup), shaped by setup
    pts["bytes_per_step"] = pts[col]
    pts["quality"] = pts["metric_mean"]
    pts["label"] = list(_row_labels(pts))
    pts["frontier"] = ranking.pareto_front(pts, "bytes_per_step", "quality", maximize_y=higher_is_better)
    pts["point"] = pts["frontier"].map({True: "on the frontier", False: "dominated"})
    x = alt.X("bytes_per_step:Q", scale=alt.Scale(type="log"), title=f"wire bytes per step ({direction}, log)")
    y = alt.Y("quality:Q", scale=alt.Scale(zero=False, reverse=not higher_is_better), title=f"{metric} (mean over seeds)")
    tooltip = ["entry:N", "compressor:N", "setup:N", "quality:Q", "bytes_per_step:Q", "n:Q"]
    color = alt.Color("point:N", scale=alt.Scale(domain=["on the frontier", "dominated"], range=["#d62728", "#9e9e9e"]), title=None)
    extra = {"shape": alt.Shape("setup:N", title="setup")} if several_setups else {}
    points = alt.Chart(pts).mark_point(size=120, opacity=0.9, filled=True).encode(x=x, y=y, color=color, tooltip=tooltip, **extra)
    front = pts[pts["frontier"]].sort_values("bytes_per_step")
    line = alt.Chart(front).mark_line(color="#d62728", strokeDash=[4, 3]).encode(x=x, y=y)
    labels = alt.Chart(pts).mark_text(align="left", dx=8, dy=-6, fontSize=11).encode(x=x, y=y, text="compressor:N")
    return (line + points + labels).properties(height=380)


def _curves_chart(curves: pd.DataFrame, metric: str) -> alt.Chart:
    return (
        alt.Chart(curves)
        .mark_line(point=True)
        .encode(
            x=alt.X("step:Q", title="training step"),
            y=alt.Y("metric:Q", scale=alt.Scale(zero=False), title=metric),
            color=alt.Color("label:N", title="entry / compressor" + (" / setup" if curves["setup"].nunique() > 1 else "")),
            detail="seed:N",
            tooltip=["label:N", "seed:Q", "step:Q", "metric:Q", "train_loss:Q", "wall_s:Q"],
        )
        .properties(height=320)
    )


def main(argv: list[str] | None = None) -> None:
    st.set_page_config(page_title="mpcbench leaderboard", layout="wide")
    st.title("mpcbench leaderboard")
    st.caption(
        "Compressing activations and gradients in pipeline- and data-parallel training: "
        "quality against bytes on the wire and against time over a network."
    )
    stores, records_dirs = _sources(sys.argv[1:] if argv is None else argv)
    sig = _signature(stores, records_dirs)
    frame, agg, problems = _load(tuple(stores), tuple(records_dirs), sig)

    if agg.empty or not (agg["n"] > 0).any():
        st.info(
            "No results to show yet. Run the benchmark (`mpcbench run` or `pytest suite`) to fill "
            "results/store.jsonl, or add a submission under records/ (see docs/leaderboard.md)."
        )
        st.text("Sources read:\n" + "\n".join(f"  {p}" for p in [*stores, *records_dirs]) if stores or records_dirs else "No sources given.")
        _skipped(problems)
        return

    # ------------------------------------------------------------------ filters
    sb = st.sidebar
    sb.header("Filters")
    tasks = sorted(agg["task"].unique())
    task = sb.selectbox("Task", tasks, key="task")
    tiers_here = set(agg.loc[agg["task"] == task, "tier"])
    tiers = [t for t in TIER_ORDER if t in tiers_here] + sorted(tiers_here - set(TIER_ORDER))
    tier = sb.selectbox("Tier", tiers, index=tiers.index("quick") if "quick" in tiers else 0, key="tier")
    rule = sb.selectbox("Ranking rule", list(ranking.RULES), format_func=lambda r: ranking.RULES[r].title, key="rule")
    profiles = ranking.network_profiles(frame)
    network = None
    if profiles:
        default = profiles.index("1Gbps") if "1Gbps" in profiles else 0
        network = sb.selectbox("Network profile", profiles, index=default, key="network")
    direction = sb.selectbox("Direction", list(DIRECTION_LABELS), format_func=DIRECTION_LABELS.get, key="direction")
    min_ratio = None
    if rule == "quality_at_ratio":
        min_ratio = sb.number_input(
            "Minimum compression ratio (0: any)", min_value=0.0, value=0.0, step=0.5, key="min_ratio"
        )
    sb.divider()
    sb.text("Sources:\n" + "\n".join(f"  {p}" for p in [*stores, *records_dirs]))

    # ------------------------------------------------------------------ ranking
    sel = agg[(agg["task"] == task) & (agg["tier"] == tier)]
    if rule == "time_to_target" and network is None:
        st.error("No record has modeled times, so the time-to-target rule cannot rank; pick another rule.")
        return
    ranked = ranking.rank(sel, rule, min_ratio=min_ratio, network=network, direction=direction)
    metric = next((m for m in ranked["metric_name"] if m), "quality")
    higher = bool(ranked["higher_is_better"].iloc[0])
    st.subheader("Ranking")
    warned = int((ranked["n_warnings"] > 0).sum()) if "n_warnings" in ranked else 0
    if warned:  # our own text and a count only: the warning texts are record text (see Entry details)
        st.warning(
            f"{warned} entr{'y has' if warned == 1 else 'ies have'} warnings in their records (column 'warnings'); "
            "pick the entry under 'Entry details' to read them."
        )
    st.text(
        f"task: {task}    tier: {tier}    metric: {metric} ({'higher' if higher else 'lower'} is better)    "
        f"network: {network or '-'}    direction: {DIRECTION_LABELS[direction]}"
    )
    explanation = ranking.RULES[rule]
    st.markdown(f"**{explanation.title}.** {explanation.explanation}")  # our own static text only
    # st.dataframe, not st.table: st.table renders markdown in cells, and record text must stay inert
    st.dataframe(
        ranking.display_table(ranked, network=network, direction=direction),
        hide_index=True,
        width="stretch",
        key="ranking_table",
        column_config={c: st.column_config.TextColumn(width="medium") for c in ("entry", "compressor", "setup")},
    )

    # ------------------------------------------------------------------ Pareto plot
    st.subheader("Quality versus bytes")
    chart = _pareto_chart(ranked, direction, metric, higher)
    if chart is None:
        st.info(f"No entry sent bytes in the {DIRECTION_LABELS[direction]} direction; pick another direction.")
    else:
        st.altair_chart(chart, width="stretch")

    # ------------------------------------------------------------------ curves
    st.subheader("Training curves")
    labels = _row_labels(ranked)  # rows that differ only by setup get the setup in their label
    chosen = st.multiselect("Entries", list(labels), default=list(labels)[:4], key="curves")
    curves = ranking.curve_frame(frame[(frame["task"] == task) & (frame["tier"] == tier)], [labels[c] for c in chosen])
    if curves.empty:
        st.text("No curve points for the selected entries.")
    else:
        st.altair_chart(_curves_chart(curves, metric), width="stretch")

    # ------------------------------------------------------------------ detail
    st.subheader("Entry details")
    pick = st.selectbox("Entry", list(labels), key="detail")
    if pick:
        e, c, s = labels[pick]
        detail = ranking.entry_detail(frame, task, tier, e, c, s)
        # warnings (e.g. payloads larger than the raw tensors) are record text: a data table, never markdown
        warnings = detail.get("warnings") or []
        if warnings:
            st.text(f"Warnings in this entry's records ({len(warnings)}):")
            st.dataframe(
                pd.DataFrame(warnings, columns=["seed", "warning"]),
                hide_index=True,
                width="stretch",
                key="detail_warnings",
                column_config={"warning": st.column_config.TextColumn(width="large")},
            )
        else:
            st.text("No warnings in this entry's records.")
        st.json(detail, expanded=1)

    with st.expander("All aggregated columns"):
        st.dataframe(ranked.drop(columns=["seeds"], errors="ignore"), hide_index=True, width="stretch")
    _skipped(problems)


main()
