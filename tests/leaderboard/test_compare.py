"""``mpcbench compare STORE [--fail-above DELTA]``: a store's rows against the maintainers' rows (an author's CI)."""

from __future__ import annotations

import pytest

from leaderboard.compare import compare
from leaderboard.frame import MAINTAINERS
from leaderboard.index import load_index
from suite.bench.cli import main


@pytest.fixture
def staged(tmp_path, monkeypatch, lb):
    """records/mpcbench-baselines (none, fp16 at 3 seeds) and a store of quant(bits=4) (Δ -0.01
    accuracy against none) and fp16 (a reproduction of the maintainers' row) at 3 seeds."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the index cache: this test's own
    records = tmp_path / "records"
    lb.write_entry(records, MAINTAINERS, lb.make_records(tasks=("cifar10",), compressors=("none", "fp16")))
    mine = [
        lb.make_record("cifar10", c, s, record_id=f"mine-{c}-{s}") for c in ("quant(bits=4)", "fp16") for s in (0, 1, 2)
    ]
    store = lb.write_jsonl(tmp_path / "mine.jsonl", mine)
    return store, records


def test_compare_sets_each_row_against_the_maintainers_same_compressor_else_their_none(staged):
    store, records = staged
    result = compare(
        load_index([str(store)], []).frame, load_index([], [str(records)]).frame, network="1Gbps", fail_above=0.02
    )
    rows = {r["compressor"]: r for r in result.table.to_dict("records")}
    assert set(rows) == {"quant(bits=4)", "fp16"} and not result.failed and not result.unmatched
    quant, fp16 = rows["quant(bits=4)"], rows["fp16"]
    assert quant["vs maintainers'"] == "none" and fp16["vs maintainers'"] == "fp16"
    assert float(quant["Δ"]) == pytest.approx(-0.01, abs=0.006) and quant["test"].startswith("*")
    assert quant["verdict"] == "ok" and "(n=3)" in quant["yours"] and "(n=3)" in quant["theirs"]
    assert " s / " in quant["time-to-target @ 1Gbps"] and " / " in quant["ratio yours / theirs"]


def test_compare_cli_passes_under_the_threshold_and_fails_past_it(staged, capsys):
    store, records = staged
    assert main(["compare", str(store), "--records", str(records), "--fail-above", "0.02"]) == 0
    out = capsys.readouterr().out
    assert "quant(bits=4)" in out and "FAIL" not in out
    assert main(["compare", str(store), "--records", str(records), "--fail-above", "0.005"]) == 1
    out = capsys.readouterr().out
    assert "FAIL: cifar10/quick quant(bits=4): -0.01" in out and "FAIL: cifar10/quick fp16" not in out


def test_compare_bad_input_is_one_line(staged, tmp_path, capsys, lb):
    store, records = staged
    cases = {
        (str(tmp_path / "nope.jsonl"),): "no such results store",
        (str(store), "--records", str(tmp_path)): "no mpcbench-baselines/ folder",
        (str(store), "--records", str(records), "--network", "5Gbps"): "unknown network '5Gbps'",
        (str(store), "--records", str(records), "--fail-above", "-1"): "--fail-above must be a non-negative",
    }
    other = lb.write_jsonl(tmp_path / "other.jsonl", [lb.make_record("shakespeare", "fp16", 0, record_id="x")])
    cases[(str(other), "--records", str(records))] = "no row has a maintainers' row of the same task, tier and setup"
    for argv, words in cases.items():
        assert main(["compare", *argv]) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("mpcbench: error: ") and words in err[0], err
