"""The mpcbench leaderboard: ``streamlit run leaderboard/app.py [-- --results PATH ... --records DIR ...]``.

Sources (first that applies): the command-line flags; the environment variables
``MPCBENCH_RESULTS`` / ``MPCBENCH_RECORDS`` (os.pathsep-separated lists; used by the tests);
else ``results/store.jsonl`` if it exists and the committed ``records/`` folder of the repo.
Local results (stores) are shown next to the committed records ("Include local results",
ticked by default; ``?local=0`` in the URL unticks it).

The page reads the compact index (:mod:`leaderboard.index`; rebuilt for the sources whose
files changed) and loads curves and details only for the rows it shows. Every filter lives
in the URL (``?task=sst2&rule=time_to_target&network=custom&bw=3e8&lat=0.002``), so a view
can be linked.

This file only renders: every number comes from :mod:`leaderboard.ranking` and its modules.
Text that comes from records or submissions is untrusted, so it only ever reaches the page
through ``st.dataframe`` / ``st.text`` / ``st.json`` / selectbox options / chart data, never
through markdown or HTML.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import altair as alt
import numpy as np
import pandas as pd
import streamlit as st

from leaderboard import crossover, ranking, views
from leaderboard.frame import DETAIL_COLUMNS, view_target
from leaderboard.index import HEAVY_COLUMNS, load_details, load_index
from leaderboard.labels import Scale, place_labels
from leaderboard.networks import Link, format_bandwidth, remodel
from leaderboard.page_notes import baseline_notice, entry_notice, entry_tier, notice_text
from leaderboard.views_bandwidth import bandwidth_section
from leaderboard.views_projected import projected_section, projection_controls
from suite.results import DEFAULT_STORE
from suite.results.network import PROFILES
from suite.results.task_catalog import describe as describe_task

REPO = Path(__file__).resolve().parents[1]
TIER_ORDER = ("smoke", "quick", "plateau", "gpu", "full")
DIRECTION_LABELS = {
    "total": "all directions",
    "forward": "forward (activations)",
    "backward": "backward (activation gradients)",
    "dp": "data-parallel (weight gradients)",
    "tp_forward": "tensor-parallel (activation all-reduces)",
    "tp_backward": "tensor-parallel (gradient all-reduces)",
}
QUALITY_LABELS = {"compressed": "with compression at evaluation", "uncompressed": "without compression at evaluation"}
QUALITIES_SHORT = {"compressed": "evaluated compressed", "uncompressed": "evaluated uncompressed"}
OWN_ROW_STYLE = "background-color: #fff3b0"  # the rows of the entry the link names
DETAILS = (*DETAIL_COLUMNS, *HEAVY_COLUMNS)  # what load_details adds to a row: curve, config, provenance, timing
CUSTOM = "custom (sliders)"
# bandwidth slider: 4 steps per decade from 1 Mbps to 1 Tbps, plus every named profile's bandwidth
BANDWIDTHS = sorted(
    {float(f"{10 ** (6 + k / 4):.3g}") for k in range(25)} | {p.bandwidth_bps for p in PROFILES.values()}
)
LATENCIES = sorted(
    {0.0, 1e-6, 2e-6, 5e-6, 1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2, 2e-2, 5e-2, 0.1, 0.2}
    | {p.latency_s for p in PROFILES.values()}
)
MAX_LABELS = 30  # named points on the Pareto plot: the frontier first, then the best quality
PLOT_W, PLOT_H = 860, 400  # fixed chart size: label placement works in these pixels
# URL parameter -> (session key, parser)
URL_KEYS = (
    "task",
    "tier",
    "setup",
    "rule",
    "quality",
    "network",
    "bw",
    "lat",
    "direction",
    "min_ratio",
    "local",
    "entry",
)


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
    store = REPO / DEFAULT_STORE
    return ([str(store)] if store.exists() else []), [str(REPO / "records")]


def _local_mask(sources: pd.Series, stores: list[str]) -> pd.Series:
    """Rows read from a results store: by resolved path (the index keeps the spelling of its first build)."""
    wanted = {str(Path(s).resolve()) for s in stores}
    local = {s: str(Path(s).resolve()) in wanted for s in sources.unique()}  # resolved once per source, not per row
    return sources.map(local)


def _index(stores: tuple[str, ...], records_dirs: tuple[str, ...]):
    """The index, brought up to date on every run (a stat of each source file; cheap)."""
    return load_index(stores, records_dirs)


@st.cache_data(show_spinner="Re-modeling the records at this link ...", max_entries=64)
def _ranked_input(_frame: pd.DataFrame, version: tuple, task: str, tier: str, link: Link | None, _index_obj) -> tuple:
    """(per-record rows, aggregate) of one task and tier, re-modeled at ``link`` (None: stored profiles)."""
    rows = _frame[(_frame["task"] == task) & (_frame["tier"] == tier)]
    if link is not None:
        rows = remodel(_index_obj.heavy(rows), link).drop(columns=["timing_inputs"])
    return rows, ranking.aggregate(rows)


@st.cache_resource(show_spinner=False, max_entries=4)
def _detail_store(version: tuple) -> dict[tuple[str, str], tuple]:
    """(source, record_id) -> the record's details, filled as rows are asked for (one per index version)."""
    return {}


def _details(rows: pd.DataFrame, version: tuple) -> pd.DataFrame:
    """``rows`` with their records' details (``index.load_details``: curve, config, provenance, timing
    inputs), each record read once per index version: ``load_details`` reads and validates the record's
    JSON line again, and the plots, the card and the link table each asked for it on every rerun.
    Shared between reruns and sessions: callers read the lists and dicts, never change them."""
    store = _detail_store(version)
    keys = list(zip(rows["source"], rows["record_id"]))
    missing = [i for i, k in enumerate(keys) if k not in store]
    if missing:
        got = load_details(rows.iloc[missing][["source", "record_id"]])
        for k, *values in zip(zip(got["source"], got["record_id"]), *(got[c] for c in DETAILS)):
            store[k] = tuple(values)
    out = rows.copy()
    for j, c in enumerate(DETAILS):
        if c not in rows:  # timing inputs a re-modeled row carries already stay its own
            out[c] = [store[k][j] for k in keys]
    return out


