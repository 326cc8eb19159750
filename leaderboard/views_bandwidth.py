"""The page's "What link do I need" section: bandwidth for 50/90/99 % compute utilization.

The numbers are :func:`leaderboard.bandwidth.bandwidth_table`'s (the same as ``mpcbench report
--bandwidth``), for the task and tier on screen; the network model's limits on this machine are
stated under the table (tensor-parallel cells: see docs/data_parallel.md).
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from leaderboard.bandwidth import EXPLANATION, bandwidth_table, display

__all__ = ["bandwidth_section", "MODEL_LIMITS"]

MODEL_LIMITS = (
    "Checked against emulated links on this 2-core machine (network namespaces + tbf, "
    "benchmarks/network_model_check.py): pipeline and data-parallel cells, the outer loop included, within "
    "the stated ratios. Tensor-parallel cells are not: over a link their blocking TP all-reduces are "
    "rendezvous of processes sharing 2 cores (0.91 at 20 Mbit/s, 1.31 at 100 Mbit/s, measured / modeled), "
    "which real hosts with a core or GPU per rank do not have; their intra-host figures are the model's, "
    "untested here (docs/data_parallel.md)."
)


@st.cache_data(show_spinner="Modeling the links each entry needs ...", max_entries=32)
def _table(_rows: pd.DataFrame, version: tuple, task: str, tier: str) -> pd.DataFrame:
    return bandwidth_table(_rows)


def bandwidth_section(rows: pd.DataFrame, version: tuple, task: str, tier: str, load_details) -> None:
    """``rows``: the task and tier's index rows; ``load_details`` reads their timing inputs."""
    st.subheader("What link do I need")
    st.caption(EXPLANATION)
    ok = rows[(rows["status"] == "ok") & rows["latest"]] if len(rows) else rows
    if ok.empty:
        st.info("No ok records for this task and tier.")
        return
    table = _table(load_details(ok), version, task, tier)
    if table.empty:
        st.info("No record of this task and tier stores network-model inputs.")
        return
    st.dataframe(display(table).drop(columns=["task", "tier"]), hide_index=True, width="stretch")
    st.caption(MODEL_LIMITS)
