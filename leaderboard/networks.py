"""Networks for the leaderboard: the stored profiles' columns, and re-modeling at any link.

Every record stores the inputs of the network model (``timing_inputs``: measured per-stage
compute and compression time, per-step wire bytes and messages per boundary), and the times
it modeled for the named profiles (``modeled.<profile>``). The page's network slider asks for
any bandwidth and latency, so :func:`remodel` replays the stored inputs through the model of
:mod:`suite.results.network` (pure functions over stored inputs; torch-free) at a
:class:`Link`. Where the link is one of the stored profiles, the stored columns are used
as they are (:func:`stored_profile`).
"""

from __future__ import annotations

import json
import math
import re
import time
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np
import pandas as pd

from suite.results import network as model

__all__ = [
    "Link",
    "profile_bandwidth_bps",
    "network_profiles",
    "stored_profile",
    "cumulative_times",
    "remodel",
    "format_bandwidth",
]

_BW = re.compile(r"(\d+(?:\.\d+)?)\s*([kKmMgGtT]?)(?:bps|b/s|bit)", re.IGNORECASE)
_UNIT = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}


@dataclass(frozen=True)
class Link:
    """A network between stages: bandwidth in bits per second and one-way latency in seconds."""

    bandwidth_bps: float
    latency_s: float
    intra: model.IntraHostLink | None = None  # the tensor-parallel link (None: the network model's NVLink class)

    @property
    def name(self) -> str:
        """The column suffix for modeled times at this link, e.g. ``"3.16Gbps/200us"``, ``"1Mbps/10ms"``."""
        lat = self.latency_s
        return f"{format_bandwidth(self.bandwidth_bps)}/" + (
            f"{lat * 1e3:.3g}ms" if lat >= 1e-3 else f"{lat * 1e6:.3g}us"
        )

    def profile(self) -> model.NetworkProfile:
        p = model.NetworkProfile(self.name, float(self.bandwidth_bps), float(self.latency_s))
        return p if self.intra is None else replace(p, intra=self.intra)


def format_bandwidth(bps: float) -> str:
    """``1e9`` -> ``"1Gbps"``, ``3.16e8`` -> ``"316Mbps"`` (3 significant digits)."""
    for unit, scale in (("Tbps", 1e12), ("Gbps", 1e9), ("Mbps", 1e6), ("kbps", 1e3)):
        if bps >= scale:
            return f"{bps / scale:.3g}{unit}"
    return f"{bps:.3g}bps"


def profile_bandwidth_bps(name: str) -> float:
    """Bandwidth of a profile, parsed from its name (``"100Gbps"`` -> 1e11), else looked up in
    ``suite.results.network.PROFILES``; NaN if neither works."""
    m = _BW.search(name)
    if m:
        return float(m.group(1)) * _UNIT[m.group(2).lower()]
    prof = model.PROFILES.get(name)
    return float(prof.bandwidth_bps) if prof else math.nan


def network_profiles(frame: pd.DataFrame) -> list[str]:
    """Profiles with a ``time_to_target_s@<profile>`` column, fastest network first."""
    names = [c.split("@", 1)[1] for c in frame.columns if c.startswith("time_to_target_s@")]
    seen = list(dict.fromkeys(names))
    return sorted(seen, key=lambda p: (-np.nan_to_num(profile_bandwidth_bps(p), nan=-1.0), seen.index(p)))


def stored_profile(link: Link, profiles: list[str]) -> str | None:
    """The stored profile that ``link`` is (same bandwidth and latency within 0.1%), if any."""
    for name in profiles:
        prof = model.PROFILES.get(name)
        if (
            prof
            and math.isclose(prof.bandwidth_bps, link.bandwidth_bps, rel_tol=1e-3)
            and math.isclose(prof.latency_s, link.latency_s, rel_tol=1e-3, abs_tol=1e-9)
        ):
            return name
    return None