def _skipped(problems) -> None:
    """Every skipped file or record, as plain text in a table (paths and reasons are untrusted)."""
    label = f"Skipped files and records ({len(problems)})"
    if problems:
        st.warning(f"{len(problems)} file(s) or record(s) were skipped; see 'Skipped files and records' below.")
    with st.expander(label, expanded=False):
        if problems:
            st.dataframe(
                pd.DataFrame([{"path": p.path, "reason": p.reason} for p in problems]), hide_index=True, width="stretch"
            )
        else:
            st.text("Nothing was skipped.")


def _row_labels(table: pd.DataFrame) -> dict[str, tuple[str, str, str, str]]:
    """``entry / compressor`` (``/ setup``, ``/ machine`` where rows differ only by those) -> the row's
    key (entry, compressor, setup, machine class: :mod:`suite.results.entries`, the verifier's row)."""
    several = table["setup"].nunique() > 1
    machines = "machine" in table and table["machine"].nunique() > 1
    entries = table["entry"].nunique() > 1
    out = {}
    for r in table.itertuples(index=False):
        label = views.row_label(
            r.entry,
            views.short_name(r._asdict()),
            r.setup,
            getattr(r, "machine", ""),
            with_setup=several,
            with_machine=machines,
            with_entry=entries,
        )
        out[label] = (r.entry, r.compressor, r.setup, getattr(r, "machine", ""))
    return out


def _init_from_url() -> None:
    """Widget defaults from the URL, once per session (later runs: the widgets own the state)."""
    if st.session_state.get("_url_read"):
        return
    st.session_state["_url_read"] = True
    for k in URL_KEYS:
        if k in st.query_params:
            v = st.query_params[k]
            try:
                if k in ("bw", "lat", "min_ratio"):
                    v = float(v)
                elif k == "local":
                    v = v in ("1", "true", "yes")
                elif k == "network" and v == "custom":
                    v = CUSTOM
            except ValueError:
                continue
            st.session_state[f"_url_{k}"] = v


def _url_default(key: str, options: list, fallback):
    v = st.session_state.get(f"_url_{key}")
    return v if v in options else fallback


def _write_url(values: dict) -> None:
    """The current filters into the URL (only what differs from what is there)."""
    for k, v in values.items():
        v = "custom" if v == CUSTOM else v
        text = "" if v is None else ("1" if v is True else ("0" if v is False else f"{v}"))
        if text and st.query_params.get(k) != text:
            st.query_params[k] = text


def _nearest(values: list[float], v: float) -> float:
    return min(values, key=lambda x: abs(math.log10(x + 1e-12) - math.log10(v + 1e-12)))


def _preset_changed() -> None:
    """Picking a named profile moves the sliders to its bandwidth and latency."""
    prof = PROFILES.get(st.session_state.get("network"))
    if prof:
        st.session_state["bw"] = _nearest(BANDWIDTHS, prof.bandwidth_bps)
        st.session_state["lat"] = _nearest(LATENCIES, prof.latency_s)


def _network_controls(sb, profiles: list[str]) -> tuple[str | None, Link | None, str]:
    """(column suffix for modeled times, link to re-model at or None, words for the page)."""
    if not profiles:
        return None, None, "-"
    options = [*profiles, CUSTOM]
    default = _url_default("network", options, "1Gbps" if "1Gbps" in profiles else profiles[0])
    preset = sb.selectbox(
        "Network",
        options,
        index=options.index(default),
        key="network",
        on_change=_preset_changed,
        help="A named profile uses the times modeled when the record was written (re-modeled "
        "from its stored inputs if an older network model wrote them); "
        "'custom' re-models every record at the sliders' link.",
    )
    prof = PROFILES.get(preset)
    if "bw" not in st.session_state:
        st.session_state["bw"] = _nearest(
            BANDWIDTHS, st.session_state.get("_url_bw") or (prof.bandwidth_bps if prof else 1e9)
        )
    if "lat" not in st.session_state:
        st.session_state["lat"] = _nearest(
            LATENCIES, st.session_state.get("_url_lat") or (prof.latency_s if prof else 5e-4)
        )
    custom = preset == CUSTOM
    bw = sb.select_slider(
        "Bandwidth (log scale)", BANDWIDTHS, key="bw", format_func=format_bandwidth, disabled=not custom
    )
    lat = sb.select_slider("Latency (one way)", LATENCIES, key="lat", format_func=format_latency, disabled=not custom)
    if not custom:
        link_words = f"{preset}" + (f", {format_latency(prof.latency_s)} latency" if prof else "")
        return preset, None, link_words
    link = Link(float(bw), float(lat))
    return link.name, link, f"custom: {format_bandwidth(bw)}, {format_latency(lat)} latency"


def format_latency(s: float) -> str:
    """``5e-4`` -> ``"500 µs"``, ``0.01`` -> ``"10 ms"``, ``0`` -> ``"0 s"`` (never ``1e+04 µs``)."""
    if s <= 0:
        return "0 s"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if s >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s * 1e9:.3g} ns"


def _link_for_plot(network: str | None, link: Link | None) -> Link:
    if link is not None:
        return link
    prof = PROFILES.get(network or "")
    if prof:
        return Link(prof.bandwidth_bps, prof.latency_s)
    bw = ranking.profile_bandwidth_bps(network or "")
    return Link(bw if bw == bw else 1e9, 0.0)


