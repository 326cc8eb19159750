"""What a setup is called and which the page opens on; the overview across tasks; the report's task text once."""

from __future__ import annotations

import io

import pandas as pd
import pytest

from leaderboard.ranking import aggregate, to_frame
from leaderboard.report import ReportOptions, write_report
from leaderboard.views import overview_table, search_overview, setup_title, setups_by_size


@pytest.mark.parametrize(
    "setup, title",
    [
        ("4 stages, 1f1b, M=4, single, cpu", "pipeline, 4 stages (1f1b, M=4, single, cpu)"),
        ("1 stage, 1f1b, M=4, single", "single process (1f1b, M=4, single)"),
        ("2 stages, gpipe, M=4, cpu, tp=2", "tensor parallel tp=2, 2 stages (gpipe, M=4, cpu)"),
        (
            "1 stage, 1f1b, M=1, cpu, dp=4, sync outer(h=8)",
            "4 replicas, data parallel (1f1b, M=1, cpu, sync outer(h=8))",
        ),
        ("", ""),
    ],
)
def test_a_setup_says_what_it_is_before_its_details(setup, title):
    assert setup_title(setup) == title


def test_the_setup_most_compressors_ran_comes_first_not_the_first_as_text():
    rows = pd.DataFrame(
        {
            "setup": ["1 stage, 1f1b"] * 2 + ["4 stages, 1f1b"] * 5 + ["2 stages, cpu, tp=2"] * 5,
            "compressor": ["none", "fp16", "a", "b", "c", "d", "none", "a", "b", "c", "d", "none"],
        }
    )
    # 5 compressors each in the pipeline and tp setups: the pipeline first; the 1-stage run of 2 last
    assert setups_by_size(rows) == ["4 stages, 1f1b", "2 stages, cpu, tp=2", "1 stage, 1f1b"]


def test_overview_has_a_line_per_compressor_with_each_tasks_delta_and_the_score(lb):
    from leaderboard.score import benchmark_score

    agg = aggregate(to_frame(lb.make_records()))
    table = overview_table(agg, benchmark_score(agg, tier="quick").table)
    assert list(table.columns) == ["compressor", "entry", "cifar10 Δ accuracy", "shakespeare Δ val_loss", "score"]
    assert set(table.compressor) == {"none", "fp16", "quant(bits=4)", "topk(ratio=0.1)"}
    assert table.set_index("compressor").loc["none", "cifar10 Δ accuracy"] == "baseline"
    scores = [float(v) for v in table.score]
    assert scores == sorted(scores, reverse=True)
    assert list(search_overview(table, " Quant ").compressor) == ["quant(bits=4)"]
    assert search_overview(table, "").equals(table)


def test_the_report_prints_a_tasks_description_once_not_per_setup(lb):
    recs = lb.make_records(tasks=("cifar10",))
    for r in lb.make_records(tasks=("cifar10",), compressors=("none", "fp16")):
        r = dict(r, record_id="tp-" + r["record_id"][3:], config={**r["config"], "tp": 2})
        recs.append(r)
    out = io.StringIO()
    write_report(to_frame(recs), ReportOptions(), out)
    text = out.getvalue()
    assert text.count("== cifar10 / quick") == 2, text[:2000]
    assert text.count("Metric:") == 1
    first, second = text.index("== cifar10 / quick"), text.rindex("== cifar10 / quick")
    assert "pipeline, 3 stages" in text[first : first + 200] and "tensor parallel tp=2" in text[second : second + 200]
