"""Time-to-target against bandwidth and the crossover against none (leaderboard/crossover.py)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from leaderboard.crossover import SWEEP_BPS, by_payoff, crossover_text, crossovers, time_to_target_by_bandwidth
from leaderboard.frame import to_frame

BWS = [1e6, 1e7, 1e8]


def _curves(times: dict[str, list[float]]) -> pd.DataFrame:
    rows = [
        {"entry": "e", "compressor": c, "setup": "s", "name": c, "bandwidth_bps": bw, "time_s": t, "reached": 1, "n": 1}
        for c, ts in times.items()
        for bw, t in zip(BWS, ts)
    ]
    return pd.DataFrame(rows)


def test_the_crossover_is_where_the_compressor_stops_beating_none():
    found = {
        c.compressor: c
        for c in crossovers(
            _curves(
                {
                    "none": [40.0, 20.0, 10.0],
                    "crosses": [10.0, 20.0, 40.0],  # time ratio 0.25, 1, 4: equal to none at 10 Mbps
                    "always": [5.0, 5.0, 5.0],
                    "never": [50.0, 30.0, 20.0],
                    "stuck": [math.nan] * 3,
                }
            )
        )
    }
    assert set(found) == {"crosses", "always", "never", "stuck"}  # none is the reference, not a row
    assert found["crosses"].bps == pytest.approx(1e7) and found["crosses"].text == "faster than none below 10Mbps"
    assert found["always"].bps == math.inf and "at every bandwidth" in found["always"].text
    assert math.isnan(found["never"].bps) and found["never"].text.startswith("never faster than none")
    assert found["stuck"].text == "never reaches the target"
    assert [c.compressor for c in by_payoff(list(found.values()))][:2] == ["always", "crosses"]
    lines = crossover_text(list(found.values()), 5e-4)
    assert lines[0].endswith("500 µs latency):") and lines[-1] == "  never reach the target: stuck"


def test_without_a_none_of_the_same_setup_there_is_no_crossover():
    curves = _curves({"none": [40.0, 20.0, 10.0], "x": [10.0, 20.0, 40.0]})
    curves.loc[curves["compressor"] == "x", "setup"] = "tp=2"
    (only,) = crossovers(curves)
    assert only.text == "no none baseline of this setup" and math.isnan(only.bps)


def test_a_slower_link_costs_the_uncompressed_run_more(lb):
    """On the fixture records (modeled from their stored inputs): every row's time-to-target grows as the
    bandwidth falls, and fewer bytes make it grow less."""
    rows = to_frame(lb.make_records(tasks=("cifar10",), compressors=("none", "quant(bits=4)")), details=False)
    curves = time_to_target_by_bandwidth(rows, 5e-4)
    assert set(curves["bandwidth_bps"]) == set(SWEEP_BPS) and (curves["n"] == 3).all()
    t = curves.pivot_table(index="bandwidth_bps", columns="compressor", values="time_s")
    assert (t.diff().dropna() <= 1e-9).all().all()  # monotone: a faster link is never slower
    slow, fast = t.index.min(), t.index.max()
    assert t.loc[slow, "none"] / t.loc[fast, "none"] > t.loc[slow, "quant(bits=4)"] / t.loc[fast, "quant(bits=4)"]
