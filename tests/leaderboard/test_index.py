"""The compact Parquet index: same numbers as loading every record, incremental rebuilds,
details read back only for the rows asked for."""

from __future__ import annotations

import json
import os

import pandas as pd

from leaderboard.frame import to_frame
from leaderboard.index import load_details, load_index
from leaderboard.statistics import aggregate
from leaderboard.submissions import load_all


def _entry(root, lb, name, records):
    d = root / name
    d.mkdir(parents=True)
    (d / "entry.yaml").write_text(f"name: {name}\nsubmitter: someone\ndate: '2026-01-01'\n")
    lb.write_jsonl(d / "results.jsonl", [dict(r, record_id=name[:4] + r["record_id"][4:]) for r in records])
    return d


def test_index_matches_a_full_load_and_rebuilds_only_what_changed(tmp_path, lb):
    root = tmp_path / "records"
    a = _entry(root, lb, "entry-a", lb.make_records(tasks=("cifar10",)))
    _entry(root, lb, "entry-b", lb.make_records(tasks=("shakespeare",)))
    store = lb.write_jsonl(tmp_path / "store.jsonl", lb.make_records(tasks=("cifar10",), compressors=("none",)))
    ix = load_index([str(store)], [str(root)], index_dir=tmp_path / "ix")
    assert len(ix.rebuilt) == 3 and "timing_inputs" not in ix.frame and "curve" not in ix.frame
    records, _ = load_all([str(store)], [str(root)])
    full, light = aggregate(to_frame(records)), aggregate(ix.frame)
    cols = ["task", "compressor", "entry", "n", "metric_mean", "delta", "p_value", "time_to_target_s@1Gbps"]
    key = ["task", "entry", "compressor"]
    pd.testing.assert_frame_equal(
        full[cols].sort_values(key).reset_index(drop=True), light[cols].sort_values(key).reset_index(drop=True)
    )
    assert load_index([str(store)], [str(root)], index_dir=tmp_path / "ix").rebuilt == []
    with (a / "results.jsonl").open("a") as f:  # one entry changes: only it is loaded again
        f.write(json.dumps(dict(lb.make_record("cifar10", "none", 7), record_id="entr" + "9" * 28)) + "\n")
    os.utime(a / "results.jsonl", ns=(1, 2))
    ix2 = load_index([str(store)], [str(root)], index_dir=tmp_path / "ix")
    assert ix2.rebuilt == [str(a)] and len(ix2.frame) == len(ix.frame) + 1


def test_details_come_back_for_the_rows_asked(tmp_path, lb):
    root = tmp_path / "records"
    _entry(root, lb, "entry-a", lb.make_records(tasks=("cifar10",)))
    ix = load_index([], [str(root)], index_dir=tmp_path / "ix")
    rows = ix.frame[ix.frame.compressor == "fp16"]
    shown = load_details(rows)
    assert all(len(c) > 0 for c in shown.curve) and all(p["git_commit"] == "0123abc" for p in shown.provenance)
    assert all(json.loads(t)["microbatches"] == 4 for t in shown.timing_inputs)
    assert list(ix.heavy(rows).timing_inputs) == list(shown.timing_inputs)


def test_problems_are_remembered_and_a_committed_copy_in_the_store_is_dropped(tmp_path, lb):
    root = tmp_path / "records"
    recs = lb.make_records(tasks=("cifar10",), compressors=("none",))
    _entry(root, lb, "entry-a", recs)
    (root / "broken").mkdir()
    store = lb.write_jsonl(tmp_path / "store.jsonl", [dict(r, record_id="entr" + r["record_id"][4:]) for r in recs])
    for _ in range(2):  # the second time from the index
        ix = load_index([str(store)], [str(root)], index_dir=tmp_path / "ix")
        assert any("broken" in p.path for p in ix.problems)
        assert set(ix.frame.entry) == {"entry-a"}  # the store's copies of committed records are not shown twice