def _pareto_chart(table: pd.DataFrame, direction: str, metric: str, higher_is_better: bool) -> alt.Chart | None:
    col = f"bytes_per_step_{direction}"
    pts = table[(table["n"] > 0) & (table[col] > 0) & table["quality"].notna()].copy()
    pts = pts.drop(columns=[c for c in pts if pts[c].map(lambda v: isinstance(v, (list, dict))).any()])  # chart data
    if pts.empty:
        return None
    several_setups = pts["setup"].nunique() > 1  # then one point per (compressor, setup), shaped by setup
    pts["bytes_per_step"] = pts[col]
    pts["label"] = [views.short_name(r) for r in pts.to_dict("records")]
    pts["spec"] = [c or n for c, n in zip(pts["compressor_label"], pts["compressor"])]
    pts["frontier"] = ranking.pareto_front(pts, "bytes_per_step", "quality", maximize_y=higher_is_better)
    pts["point"] = pts["frontier"].map({True: "on the frontier", False: "dominated"})
    lo, hi = pts["bytes_per_step"].min() / 2, pts["bytes_per_step"].max() * 2
    qlo, qhi = pts["quality"].min(), pts["quality"].max()
    pad = (qhi - qlo) * 0.15 or abs(qhi) * 0.05 or 0.05
    ylo, yhi = qlo - pad, qhi + pad
    sx = Scale(lo, hi, PLOT_W, log=True)
    sy = Scale(ylo, yhi, PLOT_H, flip=higher_is_better)  # screen y grows downwards
    # labels for the frontier and the best points, at most MAX_LABELS (the rest: tooltips), placed
    # so that no two overlap (leader lines where they had to move away from their point)
    order = pts.sort_values(["frontier", "quality"], ascending=[False, not higher_is_better]).index[:MAX_LABELS]
    places = place_labels(
        list(pts.loc[order, "bytes_per_step"]), list(pts.loc[order, "quality"]), list(pts.loc[order, "label"]), sx, sy
    )
    pts["label_x"], pts["label_y"], pts["leader"] = np.nan, np.nan, False
    pts.loc[order, "label_x"] = [p.x for p in places]
    pts.loc[order, "label_y"] = [p.y for p in places]
    pts.loc[order, "leader"] = [p.leader for p in places]
    named = pts.loc[order]
    xs = alt.Scale(type="log", domain=[lo, hi])
    ys = alt.Scale(domain=[ylo, yhi], reverse=not higher_is_better, zero=False)
    x = alt.X(
        "bytes_per_step:Q",
        scale=xs,
        title=f"wire bytes per step ({direction}, log)",
        axis=alt.Axis(labelExpr="format(datum.value, '.2~s') + 'B'"),  # 3.7MB, not 3700000 or 4e+6
    )
    y = alt.Y("quality:Q", scale=ys, title=f"{metric} (mean over seeds)")
    tooltip = [
        "label:N",
        "spec:N",
        "entry:N",
        "machine:N",
        alt.Tooltip("quality:Q", format=".4g"),
        alt.Tooltip("bytes_per_step:Q", title="wire bytes per step", format=".3s"),
        "n:Q",
    ]
    color = alt.Color(
        "point:N", scale=alt.Scale(domain=["on the frontier", "dominated"], range=["#d62728", "#9e9e9e"]), title=None
    )
    extra = {"shape": alt.Shape("setup:N", title="setup")} if several_setups else {}
    points = (
        alt.Chart(pts)
        .mark_point(size=120, opacity=0.9, filled=True)
        .encode(x=x, y=y, color=color, tooltip=tooltip, **extra)
    )
    front = pts[pts["frontier"]].sort_values("bytes_per_step")
    line = alt.Chart(front).mark_line(color="#d62728", strokeDash=[4, 3]).encode(x=x, y=y)
    lead = named[named["leader"]]
    leaders = (
        alt.Chart(lead).mark_rule(color="#9e9e9e", strokeWidth=0.8).encode(x=x, y=y, x2="label_x:Q", y2="label_y:Q")
    )
    labels = (
        alt.Chart(named)
        .mark_text(align="left", baseline="middle", fontSize=11)
        .encode(x=alt.X("label_x:Q", scale=xs), y=alt.Y("label_y:Q", scale=ys), text="label:N")
    )
    return (line + leaders + points + labels).properties(width=PLOT_W, height=PLOT_H)


def _ttq_chart(
    ttq: pd.DataFrame,
    seeds: pd.DataFrame,
    marks: pd.DataFrame,
    metric: str,
    higher_is_better: bool,
    link_words: str,
    target: float | None,
) -> alt.Chart:
    """Mean curves (bold), every seed's curve (faint: the spread), the target line, and on it the
    table's time-to-target per row: mean ± sd of the seeds' interpolated crossings, the same
    numbers as the ranking table (the mean curve's own crossing can differ: a mean of curves is
    not a curve of means)."""
    label = lambda df: [  # noqa: E731
        f"{lbl} ({src})" if src != "modeled" else lbl for lbl, src in zip(df["label"], df["source"])
    ]
    ttq = ttq.assign(line=label(ttq))
    x = alt.X("time_s:Q", title=f"modeled wall-clock seconds ({link_words})")
    y = alt.Y("metric:Q", scale=alt.Scale(zero=False, reverse=not higher_is_better), title=metric)
    color = alt.Color("line:N", title="compressor", legend=alt.Legend(labelLimit=300))
    lines = (
        alt.Chart(ttq)
        .mark_line(point=True)
        .encode(
            x=x,
            y=y,
            color=color,
            strokeDash=alt.StrokeDash("source:N", title="time"),
            tooltip=["line:N", "step:Q", "time_s:Q", "metric:Q", "seeds:Q"],
        )
    )
    layers = [lines]
    if len(seeds):
        seeds = seeds.assign(line=label(seeds))
        layers.append(
            alt.Chart(seeds)
            .mark_line(opacity=0.25, strokeWidth=1)
            .encode(
                x=x, y=y, color=color, detail="seed:N", tooltip=["line:N", "seed:Q", "step:Q", "time_s:Q", "metric:Q"]
            )
        )
    if target is not None and not math.isnan(target):
        layers.append(
            alt.Chart(pd.DataFrame({"target": [target]}))
            .mark_rule(color="#555", strokeDash=[2, 2])
            .encode(y="target:Q")
        )
        if len(marks):
            marks = marks.assign(  # the line each mark belongs to: without it the legend gains an "undefined" entry
                line=label(marks),
                metric=target,
                lo=marks["time_s"] - marks["sd"].fillna(0),
                hi=marks["time_s"] + marks["sd"].fillna(0),
            )
            layers.append(
                alt.Chart(marks).mark_rule(strokeWidth=3).encode(x="lo:Q", x2="hi:Q", y="metric:Q", color=color)
            )
            layers.append(
                alt.Chart(marks)
                .mark_point(shape="diamond", size=140, filled=True)
                .encode(x="time_s:Q", y="metric:Q", color=color, tooltip=["line:N", "time_s:Q", "sd:Q", "reached:N"])
            )
    return alt.layer(*layers).properties(width=PLOT_W, height=PLOT_H)


