"""Issue 35, class 4: nothing derived is trusted. The index is a local cache keyed by what the
record files hold; a derived file in a records folder (the old committed index) changes nothing;
re-modeling older records has a budget on every path that builds rows."""

from __future__ import annotations

import hashlib
import json
import math
import os

import pyarrow as pa
import pyarrow.parquet as pq

from leaderboard import frame as frame_mod
from leaderboard import index as index_mod
from leaderboard.frame import to_frame
from leaderboard.index import load_index
from leaderboard.submissions import load_entry
from suite.results.network import MAX_MODEL_COST, MODEL_VERSION
from suite.results.time_model import TIME_MODEL_VERSION


def _entry(root, lb, name, records):
    d = root / name
    d.mkdir(parents=True)
    (d / "entry.yaml").write_text(f"name: {name}\nsubmitter: someone\ndate: '2026-01-01'\n")
    lb.write_jsonl(d / "results.jsonl", records)
    return d


def test_a_derived_index_file_in_the_records_folder_cannot_change_the_board(tmp_path, lb):
    """The attack on ed5307d: a pull request edits records/leaderboard-index.* (rows and a manifest
    whose file hashes match): the board showed its numbers. Now no such file is read."""
    root = tmp_path / "records"
    d = _entry(root, lb, "mpcbench-baselines", lb.make_records(tasks=("cifar10",), compressors=("none", "fp16")))
    records, _ = load_entry(d)
    forged = to_frame(records, details=False).assign(_entry=d.name)
    forged["final_metric"] = 0.10  # the maintainers' rows sunk
    hashes = {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(d.iterdir())}
    versions = {"version": index_mod.INDEX_VERSION, "model_version": MODEL_VERSION, "code": index_mod._code_hash()}
    pq.write_table(pa.Table.from_pandas(forged, preserve_index=False), root / "leaderboard-index.parquet")
    (root / "leaderboard-index.json").write_text(
        json.dumps({**versions, "entries": {d.name: {"files": hashes, "problems": []}}})
    )
    shown = load_index([], [str(root)], index_dir=tmp_path / "ix").frame
    assert len(shown) == len(records)
    assert not (shown["final_metric"] == 0.10).any()
    assert sorted(shown["final_metric"]) == sorted(r["final_metric"] for r in records)


def test_the_cache_is_keyed_by_file_contents_not_times(tmp_path, lb):
    """A record file changed in place with the same size and modification time is read again."""
    root = tmp_path / "records"
    d = _entry(root, lb, "entry-a", lb.make_records(tasks=("cifar10",), compressors=("none",)))
    f = d / "results.jsonl"
    load_index([], [str(root)], index_dir=tmp_path / "ix")
    st = f.stat()
    text = f.read_text()
    old = json.dumps(json.loads(text.splitlines()[0])["final_metric"])
    new = f"{float(old) + 0.001:.{max(1, len(old.split('.')[-1]))}f}"[: len(old)]
    assert len(new) == len(old) and new != old
    f.write_text(text.replace(old, new, 1))
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert f.stat().st_size == st.st_size
    ix = load_index([], [str(root)], index_dir=tmp_path / "ix")
    assert ix.rebuilt == [str(d)]


def _old_record(lb, steps: int, seed: int = 0):
    """A valid record of an older network model whose inputs ask for ``steps`` distinct step loads."""
    r = lb.make_record("cifar10", "fp16", seed, model_version=MODEL_VERSION - 1)
    t = r["timing_inputs"]
    link = t["steps"][0]["links"][0]
    t["steps"] = [{"links": [dict(link, fwd_bytes=link["fwd_bytes"] + i), link], "dp": []} for i in range(steps)]
    t["counts"] = [1] * steps
    return r


def test_remodeling_inputs_over_the_cost_cap_is_refused_without_simulating(lb, monkeypatch):
    calls = []
    monkeypatch.setattr(frame_mod, "_remodel", lambda *a: calls.append(a) or {})
    budget = frame_mod.RemodelBudget()
    r = _old_record(lb, 8000)
    # the board simulates at most BOARD_LOADS distinct loads: a cap this low refuses even those
    monkeypatch.setattr(frame_mod.model, "MAX_MODEL_COST", 100)
    inputs = frame_mod.model.TimingInputs.from_dict(frame_mod.priced_inputs(r)[0])
    assert frame_mod.model.model_cost(inputs, len(r["modeled"])) > frame_mod.model.MAX_MODEL_COST > 0
    assert MAX_MODEL_COST > 100
    row = to_frame([r], budget=budget).iloc[0]
    assert math.isnan(row["model_version"]) and budget.skipped == 1 and not calls  # nothing was simulated


def test_remodeling_stops_when_the_sources_budget_is_spent(lb):
    budget = frame_mod.RemodelBudget(seconds=0.0)
    out = to_frame([_old_record(lb, 2, seed=s) for s in range(3)], budget=budget)
    assert out["model_version"].isna().all() and budget.skipped == 3
    fresh = to_frame([_old_record(lb, 2, seed=9)], budget=frame_mod.RemodelBudget())
    assert fresh["model_version"].iloc[0] == TIME_MODEL_VERSION
