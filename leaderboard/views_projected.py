"""The page's "On other hardware" section: the rows on screen projected onto an accelerator and a
model size (:mod:`leaderboard.projected`, the same table as ``mpcbench report --hardware``).

Two selectors sit in the sidebar under the network: hardware (default "this machine (measured)":
the page's question stays "what did this machine measure" until a reader picks a profile) and
model size (the task's named sizes from ``suite/results/model_sizes.json``). Every projected
figure is labelled "projected" and the assumptions are one click away (an expander).
"""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from leaderboard.crossover import crossover_text, crossovers
from leaderboard.index import load_details
from leaderboard.networks import Link
from leaderboard.projected import display, projected_curves, projected_table
from suite.results.hardware import load_hardware
from suite.results.model_sizes import load_model_costs
from suite.results.projection import Projection

__all__ = ["MEASURED", "projection_controls", "projected_section"]

MEASURED = "this machine (measured)"
AS_MEASURED = "as measured"


@st.cache_data(max_entries=1)
def _choices() -> tuple[list[tuple[str, str]], dict[str, list[str]]]:
    """(profile name, label) of every datasheet profile; each task's named model sizes."""
    hw = [(p.name, p.label) for p in load_hardware().values() if not p.measured]
    sizes: dict[str, list[str]] = {}
    for c in load_model_costs()[0]:
        if c.model_size and c.model_size not in sizes.setdefault(c.task, []):
            sizes[c.task].append(c.model_size)
    return hw, sizes


def projection_controls(sb, task: str) -> Projection | None:
    """The sidebar's hardware and model-size selectors; None while the measured view is picked."""
    hw, sizes = _choices()
    labels = {name: f"{label} (projected)" for name, label in hw}
    options = [MEASURED, *labels]
    pick = sb.selectbox(
        "Hardware",
        options,
        key="hardware",
        format_func=lambda v: labels.get(v, v),
        help="Project every time onto an accelerator: compute from the counted FLOPs at the profile's peak x MFU, "
        "codec from each row's measured multiple of a copy. Quality and steps to target stay measured.",
    )
    size_options = [AS_MEASURED, *sizes.get(task, [])]
    size = sb.selectbox(
        "Model size",
        size_options,
        key="model_size",
        disabled=pick == MEASURED or len(size_options) == 1,
        help="Scale FLOPs, boundary and gradient bytes to a larger model of the same family "
        "(suite/results/model_sizes.json). Quality is the measured size's.",
    )
    if pick == MEASURED:
        return None
    return Projection(pick, None if size == AS_MEASURED else size)


@st.cache_data(show_spinner="Projecting the rows ...", max_entries=16)
def _projected(
    _ok: pd.DataFrame, version: tuple, view: tuple, projection: Projection, link: Link
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the projected table, time-to-target against bandwidth) of one view's ok rows; ``view`` (task,
    tier, setup) keys the cache with ``version``, since the rows themselves are not hashed."""
    detailed = load_details(_ok, projection=projection)
    return projected_table(detailed, link, projection), projected_curves(detailed, link, projection)


def projected_section(
    rows: pd.DataFrame, version: tuple, view: tuple, projection: Projection | None, link: Link
) -> None:
    """``rows``: the setup on screen, ``view`` its (task, tier, setup)."""
    st.subheader("On other hardware (projected)")
    if projection is None:
        st.caption(
            "Every time above is this CPU's (calibrated). Pick a hardware profile and a model size in the sidebar "
            "to see the same rows' projected step time, time to target and link needs on that accelerator."
        )
        return
    ok = rows[(rows["status"] == "ok") & rows["latest"]] if len(rows) else rows
    if ok.empty:
        st.info("No ok records for this view.")
        return
    table, curves = _projected(ok, version, view, projection, link)
    st.caption(
        f"PROJECTED onto {projection.hardware}"
        + (f" at {projection.model_size}" if projection.model_size else " at the measured size")
        + f", network {link.name}: times are a model, not a measurement; quality and steps to target are measured."
    )
    with st.expander("Assumptions of this projection"):
        st.text(projection.describe())
    st.dataframe(display(table, link.name), hide_index=True, width="stretch")
    if curves.empty:
        return
    drawn = curves.dropna(subset=["time_s"])
    if len(drawn):
        x = alt.X("bandwidth_bps:Q", scale=alt.Scale(type="log"), title="bandwidth between stages (bit/s, log)")
        y = alt.Y("time_s:Q", scale=alt.Scale(type="log"), title="projected time-to-target (s, log)")
        chart = (
            alt.Chart(drawn)
            .mark_line(point=True)
            .encode(x=x, y=y, color=alt.Color("name:N", title="compressor"), tooltip=["name:N", "time_s:Q"])
            .properties(title=f"PROJECTED onto {projection.hardware}", height=320)
        )
        st.altair_chart(chart, width="stretch")
    for line in crossover_text(crossovers(curves), link.latency_s):
        st.text(line)