def _curves_chart(curves: pd.DataFrame, metric: str) -> alt.Chart:
    return (
        alt.Chart(curves)
        .mark_line(point=True)
        .encode(
            x=alt.X("step:Q", title="training step"),
            y=alt.Y("metric:Q", scale=alt.Scale(zero=False), title=metric),
            color=alt.Color(
                "label:N",
                title="entry / compressor" + (" / setup" if curves["setup"].nunique() > 1 else ""),
                legend=alt.Legend(labelLimit=420),
            ),
            detail="seed:N",
            tooltip=["label:N", "seed:Q", "step:Q", "metric:Q", "train_loss:Q", "wall_s:Q"],
        )
        .properties(width=PLOT_W, height=320)
    )


def _table_height(n: int) -> int:
    return 38 + 35 * max(n, 1)  # header + every row: the whole ranking, no scroll box


@dataclass(frozen=True)
class Filters:
    """What the sidebar picked: every control of the page, in one place."""

    task: str
    tier: str
    setup: str | None  # the run layout shown (pipeline, tensor-parallel, data-parallel); None: the only one
    rule: str
    quality: str
    network: str | None  # column suffix of modeled times (None: no record has any)
    link: Link | None  # the custom link to re-model at (None: a stored profile)
    link_words: str
    direction: str
    min_ratio: float | None
    include_local: bool
    local_choice: bool  # the "Include local results" box is shown (local and committed rows both exist)


def _local_rows(sb, frame: pd.DataFrame, stores: list[str]) -> tuple[pd.DataFrame, bool, bool]:
    """(rows to show, include local results, whether the box was offered): local results unless unticked."""
    is_local = _local_mask(frame["source"], stores) if len(frame) else pd.Series(dtype=bool)
    has_local, has_committed = bool(is_local.any()), bool((~is_local).any())
    if not (has_local and has_committed):
        return frame, True, False
    include = sb.checkbox(
        "Include local results",
        value=bool(st.session_state.get("_url_local", True)),
        key="local",
        help="Results from your results store next to the committed records (other machine, other load: "
        "the 'measured on' column says which).",
    )
    return (frame if include else frame[~is_local]), include, True


def _no_results(stores: list[str], records_dirs: list[str], problems) -> None:
    st.info(
        "No results to show yet. Run the benchmark (`mpcbench run` or `pytest suite`) to fill "
        "results/store.jsonl, or add a submission under records/ (see docs/leaderboard.md)."
    )
    st.text(
        "Sources read:\n" + "\n".join(f"  {p}" for p in [*stores, *records_dirs])
        if stores or records_dirs
        else "No sources given."
    )
    _skipped(problems)


def _rule_controls(sb, rule: ranking.Rule) -> float | None:
    """The controls only some rules use (``Rule.controls``); returns the minimum ratio (None: unused)."""
    if "min_ratio" not in rule.controls:
        return None
    return sb.number_input(
        "Minimum compression ratio (0: any)",
        min_value=0.0,
        value=float(st.session_state.get("_url_min_ratio") or 0.0),
        step=0.5,
        key="min_ratio",
    )


def _sidebar(frame: pd.DataFrame, shown: pd.DataFrame, stores: list[str], records_dirs: list[str], **local) -> Filters:
    """Every filter of the page, defaults from the URL."""
    sb = st.sidebar
    tasks = sorted(shown["task"].unique())
    # ?entry=<entry id>: that entry's rows are what the reader came for (its first task by default)
    url_entry = str(st.session_state.get("_url_entry") or "")
    entry_tasks = sorted(shown.loc[shown["entry"] == url_entry, "task"].unique()) if " / " not in url_entry else []
    task = sb.selectbox(
        "Task", tasks, index=tasks.index(_url_default("task", tasks, (entry_tasks or tasks)[0])), key="task"
    )
    tiers_here = set(shown.loc[shown["task"] == task, "tier"])
    tiers = [t for t in TIER_ORDER if t in tiers_here] + sorted(tiers_here - set(TIER_ORDER))
    tier = sb.selectbox(
        "Tier",
        tiers,
        index=tiers.index(
            _url_default(
                "tier", tiers, entry_tier(shown, url_entry, task, tiers, "quick" if "quick" in tiers else tiers[0])
            )
        ),
        key="tier",
    )
    setup = _setup_control(sb, shown[(shown["task"] == task) & (shown["tier"] == tier)], url_entry)
    for note in (entry_notice(shown, url_entry, task, tier), baseline_notice(shown, task, tier)):
        if note:
            st.info(notice_text(note))  # the URL's ?entry= is anyone's text: never markdown
    rules = list(ranking.RULES)
    # the report's rule, unless no record has modeled times for it to rank
    no_times = not ranking.network_profiles(frame)
    default_rule = (
        next((r for r in rules if not ranking.RULES[r].needs_network), rules[0]) if no_times else ranking.DEFAULT_RULE
    )
    rule = sb.selectbox(
        "Ranking rule",
        rules,
        index=rules.index(_url_default("rule", rules, default_rule)),
        format_func=lambda r: ranking.RULES[r].title,
        key="rule",
    )
    qualities = list(ranking.QUALITIES)
    quality = sb.radio(
        "Quality",
        qualities,
        index=qualities.index(_url_default("quality", qualities, "compressed")),
        format_func=QUALITY_LABELS.get,
        key="quality",
        help="The same trained model, evaluated with its compressor in the pipeline or without it.",
    )
    network, link, link_words = _network_controls(sb, ranking.network_profiles(frame))
    directions = list(DIRECTION_LABELS)
    direction = sb.selectbox(
        "Direction",
        directions,
        index=directions.index(_url_default("direction", directions, "total")),
        format_func=DIRECTION_LABELS.get,
        key="direction",
    )
    min_ratio = _rule_controls(sb, ranking.RULES[rule])
    sb.divider()
    sb.text(
        "Sources:\n"
        + "\n".join(
            f"  {os.path.relpath(p, REPO) if str(p).startswith(str(REPO)) else Path(p).name}"
            for p in [*stores, *records_dirs]
        )
    )
    return Filters(task, tier, setup, rule, quality, network, link, link_words, direction, min_ratio, **local)


