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
    "benchmarks/network_model_check.py): pipeline cells within 0.98-1.05 of the model; data-parallel cells, "
    "the outer loop included, took 1.05-1.09x the modeled step on the quiet machine (1.16 for a compressed "
    "pseudo-gradient at 100 Mbit/s; 1.07-1.26 at load 2.5): bulk transfers 6-8 % under the emulated link's "
    "rate, and the faster replica waiting for the slower one at each synchronization, which the model, "
    "pricing replicas alike, leaves out; so the bandwidths here are optimistic by about that much on such "
    "a machine. Tensor-parallel cells "
    "are not confirmed: their blocking TP all-reduces are rendezvous of processes sharing 2 cores (measured / "
    "modeled 0.91-1.32 between runs of one cell), which real hosts with a core or GPU per rank do not have; "
    "the intra-host figures are the model's (docs/data_parallel.md)."
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