def test_the_report_reads_the_index_and_lists_runs_over_links(tmp_path, lb, capsys, monkeypatch):
    from suite.bench.cli import main

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    recs = lb.make_records(tasks=("cifar10",), compressors=("none", "fp16"))
    recs[-1]["network"] = {
        "link": "100mbit",
        "emulated": True,
        "measured": {"step_s": 0.5},
        "modeled": {"as_emulated": {"step_s": 0.45}},
    }
    store = lb.write_jsonl(tmp_path / "store.jsonl", recs)
    assert main(["report", "--results", str(store)]) == 0
    out = capsys.readouterr().out
    assert "fp16" in out and "measured over links" in out and "100mbit" in out


def test_a_cached_index_built_by_other_row_code_is_rebuilt_whole(tmp_path, lb, monkeypatch):
    """A cached index from before a row-layout change (new columns) must not be read as current."""
    import leaderboard.index as index

    root = tmp_path / "records"
    _entry(root, lb, "entry-a", lb.make_records(tasks=("cifar10",)))
    assert len(load_index([], [str(root)], index_dir=tmp_path / "ix").rebuilt) == 1
    assert load_index([], [str(root)], index_dir=tmp_path / "ix").rebuilt == []
    monkeypatch.setattr(index, "_code_hash", lambda: "other-row-code")
    assert len(load_index([], [str(root)], index_dir=tmp_path / "ix").rebuilt) == 1


def _board_with_problems(root, lb):
    """Entries of good records, a bad line among them, a broken entry, and a store: every kind of row and problem."""
    lb.make_records_dir(root / "records")
    a = _entry(root / "records", lb, "entry-a", lb.make_records(tasks=("cifar10",)))
    with (a / "results.jsonl").open("a") as f:
        f.write('{"schema": "mpcbench.record/1", "seed": NaN}\n' + json.dumps({"not": "a record"}) + "\n")
    _entry(root / "records", lb, "entry-b", lb.make_records(tasks=("shakespeare",)))
    store = lb.write_jsonl(root / "store.jsonl", lb.make_records(tasks=("sst2",), compressors=("none", "fp16")))
    return [str(store)], [str(root / "records")]


def test_worker_processes_build_the_index_the_serial_build_builds(tmp_path, lb, monkeypatch):
    """Issue 28: sources loaded in worker processes give the same rows, problems and heavy
    column, in the same order, as loading them here one after another."""
    import leaderboard.index as index

    stores, dirs = _board_with_problems(tmp_path, lb)
    monkeypatch.setenv("MPCBENCH_INDEX_WORKERS", "1")
    serial = load_index(stores, dirs, index_dir=tmp_path / "serial")
    monkeypatch.setenv("MPCBENCH_INDEX_WORKERS", "3")
    with monkeypatch.context() as m:  # here nothing may be loaded: the rows must come from the workers
        m.setattr(index, "_load_source", lambda *a: (_ for _ in ()).throw(AssertionError(f"loaded here: {a}")))
        parallel = load_index(stores, dirs, index_dir=tmp_path / "parallel")
    pd.testing.assert_frame_equal(parallel.frame, serial.frame)
    assert parallel.problems == serial.problems and len(serial.problems) >= 4
    assert parallel.rebuilt == serial.rebuilt and len(serial.rebuilt) == 7
    pd.testing.assert_frame_equal(parallel.heavy(parallel.frame), serial.heavy(serial.frame))
    assert all(json.loads(t)["microbatches"] == 4 for t in parallel.heavy(parallel.frame).timing_inputs if t)


def test_a_worker_that_dies_leaves_its_sources_to_this_process(tmp_path, lb, monkeypatch):
    import leaderboard.index as index

    stores, dirs = _board_with_problems(tmp_path, lb)
    monkeypatch.setenv("MPCBENCH_INDEX_WORKERS", "1")
    serial = load_index(stores, dirs, index_dir=tmp_path / "serial")
    monkeypatch.setenv("MPCBENCH_INDEX_WORKERS", "2")
    monkeypatch.setattr(index, "_WORKER", "import sys; sys.exit(3)")
    rescued = load_index(stores, dirs, index_dir=tmp_path / "rescued")
    pd.testing.assert_frame_equal(rescued.frame, serial.frame)
    assert rescued.problems == serial.problems