def _setup_control(sb, rows: pd.DataFrame, entry: str) -> str | None:
    """The layouts this task and tier ran (pipeline, tensor-parallel, data-parallel) as a selector:
    one at a time, each ranked against its own none, never interleaved (None: only one layout).
    Default: the URL's, else the setup of the entry the URL names, else the one with the most
    compressors (:func:`leaderboard.views.setups_by_size`), labelled by what it is."""
    setups = views.setups_by_size(rows)
    if len(setups) <= 1:
        return setups[0] if setups else None
    own = views.setups_by_size(rows[rows["entry"] == entry]) if entry else []
    return sb.selectbox(
        "Setup",
        setups,
        index=setups.index(_url_default("setup", setups, own[0] if own else setups[0])),
        format_func=views.setup_title,
        key="setup",
        help="How the model was split: pipeline stages, tensor-parallel ranks, data-parallel replicas, or one "
        "process. Each layout is ranked against its own uncompressed run; the list starts with the one most "
        "compressors ran.",
    )


def _ranking_section(
    f: Filters, ranked: pd.DataFrame, rows: pd.DataFrame, metric: str, higher: bool, entry: str
) -> float:
    """The question and the ranked table first (at 1400x900 its first rows are on the first screen),
    the facts in two short lines, every explanation folded below; returns the task's target."""
    target = view_target(rows)  # the maintainers' target: another entry's record cannot move it
    mdd = ranked["mdd"].dropna()
    mdd_text = f"{mdd.median():.3g}" if len(mdd) else "unknown (one seed, no measured spread)"
    rule = ranking.RULES[f.rule]
    # our own text only: the metric name is record text, so it goes in only when it is a plain word
    safe_metric = metric if re.fullmatch(r"[A-Za-z][A-Za-z0-9_.-]{0,39}", metric) else "quality"
    question = rule.question(
        safe_metric, higher_is_better=higher, target=target, network=f.link_words, min_ratio=f.min_ratio
    )
    st.subheader("Ranking")
    st.markdown("**" + question + "**")  # the rule's words, a plain-word metric, our numbers: no record text
    st.text(  # record text (task, metric, setup) as plain text
        f"{f.task} / {f.tier}"
        + (f" / {views.setup_title(f.setup)}" if f.setup else "")
        + f"    {metric} ({'higher' if higher else 'lower'} is better, {QUALITIES_SHORT[f.quality]}), "
        f"target {target:.4g}    network {f.link_words}    {DIRECTION_LABELS[f.direction]}"
        + (f"    entry: {ranked['entry'].iloc[0]}" if len(ranked) and ranked["entry"].nunique() == 1 else "")
        + "\n"
        f"differences below {mdd_text} are 'not resolved' (minimal detectable difference, alpha 0.05)"
    )
    table = ranking.display_table(ranked, network=f.network, direction=f.direction, quality=f.quality)
    own = (ranked["entry"] == entry).to_numpy() if entry else None
    # one entry or one setup: said once above, not repeated in a column on every row
    table = table.drop(columns=[c for c in ("entry", "setup") if c in table and table[c].nunique() <= 1])
    table = views.compact_marks(table)  # short significance marks: the answer columns fit a laptop's screen
    shown: pd.DataFrame | object = table
    if own is not None and own.any() and not own.all():
        # the linked entry's rows stand out (a background colour: the cells stay text)
        shown = table.style.apply(lambda r: [OWN_ROW_STYLE if own[r.name] else ""] * len(r), axis=1)
    # st.dataframe, not st.table: st.table renders markdown in cells, and record text must stay inert
    st.dataframe(
        shown,
        hide_index=True,
        width="stretch",
        height=_table_height(len(table)),
        key="ranking_table",
        column_config={
            # wide enough for "15 (1 of 3 seeds)" where a row is short of seeds, else small
            "rank": st.column_config.TextColumn(
                width=125 if table["rank"].str.contains(" seeds)", regex=False).any() else "small"
            ),
            "compressor": st.column_config.TextColumn(  # a fixed width: one long plugin name cannot push the answer off
                width="medium",
                help="Short name; the last column 'spec' and 'Full specs' below spell out every parameter",
            ),
            "entry": st.column_config.TextColumn(width="medium"),
            "spec": st.column_config.TextColumn(width="large", help="The compressor with every parameter"),
        },
    )
    if own is not None and own.any() and not own.all():
        st.text(f"Highlighted: the {int(own.sum())} row(s) of entry {entry} (from the link).")
    warned = int((ranked["n_warnings"] > 0).sum()) if "n_warnings" in ranked else 0
    if warned:  # our own text and a count only: the warning texts are record text (see Entry details)
        st.warning(
            f"{warned} entr{'y has' if warned == 1 else 'ies have'} warnings in their records (column 'warnings'); "
            "pick the entry under 'Entry details' to read them."
        )
    with st.expander("How this ranking works, and the marks", expanded=False):
        explanation = rule  # the rule's own text (the app's, not a record's)
        st.markdown(f"**{explanation.title}.** {explanation.explain(safe_metric, higher_is_better=higher)}")
        st.caption(views.MARKS_LEGEND)
    desc = describe_task(f.task)  # the task module's DESCRIPTION (suite.results.task_catalog)
    if desc:
        with st.expander("About this task", expanded=False):
            st.caption(desc.page_text())
    with st.expander("Full specs (every parameter)", expanded=False):
        st.dataframe(table[["compressor", "spec"]], hide_index=True, width="stretch", key="spec_table")
    return target


