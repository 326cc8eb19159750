"""Issue 23, item 7: bounded costs and inert text for untrusted records, one test per attack."""

from __future__ import annotations

import copy
import json

import pytest

from leaderboard.submissions import load_entries
from suite.results.records import MAX_TIMING_WORK, RecordError, validate_record


def _baseline_record() -> dict:
    from pathlib import Path

    path = next((Path(__file__).resolve().parents[2] / "records" / "mpcbench-baselines").glob("*.jsonl"))
    return json.loads(path.open().readline())


def test_oversized_timing_inputs_are_refused_before_any_simulation(tmp_path, lb):
    """Before: one 2 MB record with oversized timing_inputs passed validate, then stalled index building
    and report (scaling to hours of CPU)."""
    rec = _baseline_record()
    validate_record(copy.deepcopy(rec))  # the committed baselines are well inside the caps
    big = copy.deepcopy(rec)
    ti = big["timing_inputs"]
    ti["schedule"] = [[a for _ in range(100) for a in rank] for rank in ti["schedule"]]  # 100x the actions
    ti["steps"] = ti["steps"] * 100
    ti["counts"] = [1] * len(ti["steps"])
    with pytest.raises(RecordError, match="simulation budget") as e:
        validate_record(big)
    assert "\n" not in str(e.value) and len(ti["steps"]) * 3200 > MAX_TIMING_WORK
    for bad, why in (
        ({"schedule": [["0F0"]] * 300}, "ranks"),
        ({"schedule": [["0F0"] * 5000]}, "actions"),
        ({"steps": [{"links": [{}] * 300, "dp": []}]}, "links"),
        ({"counts": [1, 2, 3]}, "one count per step load"),
    ):
        forged = copy.deepcopy(rec)
        forged["timing_inputs"].update(bad)
        with pytest.raises(RecordError, match=why):
            validate_record(forged)
    # in an entry: that record is one problem line, the good entry loads
    good = lb.make_records(tasks=("cifar10",), compressors=("none",), seeds=(0,))
    lb.write_entry(tmp_path, "good", good)
    lb.write_entry(tmp_path, "huge-timing", [big])
    records, problems = load_entries(tmp_path)
    assert {r["entry"] for r in records} == {"good"}
    [p] = problems
    assert "simulation budget" in p.reason


def test_blank_lines_are_capped(tmp_path, lb):
    """Before: 64 MiB of blank lines cost 9 s of CPU and reported OK."""
    d = lb.write_entry(tmp_path, "blank", [])
    with open(d / "results.jsonl", "w") as f:
        f.write("\n" * (4 * 2**20))  # 4 Mi blank lines: the cap stops reading after the first thousand
        f.write(json.dumps(lb.make_record("cifar10", "fp16", 0)) + "\n")
    records, problems = load_entries(tmp_path)
    assert records == [] and any("blank lines" in p.reason for p in problems)


@pytest.mark.parametrize(
    "spec",
    ["topk(ratio=" + "1+" * 4990 + "1)", "topk(ratio=" + "-" * 4000 + "1)", "quant(bits=" + "not " * 2400 + "1)"],
)
def test_a_deep_spec_without_parentheses_is_one_line(spec):
    """Before: `topk(ratio=1+1+...)` gave a RecursionError traceback in run, validate and pytest collection."""
    from compressors.api import CompressorError
    from compressors.spec import parse_spec

    with pytest.raises(CompressorError) as e:
        parse_spec(spec)
    assert "\n" not in str(e.value) and len(str(e.value)) < 400


def test_a_deep_spec_in_a_record_is_one_problem(tmp_path, lb):
    spec = "topk(ratio=" + "1+" * 4990 + "1)"
    lb.write_entry(tmp_path, "good", lb.make_records(tasks=("cifar10",), compressors=("none",), seeds=(0,)))
    lb.write_entry(tmp_path, "deep", [lb.make_record("cifar10", spec[:1900], 0)])
    records, problems = load_entries(tmp_path)
    assert {r["entry"] for r in records} >= {"good"}
    assert all("\n" not in p.reason for p in problems)


def test_an_entrys_target_does_not_change_another_entrys_view(lb):
    """Before: the first row's target was the view's target, whatever entry it came from."""
    import pandas as pd

    from leaderboard.frame import view_target

    rows = pd.DataFrame(
        {
            "entry": ["0-attacker", "mpcbench-baselines", "mpcbench-baselines", "other"],
            "maintainers": [False, True, True, False],
            "target": [0.01, 0.45, 0.45, 0.5],
        }
    )
    assert view_target(rows) == 0.45
    third = rows[~rows["maintainers"]]
    assert view_target(pd.concat([third, third.assign(entry="x2", target=0.5)])) == 0.5  # one vote per entry


def test_markdown_report_escapes_record_text_in_headings(tmp_path, lb, capsys):
    """Before: `report --format markdown` wrote an entry's text unescaped into the view headings."""
    from suite.bench.cli import main

    evil = "tinyx <script>alert(1)</script> *b*"
    recs = [lb.make_record(evil, "none", 0), lb.make_record(evil, "fp16", 0)]
    store = lb.write_jsonl(tmp_path / "store.jsonl", recs)
    assert main(["report", "--results", str(store), "--format", "markdown"]) in (0, 1)
    out = capsys.readouterr().out
    assert "<script>" not in out


def test_remodeling_has_a_per_entry_budget(monkeypatch):
    """Past the entry's simulation budget its further rows are NaN with 'skipped: too large'; other entries go on."""
    import pandas as pd

    from leaderboard import networks
    from leaderboard.networks import Link

    rec = _baseline_record()
    timing = json.dumps(rec["timing_inputs"])
    frame = pd.DataFrame(
        {
            "entry": ["hog", "hog", "hog", "fair"],
            "timing_inputs": [timing] * 4,
            "reached_target_step": [rec["reached_target_step"]] * 4,
            "status": ["ok"] * 4,
            "latest": [True] * 4,
        }
    )
    monkeypatch.setattr(networks, "ENTRY_REMODEL_BUDGET_S", 0.0)  # every entry is over budget after one row
    networks._step_times.cache_clear()
    link = Link(1e9, 1e-4)
    out = networks.remodel(frame, link)
    assert list(out["remodel_note"]) == ["", "skipped: too large", "skipped: too large", ""]
    col = f"total_s@{link.name}"
    assert out[col].notna().tolist() == [True, False, False, True]
