"""The page's "Reproductions" section: each claim's verdict with the tier's state, the plateau tier's
rows with and without compression at evaluation, and its learning curves.

    section(frame, version)     # called by leaderboard/app.py

Every number comes from :mod:`leaderboard.claims` (the same verdicts as ``mpcbench report
--claims``); record text reaches the page only through ``st.dataframe`` and chart data.
"""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from leaderboard.claims import claims_table, evaluation_means, judge, load_claims, panel_title, plateau_curves

__all__ = ["section", "verdict_frame", "curves_frame", "evaluation_frame"]

COLUMNS = [
    "verdict",
    "claim",
    "paper",
    "task / tier",
    "tier state",
    "effect (+ = better)",
    "test",
    "MDD",
    "seeds",
    "expected",
    "why",
    "configuration",
    "vs",
    "means",
    "with / without compression at evaluation",
    "finding",
]


@st.cache_data(show_spinner=False, max_entries=8)
def verdict_frame(_frame: pd.DataFrame, version: tuple) -> pd.DataFrame:
    """The claims table (cached per records version), verdict first."""
    table = claims_table([judge(c, _frame) for c in load_claims()])
    return table[[c for c in COLUMNS if c in table]]


@st.cache_data(show_spinner=False, max_entries=8)
def curves_frame(_frame: pd.DataFrame, version: tuple) -> pd.DataFrame:
    """The plateau tier's mean learning curves (:func:`leaderboard.claims.plateau_curves`)."""
    return plateau_curves(_frame)


@st.cache_data(show_spinner=False, max_entries=8)
def evaluation_frame(_frame: pd.DataFrame, version: tuple) -> pd.DataFrame:
    """The plateau tier's rows with and without compression at evaluation
    (:func:`leaderboard.claims.evaluation_means`)."""
    return evaluation_means(_frame)


def section(frame: pd.DataFrame, version: tuple) -> None:
    """Render the section."""
    st.subheader("Reproductions")
    st.caption(
        "Published findings tested on this benchmark: the measured effect (positive = better), its 95% interval "
        "and test (paired by seed only within one machine class, else Welch), the minimal detectable difference "
        "(MDD), the tier's state (the gap's change over the last quarter of training: plateaued when within the MDD; "
        "at the trivial predictor's floor or not; same machine class or not), each side's measured compression "
        "ratio and optimizer, and a verdict: reproduced, contradicted (in this configuration, when the run departs "
        "from what the paper describes), refuted in this configuration, not resolvable, or not testable at this "
        "tier (no records, both sides at the floor, a gap still moving, or a code short of the ratio the claim is "
        "about). Each finding cites its source's words, or reads as the project's own question. The CPU tiers "
        "train narrow models; the plateau tier trains them further (docs/reproductions.md)."
    )
    table = verdict_frame(frame, version)
    st.dataframe(table, hide_index=True, width="stretch", key="claims_table")
    evaluated = evaluation_frame(frame, version)
    if not evaluated.empty:
        st.markdown(
            "**Plateau tier: each row evaluated with and without compression** (the same trained models; mean ± sd "
            "over seeds). An AQ-SGD model evaluated with compression sees first visits only, so its claims read the "
            "column without compression."
        )
        st.dataframe(evaluated, hide_index=True, width="stretch", key="plateau_evaluation")
    curves = curves_frame(frame, version)
    if curves.empty:
        st.caption("Plateau tier: no records yet.")
        return
    st.markdown("**Plateau tier: learning curves** (mean over seeds; the legend gives the seeds per row)")
    # one chart per (task, setup): two setups of a task have different step axes and baselines
    panels = list(curves.groupby(["task", "setup"], sort=True))
    cols = st.columns(min(len(panels), 2))
    for i, ((task, setup), g) in enumerate(panels):
        g = g.copy()
        seeds = g.groupby("compressor")["seeds"].max()
        g["row"] = [f"{c} ({int(seeds[c])} seeds)" for c in g["compressor"]]
        chart = (
            alt.Chart(g)
            .mark_line(point=True)
            .encode(
                x=alt.X("step:Q", title="step"),
                y=alt.Y("metric:Q", title="metric", scale=alt.Scale(zero=False)),
                color=alt.Color(
                    "row:N",
                    title=panel_title(task, setup),
                    legend=alt.Legend(orient="bottom", labelLimit=400),
                ),
                tooltip=["row:N", "step:Q", "metric:Q", "seeds:Q"],
            )
            .properties(height=260)
        )
        with cols[i % len(cols)]:
            st.altair_chart(chart, width="stretch")
