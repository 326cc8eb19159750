"""The leaderboard's public API in one import (the pieces live in noun modules):

- :mod:`leaderboard.frame`: records -> one row per record (:func:`to_frame`, :func:`setup_label`).
- :mod:`leaderboard.statistics`: per-row aggregate over seeds, whose baseline, significance and
  the minimal detectable difference (:func:`aggregate`, :func:`minimal_detectable_difference`).
- :mod:`leaderboard.rules`: ranking rules as objects (:data:`RULES`, :func:`rank`, Pareto ranks).
- :mod:`leaderboard.networks`: network profiles and re-modeling at any link (the slider).
- :mod:`leaderboard.views`: tables, curves, time-to-quality, entry cards.
- :mod:`leaderboard.index`: the compact Parquet index the page and the report read.

    frame = to_frame(records)          # one row per record (flattened, see to_frame)
    agg = aggregate(frame)             # one row per (task, tier, entry, compressor, setup, machine)
    table = rank(agg, "pareto")        # + a "rank" column, sorted within each task/tier
    RULES["pareto"].explanation        # what the rule means, shown on the page

No Streamlit here: ``leaderboard/app.py`` only renders what these functions return, and
``mpcbench report`` calls the same functions.
"""

from __future__ import annotations

from leaderboard.frame import BASELINE, BYTE_DIRECTIONS, DIRECTIONS, MAINTAINERS, machine_label, setup_label, to_frame
from leaderboard.networks import Link, network_profiles, profile_bandwidth_bps, remodel
from leaderboard.rules import DEFAULT_RULE, QUALITIES, RULES, Rule, pareto_front, pareto_ranks, rank
from leaderboard.statistics import (
    GROUP,
    MEASURED_SPREAD,
    N_TOO_SMALL,
    SeedSpread,
    aggregate,
    minimal_detectable_difference,
    significance_marker,
)
from leaderboard.views import curve_frame, display_table, entry_card, entry_detail, time_to_quality_frame

__all__ = [
    "BASELINE",
    "DIRECTIONS",
    "BYTE_DIRECTIONS",
    "MAINTAINERS",
    "GROUP",
    "N_TOO_SMALL",
    "QUALITIES",
    "RULES",
    "DEFAULT_RULE",
    "Rule",
    "Link",
    "SeedSpread",
    "MEASURED_SPREAD",
    "setup_label",
    "machine_label",
    "to_frame",
    "aggregate",
    "rank",
    "pareto_front",
    "pareto_ranks",
    "significance_marker",
    "minimal_detectable_difference",
    "network_profiles",
    "profile_bandwidth_bps",
    "remodel",
    "curve_frame",
    "time_to_quality_frame",
    "entry_detail",
    "entry_card",
    "display_table",
]