@st.cache_data(show_spinner="Replaying the records over 1 Mbps to 100 Gbps ...", max_entries=32)
def _bandwidth_curves(
    _rows: pd.DataFrame, version: tuple, task: str, tier: str, setup: str | None, latency: float, _index_obj
):
    curves = crossover.time_to_target_by_bandwidth(_index_obj.heavy(_rows), latency)
    return curves, crossover.crossovers(curves)


def _bandwidth_section(f: Filters, rows: pd.DataFrame, version: tuple, index_obj) -> None:
    """Time-to-target against bandwidth, one line per compressor, with the crossover against none marked."""
    st.subheader("Time to target against bandwidth")
    latency = (f.link or _link_for_plot(f.network, None)).latency_s
    curves, found = _bandwidth_curves(rows, version, f.task, f.tier, f.setup, latency, index_obj)
    st.caption(
        "Modeled time to reach the target as the link between stages gets slower (every record's measured compute, "
        f"compression and bytes replayed at each bandwidth, {format_latency(latency)} latency). A ◆ marks the "
        "crossover: below that bandwidth the compressor reaches the target before none. Compressors that never "
        "reach the target have no line."
    )
    drawn = curves.dropna(subset=["time_s"])
    if drawn.empty:
        st.text("No row of this task and setup reaches the target, so there is no time-to-target to plot.")
        return
    x = alt.X(
        "bandwidth_bps:Q",
        scale=alt.Scale(type="log"),
        title="bandwidth between stages (log)",
        axis=alt.Axis(values=[1e6, 1e7, 1e8, 1e9, 1e10, 1e11], labelExpr=_BPS_EXPR),
    )
    y = alt.Y("time_s:Q", scale=alt.Scale(type="log"), title="modeled time-to-target (s, log)")
    color = alt.Color("name:N", title="compressor", legend=alt.Legend(labelLimit=300))
    tooltip = [
        alt.Tooltip("name:N", title="compressor"),
        alt.Tooltip("bandwidth_bps:Q", title="bandwidth (bit/s)", format=".3s"),
        alt.Tooltip("time_s:Q", title="time-to-target (s)", format=".3g"),
        alt.Tooltip("reached:Q", title="seeds that reached"),
    ]
    lines = alt.Chart(drawn).mark_line(point=True).encode(x=x, y=y, color=color, tooltip=tooltip)
    layers = [lines]
    marks = []
    for c in found:
        if not (0 < c.bps < math.inf):
            continue
        g = drawn[(drawn["entry"] == c.entry) & (drawn["compressor"] == c.compressor) & (drawn["setup"] == c.setup)]
        g = g.sort_values("bandwidth_bps")
        t = (
            float(np.exp(np.interp(np.log(c.bps), np.log(g["bandwidth_bps"]), np.log(g["time_s"]))))
            if len(g)
            else math.nan
        )
        marks.append({"name": c.name, "bandwidth_bps": c.bps, "time_s": t, "crossover": format_bandwidth(c.bps)})
    if marks:
        layers.append(
            alt.Chart(pd.DataFrame(marks))
            .mark_point(shape="diamond", size=160, filled=True)
            .encode(x=x, y=y, color=color, tooltip=["name:N", "crossover:N"])
        )
    st.altair_chart(alt.layer(*layers).properties(width=PLOT_W, height=PLOT_H), width="content")
    st.dataframe(
        pd.DataFrame([{"compressor": c.name, "against none": c.text} for c in crossover.by_payoff(found)]),
        hide_index=True,
        width="stretch",
        key="crossover_table",
    )


# axis labels in bit/s units: 1e9 -> "1 Gbps" (Vega's own format would print "1G")
_BPS_EXPR = (
    "datum.value >= 1e9 ? format(datum.value / 1e9, '~g') + ' Gbps' : datum.value >= 1e6 ? "
    "format(datum.value / 1e6, '~g') + ' Mbps' : format(datum.value / 1e3, '~g') + ' kbps'"
)


def _pareto_section(f: Filters, ranked: pd.DataFrame, metric: str, higher: bool) -> None:
    st.subheader("Quality versus bytes")
    chart = _pareto_chart(ranked, f.direction, metric, higher)
    if chart is None:
        st.info(f"No entry sent bytes in the {DIRECTION_LABELS[f.direction]} direction; pick another direction.")
    else:
        st.altair_chart(chart, width="content")


