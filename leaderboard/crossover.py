"""Time-to-target against bandwidth, and where compression starts to pay off.

For one task, tier and setup, every row's stored network-model inputs are replayed
(:func:`leaderboard.networks.remodel`) at a sweep of bandwidths, all at one latency: the modeled
time-to-target of each compressor as the link gets slower. The *crossover* of a compressor is
the bandwidth below which it reaches the target before ``none`` (interpolated on log scales
between the two sweep points around the sign change); a compressor faster at every swept
bandwidth, never faster, or not reaching the target says so instead. The page plots the
curves with the crossovers marked; ``mpcbench report`` prints the same crossovers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from leaderboard.names import display_name
from leaderboard.networks import Link, format_bandwidth, remodel
from suite.results.network import IntraHostLink

__all__ = ["SWEEP_BPS", "Crossover", "time_to_target_by_bandwidth", "crossovers", "by_payoff", "crossover_text"]

# 1 Mbps .. 100 Gbps, 2 per decade: each point replays every record's schedule (~30-60 ms a record on a
# 2-core CPU), so the sweep is coarse and a crossover is interpolated between its points
SWEEP_BPS = tuple(float(f"{10 ** (6 + k / 2):.3g}") for k in range(11))
BASELINE = "none"
NEVER = "never reaches the target"
KEYS = ["entry", "compressor", "setup"]


def time_to_target_by_bandwidth(
    rows: pd.DataFrame,
    latency_s: float,
    bandwidths: tuple[float, ...] = SWEEP_BPS,
    intra: IntraHostLink | None = None,
) -> pd.DataFrame:
    """One row per (entry, compressor, setup, bandwidth): ``name`` (the short display name),
    ``bandwidth_bps``, ``time_s`` (mean over the seeds that reached the target; NaN: none did),
    ``reached`` and ``n`` (seeds). ``rows``: one row per record with ``timing_inputs``; ``intra``: the
    tensor-parallel link (None: the network model's NVLink class; a projection passes its hardware's)."""
    cols = [*KEYS, "name", "bandwidth_bps", "time_s", "reached", "n"]
    live = rows[(rows["status"] == "ok") & rows["latest"]] if len(rows) else rows
    if live.empty or "timing_inputs" not in live:
        return pd.DataFrame(columns=cols)
    live = live.assign(setup=live["setup"] if "setup" in live else "")
    names = {
        (e, c, s): (d or display_name(c))
        for e, c, s, d in zip(
            live["entry"], live["compressor"], live["setup"], live.get("display", pd.Series("", index=live.index))
        )
    }
    # a record that never met its target needs no replay: its time-to-target is "never" on every link
    reached = live["reached_target_step"].notna()
    parts = []
    for bw in bandwidths:
        link = Link(bw, latency_s, intra)
        col = f"time_to_target_s@{link.name}"
        timed = pd.concat([remodel(live[reached], link), live[~reached].assign(**{col: math.nan})])
        g = timed.groupby(KEYS, sort=True)[col]
        part = pd.DataFrame({"time_s": g.mean(), "reached": g.count(), "n": g.size()}).reset_index()
        part["bandwidth_bps"] = bw
        parts.append(part)
    out = pd.concat(parts, ignore_index=True)
    out["name"] = [names[k] for k in zip(out["entry"], out["compressor"], out["setup"])]
    return out[cols]


@dataclass(frozen=True)
class Crossover:
    """Where one row starts to beat ``none``: ``bps`` (NaN when there is no single crossing) and the words."""

    entry: str
    compressor: str
    setup: str
    name: str
    bps: float
    text: str


def _crossing(bws: np.ndarray, ratio: np.ndarray) -> float:
    """The highest bandwidth where log(time / none's time) turns negative going down, interpolated."""
    lb, lr = np.log10(bws), np.log10(ratio)
    for i in range(len(bws) - 1, 0, -1):  # from the fastest link down: the first sign change
        if lr[i] >= 0 > lr[i - 1]:
            f = lr[i - 1] / (lr[i - 1] - lr[i])
            return float(10 ** (lb[i - 1] + f * (lb[i] - lb[i - 1])))
    return math.nan


def crossovers(curves: pd.DataFrame) -> list[Crossover]:
    """Each non-baseline row's crossover against its entry's (else any) ``none`` row of the same setup."""
    out: list[Crossover] = []
    if curves.empty:
        return out
    for (entry, comp, setup), g in curves.groupby(KEYS, sort=True):
        if comp == BASELINE:
            continue
        same = curves[(curves["compressor"] == BASELINE) & (curves["setup"] == setup)]
        base = same[same["entry"] == entry] if (same["entry"] == entry).any() else same
        name = str(g["name"].iloc[0])
        if base.empty:
            out.append(Crossover(entry, comp, setup, name, math.nan, "no none baseline of this setup"))
            continue
        b = base.groupby("bandwidth_bps")["time_s"].mean()
        g = g.set_index("bandwidth_bps").sort_index()
        both = pd.DataFrame({"t": g["time_s"], "b": b}).dropna()
        if both.empty:
            words = NEVER if g["time_s"].isna().all() else "none never reaches the target"
            out.append(Crossover(entry, comp, setup, name, math.nan, words))
            continue
        ratio = (both["t"] / both["b"]).to_numpy()
        bws = both.index.to_numpy(dtype=float)
        if (ratio < 1).all():
            text = f"faster than none at every bandwidth from {format_bandwidth(bws[0])} to {format_bandwidth(bws[-1])}"
            out.append(Crossover(entry, comp, setup, name, math.inf, text))
        elif (ratio >= 1).all():
            text = f"never faster than none between {format_bandwidth(bws[0])} and {format_bandwidth(bws[-1])}"
            out.append(Crossover(entry, comp, setup, name, math.nan, text))
        else:
            bps = _crossing(bws, ratio)
            text = f"faster than none below {format_bandwidth(bps)}" if bps == bps else "crosses none more than once"
            out.append(Crossover(entry, comp, setup, name, bps, text))
    return out


def by_payoff(found: list[Crossover]) -> list[Crossover]:
    """Highest crossover first (faster at every bandwidth before all), then by name."""
    return sorted(found, key=lambda c: (-(c.bps if c.bps == c.bps else -1.0), c.name))


def crossover_text(found: list[Crossover], latency_s: float) -> list[str]:
    """The report's lines: one per row, fastest payoff (highest crossover) first."""
    if not found:
        return []
    order = by_payoff(found)
    lat = f"{latency_s * 1e3:.3g} ms" if latency_s >= 1e-3 else f"{latency_s * 1e6:.3g} µs"
    head = f"where compression pays off (time-to-target vs none, modeled from 1 Mbps to 100 Gbps, {lat} latency):"
    never = [c.name for c in order if c.text == NEVER]
    lines = [f"  {c.name}: {c.text}" for c in order if c.text != NEVER]
    return [head, *lines, *([f"  never reach the target: {', '.join(never)}"] if never else [])]
