"""The link each entry needs (leaderboard.bandwidth): table, units, report text."""

from __future__ import annotations

import io
import math

import pandas as pd
import pytest

from leaderboard.bandwidth import bandwidth_table, display, format_bps, record_bandwidths, write_bandwidth
from suite.results.network import ActionCost, DPLoad, StageCost, StepLoad, TimingInputs


def _inputs(nbytes: float, h: int = 1) -> dict:
    stage = StageCost({"F": ActionCost(0, 0.1, 0), "B": ActionCost(0, 0.2, 0)})
    sync = StepLoad((), (DPLoad(allreduce_bytes=nbytes, allreduce_ops=1),))
    steps, counts = ([sync], [1]) if h == 1 else ([StepLoad((), (DPLoad(),)), sync], [h - 1, 1])
    return TimingInputs([["0F0", "0B0"]], [stage], steps, microbatches=1, replicas=2, counts=counts).to_dict()


def _row(compressor: str, seed: int, nbytes: float, h: int = 1, metric: float = 1.5) -> dict:
    return dict(
        task="shakespeare", tier="quick", compressor=compressor, setup="1 stage, dp=2", seed=seed, status="ok",
        latest=True, metric_name="val_loss", final_metric=metric, bytes_per_step_total=nbytes / h,
        ratio_total=1e6 / nbytes, compress_s=0.002, timing_inputs=_inputs(nbytes, h),
    )  # fmt: skip


def test_table_gives_each_entry_its_link_and_the_outer_loop_needs_h_times_less():
    rows = pd.DataFrame(
        [_row("none", s, 1e6) for s in range(3)] + [_row("outer", s, 1e6, h=10, metric=1.6) for s in range(2)]
    )
    t = bandwidth_table(rows).set_index("compressor")
    assert t.loc["none", "seeds"] == 3 and t.loc["outer", "seeds"] == 2
    assert t.loc["none", "perplexity"] == pytest.approx(math.exp(1.5))
    # closed form: 8 N u / (h c (1 - u)), c = 0.3 s
    assert t.loc["none", "link_50"] == pytest.approx(8e6 * 0.5 / (0.3 * 0.5), rel=1e-6)
    assert t.loc["outer", "link_90"] == pytest.approx(t.loc["none", "link_90"] / 10, rel=1e-6)
    assert "intra_50" not in t  # no tensor-parallel traffic anywhere
    shown = display(t.reset_index())
    assert shown.loc[0, "link 50%"].endswith("Mbit/s") and shown.loc[0, "code ms/step"] == "2.00"


def test_units_and_the_two_special_values():
    assert format_bps(26.7e6) == "26.7 Mbit/s" and format_bps(2.4e12) == "2.4 Tbit/s"
    assert format_bps(0.0) == "none needed" and format_bps(math.inf) == "unreachable" and format_bps(math.nan) == "-"
    assert record_bandwidths("") == {} and record_bandwidths(None) == {}


def test_report_text_names_the_task_and_states_what_it_models():
    out = io.StringIO()
    write_bandwidth(pd.DataFrame([_row("none", 0, 1e6)]), "text", out)
    text = out.getvalue()
    assert "compute utilization" in text and "== shakespeare / quick ==" in text and "link 99%" in text
    out = io.StringIO()
    write_bandwidth(pd.DataFrame([_row("none", 0, 1e6)]), "csv", out)
    assert out.getvalue().splitlines()[0].startswith("task,tier,compressor,setup,seeds")