def _time_to_quality_section(
    version: tuple,
    f: Filters,
    rows: pd.DataFrame,
    ranked: pd.DataFrame,
    labels: dict,
    own: list[str],
    metric: str,
    higher: bool,
    target: float,
) -> tuple[list[tuple[str, str, str]], pd.DataFrame]:
    """The time-to-quality plot of the chosen rows; returns (chosen rows' keys, their detailed records)."""
    st.subheader("Time to quality")
    st.caption(
        "Quality against modeled wall-clock time at the chosen network: the measured compute and compression "
        "times and the measured bytes of every step, replayed over the link. Bold: the mean over seeds; faint: "
        "each seed. Dashed horizontal line: the target; on it, diamonds with bars: the ranking table's "
        "time-to-target (mean ± sd of the seeds' crossings, each interpolated between the evaluations around "
        "it). The baseline is always drawn. Emulated-link measurements, where records have them, are drawn dashed."
    )
    # the baseline is always drawn: the reader compares every curve with it
    baselines = [lbl for lbl, key in labels.items() if key[1] == ranking.BASELINE][:1]
    default = list(dict.fromkeys(own[:6] + list(labels)[: max(0, 6 - len(own[:6]))] + list(labels)[:1] + baselines))
    chosen = st.multiselect("Entries", list(labels), default=default, key="curves")
    sel = [labels[c] for c in chosen]
    picked = rows[views._selected(rows, sel) & rows["latest"] & (rows["status"] == "ok")] if sel else rows.iloc[:0]
    detailed = _details(picked, version) if len(picked) else picked.assign(curve=[], timing_inputs=[])
    link = _link_for_plot(f.network, f.link)
    ttq = ranking.time_to_quality_frame(detailed, link, sel, quality=f.quality)
    if ttq.empty:
        st.text("No curve points with timing inputs for the selected entries.")
    else:
        seeds = ranking.time_to_quality_frame(detailed, link, sel, quality=f.quality, per_seed=True)
        seeds = seeds[seeds["source"] == "modeled"]
        marks = _table_marks(ranked, sel, f.network, ttq) if f.quality == "compressed" else pd.DataFrame()
        st.altair_chart(_ttq_chart(ttq, seeds, marks, metric, higher, f.link_words, target), width="content")
    return sel, detailed


def _table_marks(ranked: pd.DataFrame, sel: list, network: str | None, ttq: pd.DataFrame) -> pd.DataFrame:
    """The ranking table's time-to-target (mean ± sd over the seeds' crossings) of the plotted rows."""
    col = f"time_to_target_s@{network}"
    if not network or col not in ranked:
        return pd.DataFrame()
    names = {
        (e, c, s, m): lbl
        for lbl, e, c, s, m in ttq[["label", "entry", "compressor", "setup", "machine"]]
        .drop_duplicates()
        .itertuples(index=False, name=None)
    }
    out = []
    for r in ranked.to_dict("records"):
        machine = r.get("machine", "")
        key = (r["entry"], views.short_name(r), r["setup"], machine)
        if (r["entry"], r["compressor"], r["setup"], machine) in sel and key in names and r[col] == r[col]:
            reached = int(round(r.get(f"reached@{network}", 0.0) * r["n"]))
            out.append(
                {
                    "label": names[key],
                    "source": "modeled",
                    "time_s": r[col],
                    "sd": r.get(f"time_sd@{network}"),
                    "reached": f"{reached}/{r['n']}",
                }
            )
    return pd.DataFrame(out)


def _curves_section(detailed: pd.DataFrame, sel: list, metric: str) -> None:
    st.subheader("Training curves")
    curves = ranking.curve_frame(detailed, sel) if len(detailed) else pd.DataFrame()
    if curves.empty:
        st.text("No curve points for the selected entries.")
    else:
        st.altair_chart(_curves_chart(curves, metric), width="content")


def _detail_section(version: tuple, f: Filters, rows: pd.DataFrame, labels: dict, own: list[str]) -> None:
    """One row's card, its warnings and its raw records."""
    st.subheader("Entry details")
    options = list(labels)
    first = own[0] if own else (options[0] if options else None)
    pick = st.selectbox(
        "Entry", options, index=options.index(_url_default("entry", options, first)) if options else 0, key="detail"
    )
    if not pick:
        return
    _write_url({"entry": pick})
    e, c, s, m = labels[pick]
    one = rows[views._selected(rows, [(e, c, s, m)])]
    detail = ranking.entry_detail(_details(one, version), f.task, f.tier, e, c, s, m)
    card = ranking.entry_card(detail)
    st.dataframe(
        pd.DataFrame(card, columns=["", "value"]),
        hide_index=True,
        width="stretch",
        key="detail_card",
        height=_table_height(len(card)),
        column_config={"value": st.column_config.TextColumn(width="large")},
    )
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
    with st.expander("Raw records (JSON)", expanded=False):
        st.json(detail, expanded=1)


@st.cache_data(show_spinner="Scoring ...", max_entries=8)
def _score(_frame: pd.DataFrame, version: tuple, tier: str):
    from leaderboard.score import benchmark_score

    return benchmark_score(ranking.aggregate(_frame), tier=tier)


def _score_section(frame: pd.DataFrame, version: tuple, tier: str) -> None:
    """One score per compressor across tasks and networks: AlgoPerf-style performance profiles."""
    from leaderboard.report import score_table
    from leaderboard.score import TAU_MAX

    st.subheader("Benchmark score")
    result = _score(frame, version, tier)
    if result.table.empty:
        st.text(f"No compressor of the {tier} tier has results on every task with modeled times.")
        return
    st.caption(
        f"For each compressor, the fraction of (task, network) pairs on which its time-to-target is within a "
        f"factor tau of the fastest compressor's, integrated over tau in [1, {TAU_MAX:g}] (the AlgoPerf "
        "benchmark's performance profiles): 1 = fastest everywhere. A target not reached by every seed counts "
        "as never reached. The spread is over bootstrap draws of each row's seeds."
    )
    st.text(
        f"pairs ({len(result.pairs)}): "
        + ", ".join(f"{t}@{n}" for t, n in result.pairs)
        + (f"\nleft out (not run on every task): {', '.join(result.left_out)}" if result.left_out else "")
    )
    table = score_table(result)
    st.dataframe(table, hide_index=True, width="stretch", height=_table_height(len(table)), key="score_table")
    top = list(result.table["row"][:8])  # the profile plot: the 8 best rows (the table has all)
    curves = result.curves[result.curves["row"].isin(top)]
    chart = (
        alt.Chart(curves)
        .mark_line(interpolate="step-after")
        .encode(
            x=alt.X(
                "tau:Q", title="tau (time-to-target within tau x the fastest)", scale=alt.Scale(domain=[1, TAU_MAX])
            ),
            y=alt.Y("fraction:Q", title="fraction of (task, network) pairs", scale=alt.Scale(domain=[0, 1])),
            color=alt.Color("row:N", title="entry / compressor", sort=top, legend=alt.Legend(labelLimit=420)),
            tooltip=["row:N", "tau:Q", "fraction:Q"],
        )
        .properties(width=PLOT_W, height=320)
    )
    st.altair_chart(chart, width="content")