@lru_cache(maxsize=65536)
def _step_times(timing_json: str, link: Link) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """(counts, modeled seconds per step) of each run of equal steps; empty if unusable."""
    try:
        inputs = model.TimingInputs.from_dict(json.loads(timing_json))
        runs = inputs.runs()
        times = tuple(model.run_step_times(inputs, link.profile()))
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError):  # untrusted stored inputs
        return (), ()
    return tuple(int(c) for _, c in runs), times


def cumulative_times(timing_json: str, link: Link, steps: list[float]) -> list[float]:
    """Modeled wall-clock seconds after each of ``steps`` training steps at ``link`` (NaN where
    the inputs are missing or the step lies beyond the run): the x axis of time-to-quality."""
    counts, times = _step_times(timing_json, link) if timing_json else ((), ())
    out = []
    for k in steps:
        if not counts or not isinstance(k, (int, float)) or not (k >= 0):  # None: target never reached
            out.append(math.nan)
            continue
        done, total, t_at = 0, 0.0, math.nan
        for c, t in zip(counts, times):
            if done + c >= k:
                t_at = total + (k - done) * t
                break
            done += c
            total += c * t
        out.append(t_at)
    return out


@lru_cache(maxsize=65536)
def _target_step(timing_json: str) -> float | None:
    """``timing_inputs.target_step`` (fractional: interpolated between the evaluations around
    the crossing), or None when the record has none."""
    try:
        v = json.loads(timing_json).get("target_step")
    except (ValueError, AttributeError, RecursionError):
        return None
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0 else None


ENTRY_REMODEL_BUDGET_S = 20.0  # CPU seconds of simulation per entry and link; the rest is "skipped: too large"


def remodel(frame: pd.DataFrame, link: Link) -> pd.DataFrame:
    """``frame`` (one row per record, :func:`leaderboard.frame.to_frame`) with
    ``time_to_target_s@<link.name>`` and ``total_s@<link.name>`` computed from each record's
    stored ``timing_inputs`` and ``reached_target_step`` (NaN: not reached, or no inputs); past
    :data:`ENTRY_REMODEL_BUDGET_S` of simulation for one entry its further rows are NaN with
    ``remodel_note`` "skipped: too large"."""
    ttt, total, notes = [], [], []
    # only rows the statistics count: a superseded or failed record is never re-modeled (each
    # distinct record costs one schedule simulation per distinct step load: docs/leaderboard.md)
    live = (frame["status"] == "ok") & frame["latest"] if {"status", "latest"} <= set(frame) else [True] * len(frame)
    entries = frame["entry"] if "entry" in frame else [""] * len(frame)
    spent: dict[str, float] = {}  # CPU seconds of simulation per entry: one entry cannot stall the page
    for timing, reached, use, entry in zip(frame["timing_inputs"], frame["reached_target_step"], live, entries):
        if timing and use and spent.get(entry, 0.0) > ENTRY_REMODEL_BUDGET_S:
            notes.append("skipped: too large")
            ttt.append(math.nan)
            total.append(math.nan)
            continue
        t0 = time.process_time()
        counts, times = _step_times(timing, link) if timing and use else ((), ())
        spent[entry] = spent.get(entry, 0.0) + time.process_time() - t0
        notes.append("")
        if not counts:
            ttt.append(math.nan)
            total.append(math.nan)
            continue
        total.append(float(sum(c * t for c, t in zip(counts, times))))
        # the interpolated step at which the run met its target, else the evaluation step
        at = _target_step(timing)
        at = reached if at is None else at
        ttt.append(cumulative_times(timing, link, [at])[0] if at == at and reached == reached else math.nan)
    out = frame.copy()
    out[f"time_to_target_s@{link.name}"] = np.asarray(ttt, dtype=float)
    out[f"total_s@{link.name}"] = np.asarray(total, dtype=float)
    out["remodel_note"] = notes
    return out