def test_the_heavy_column_is_kept_apart_and_follows_incremental_rebuilds(tmp_path, lb):
    import pyarrow.parquet as pq

    from leaderboard.index import HEAVY_FILE

    root = tmp_path / "records"
    a = _entry(root, lb, "entry-a", lb.make_records(tasks=("cifar10",)))
    _entry(root, lb, "entry-b", lb.make_records(tasks=("shakespeare",)))
    ix = load_index([], [str(root)], index_dir=tmp_path / "ix")
    assert "timing_inputs" not in pq.read_schema(ix.path).names  # the light file holds no heavy column
    before = ix.heavy(ix.frame)
    assert (before.timing_inputs.str.len() > 100).all()
    with (a / "results.jsonl").open("a") as f:
        f.write(json.dumps(dict(lb.make_record("cifar10", "none", 7), record_id="entr" + "9" * 28)) + "\n")
    os.utime(a / "results.jsonl", ns=(1, 2))
    ix2 = load_index([], [str(root)], index_dir=tmp_path / "ix")
    assert ix2.rebuilt == [str(a)]
    after = ix2.heavy(ix2.frame)
    assert pq.read_metadata(tmp_path / "ix" / HEAVY_FILE).num_rows == len(ix2.frame) == len(ix.frame) + 1
    kept = after[after.record_id.isin(before.record_id)].set_index(["source", "record_id"]).timing_inputs
    pd.testing.assert_series_equal(
        kept.sort_index(), before.set_index(["source", "record_id"]).timing_inputs.sort_index()
    )
    assert (after.timing_inputs.str.len() > 100).all()


def test_the_lines_holding_a_record_id_are_found_by_one_scan():
    """``_lines_with`` (one regex scan for the rows' ids) gives the lines a split-and-search gives."""
    import random

    from leaderboard.index import _lines_with

    rnd = random.Random(0)
    for _ in range(2000):
        data = bytes(rnd.choice(b"ab\n") for _ in range(rnd.randint(0, 40)))
        needles = [bytes(rnd.choice(b"ab\n" if rnd.random() < 0.05 else b"ab") for _ in range(rnd.randint(0, 3)))]
        needles += [bytes(rnd.choice(b"ab") for _ in range(rnd.randint(1, 3))) for _ in range(rnd.randint(0, 2))]
        want = [line for line in data.split(b"\n") if any(n in line for n in needles)]
        assert list(_lines_with(data, needles)) == want, (data, needles)


def test_the_frame_of_a_fresh_build_is_the_frame_read_back(tmp_path, lb):
    """A build hands over the table it wrote; the next load reads it from disk: the same frame."""
    stores, dirs = _board_with_problems(tmp_path, lb)
    fresh = load_index(stores, dirs, index_dir=tmp_path / "ix")
    again = load_index(stores, dirs, index_dir=tmp_path / "ix")
    assert len(fresh.rebuilt) == 7 and again.rebuilt == []
    pd.testing.assert_frame_equal(fresh.frame, again.frame)
    assert fresh.problems == again.problems


def test_output_written_in_a_worker_does_not_reach_the_results(tmp_path, lb, monkeypatch):
    """A print or a C library writing to file descriptor 1 inside a worker goes to stderr, not
    into the pickled results the page process reads."""
    import leaderboard.index as index

    stores, dirs = _board_with_problems(tmp_path, lb)
    monkeypatch.setenv("MPCBENCH_INDEX_WORKERS", "1")
    serial = load_index(stores, dirs, index_dir=tmp_path / "serial")
    monkeypatch.setenv("MPCBENCH_INDEX_WORKERS", "2")
    noisy = (
        "import os, pickle, sys; path, tasks = pickle.load(sys.stdin.buffer); sys.path[:0] = path; "
        "import leaderboard.index as ix; real = ix._load_source; "
        "ix._load_source = lambda *a: (os.write(1, b'noise\\n'), print('more noise'), real(*a))[2]; ix._serve(tasks)"
    )
    monkeypatch.setattr(index, "_WORKER", noisy)
    with monkeypatch.context() as m:  # the rows must come from the workers, intact
        m.setattr(index, "_load_source", lambda *a: (_ for _ in ()).throw(AssertionError(f"loaded here: {a}")))
        parallel = load_index(stores, dirs, index_dir=tmp_path / "parallel")
    pd.testing.assert_frame_equal(parallel.frame, serial.frame)
    assert parallel.problems == serial.problems