@st.cache_data(show_spinner="Comparing across tasks ...", max_entries=8)
def _overview(_frame: pd.DataFrame, version: tuple, tier: str) -> pd.DataFrame:
    """Every (entry, compressor) of the tier across tasks, with its score (one build per frame and tier)."""
    agg = ranking.aggregate(_frame[(_frame["tier"] == tier) & (_frame["status"] == "ok")])
    return views.overview_table(agg, _score(_frame, version, tier).table)


def _overview_section(frame: pd.DataFrame, version: tuple, tier: str) -> None:
    """One line per compressor across the tier's tasks (each task's Δ vs none, the score), searchable."""
    st.subheader("Overview across tasks")
    search = st.text_input(
        "Search compressors",
        key="overview_search",
        placeholder="e.g. topk, quant, my-entry",
        help="Keeps the lines whose compressor or entry contains this text.",
    )
    table = views.search_overview(_overview(frame, version, tier), search)
    st.caption(
        f"The {tier} tier: each task's Δ vs none in the task's setup with the most compressors (marks as in the "
        "ranking), and the benchmark score below ('-': not run on every task)."
    )
    st.dataframe(
        table, hide_index=True, width="stretch", key="overview_table", height=_table_height(min(len(table), 12))
    )


def _reproductions_section(frame: pd.DataFrame, version: tuple) -> None:
    """The seed papers' claims with their verdicts and the tier's state (leaderboard/views_claims.py)."""
    from leaderboard import views_claims

    views_claims.section(frame, version)


def _write_filters_to_url(f: Filters) -> None:
    _write_url(
        dict(
            task=f.task,
            tier=f.tier,
            setup=f.setup,
            rule=f.rule,
            quality=f.quality,
            network=st.session_state.get("network"),
            bw=st.session_state.get("bw") if f.link else None,
            lat=st.session_state.get("lat") if f.link else None,
            direction=f.direction,
            min_ratio=f.min_ratio or None,
            local=f.include_local if f.local_choice else None,
        )
    )


def main(argv: list[str] | None = None) -> None:
    """The page, top to bottom: sources, filters, ranking, plots, details."""
    st.set_page_config(page_title="mpcbench leaderboard", layout="wide")
    st.title("mpcbench leaderboard")
    st.caption(
        "Compressing activations and gradients in pipeline- and data-parallel training: "
        "quality against bytes on the wire and against time over a network."
    )
    stores, records_dirs = _sources(sys.argv[1:] if argv is None else argv)
    index = _index(tuple(stores), tuple(records_dirs))
    _init_from_url()
    st.sidebar.header("Filters")
    frame, include_local, local_choice = _local_rows(st.sidebar, index.frame, stores)
    shown = frame[frame["status"] == "ok"] if len(frame) else frame
    if shown.empty:
        _no_results(stores, records_dirs, index.problems)
        return
    f = _sidebar(frame, shown, stores, records_dirs, include_local=include_local, local_choice=local_choice)
    projection = projection_controls(st.sidebar, f.task)  # beside the network: measured unless a profile is picked

    rule = ranking.RULES[f.rule]
    if rule.needs_network and f.network is None:
        st.error(f"No record has modeled times, so the rule '{rule.title}' cannot rank; pick another rule.")
        return
    version = (str(index.path), index.path.stat().st_mtime_ns, f.include_local)
    rows, agg = _ranked_input(frame, version, f.task, f.tier, f.link, index)
    if "remodel_note" in rows and (skipped := rows.loc[rows["remodel_note"] != "", "entry"]).size:
        st.warning(  # our own text and counts; entry ids are [A-Za-z0-9._-] (the loader's rule)
            f"{skipped.size} record(s) of {skipped.nunique()} entr{'y' if skipped.nunique() == 1 else 'ies'} "
            "not re-modeled at this link: skipped: too large (per-entry simulation budget)"
        )
    if f.setup is not None:
        rows, agg = rows[rows["setup"] == f.setup], agg[agg["setup"] == f.setup]
    ranked = rule.rank(agg, min_ratio=f.min_ratio, network=f.network, direction=f.direction, quality=f.quality)
    metric = next((m for m in ranked["metric_name"] if m), "quality")
    higher = bool(ranked["higher_is_better"].iloc[0]) if len(ranked) else True
    _write_filters_to_url(f)

    url_entry = str(st.session_state.get("_url_entry") or "")
    target = _ranking_section(f, ranked, rows, metric, higher, url_entry)
    _overview_section(frame, version, f.tier)
    _details(rows, version)  # every record of the view read once, here, after the answer is on screen
    _bandwidth_section(f, rows, version, index)
    _pareto_section(f, ranked, metric, higher)
    labels = _row_labels(ranked)  # rows that differ only by setup get the setup in their label
    own = [lbl for lbl, key in labels.items() if key[0] == url_entry]
    sel, detailed = _time_to_quality_section(version, f, rows, ranked, labels, own, metric, higher, target)
    _curves_section(detailed, sel, metric)
    _detail_section(version, f, rows, labels, own)
    bandwidth_section(rows, version, f.task, f.tier, lambda r: _details(r, version))  # what link each entry needs
    projected_section(rows, version, (f.task, f.tier, f.setup), projection, _link_for_plot(f.network, f.link))
    _score_section(frame, version, f.tier)
    _reproductions_section(frame, version)
    with st.expander("All aggregated columns"):
        nested = [c for c in ranked.columns if ranked[c].map(lambda v: isinstance(v, (list, dict))).any()]
        st.dataframe(ranked.drop(columns=nested), hide_index=True, width="stretch")  # per-seed lists: in the table
    _skipped(index.problems)


main()
