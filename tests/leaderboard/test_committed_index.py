"""The committed index next to the records (issue 28): the first open of a records folder
takes an entry's rows from it only while the entry's files are the ones it was built from,
and the one in this repository is up to date with ``records/``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from leaderboard import index as lbindex
from leaderboard.index import COMMITTED_INDEX, committed_index_status, load_index, write_committed_index

REPO = Path(__file__).resolve().parents[2]
REGENERATE = "python -m leaderboard.index records"


def test_the_committed_index_matches_the_committed_records():
    """Fails when a record file under records/ changed, appeared or went away since the index
    was built (or the index layout / network model changed): regenerate it."""
    status = committed_index_status(REPO / "records")
    stale = {entry: why for entry, why in status.items() if why}
    assert status and not stale, f"records/{COMMITTED_INDEX[0]} is stale: {stale}; run `{REGENERATE}` and commit it"


def _entry(root, lb, name, records):
    d = root / name
    d.mkdir(parents=True)
    (d / "entry.yaml").write_text(f"name: {name}\nsubmitter: someone\ndate: '2026-01-01'\n")
    lb.write_jsonl(d / "results.jsonl", [dict(r, record_id=name[:4] + r["record_id"][4:]) for r in records])
    return d


def _no_loading(monkeypatch):
    """Loading an entry from its files fails: only committed rows can be used."""

    def refuse(kind, path, sig):
        raise AssertionError(f"{path} was loaded from its files")

    monkeypatch.setattr(lbindex, "_load_source", refuse)


def test_first_open_uses_committed_rows_equal_to_a_full_load(tmp_path, lb, monkeypatch):
    root = tmp_path / "records"
    _entry(root, lb, "entry-a", lb.make_records(tasks=("cifar10",)))
    _entry(root, lb, "entry-b", lb.make_records(tasks=("shakespeare",)))
    full = load_index([], [str(root)], index_dir=tmp_path / "full").frame
    write_committed_index(root)
    assert all(why == "" for why in committed_index_status(root).values())
    with monkeypatch.context() as m:
        _no_loading(m)
        fast = load_index([], [str(root)], index_dir=tmp_path / "fast")
    pd.testing.assert_frame_equal(fast.frame, full)
    moved = tmp_path / "elsewhere"  # the committed rows do not depend on where the checkout is
    shutil.copytree(root, moved)
    with monkeypatch.context() as m:
        _no_loading(m)
        there = load_index([], [str(moved)], index_dir=tmp_path / "there").frame
    assert set(there.source) == {str(moved / "entry-a"), str(moved / "entry-b")}
    pd.testing.assert_frame_equal(there.drop(columns="source"), full.drop(columns="source"))


@pytest.mark.parametrize("change", ["edited", "new_entry", "model_version", "corrupt"])
def test_a_stale_committed_index_is_rebuilt_never_used(tmp_path, lb, change):
    root = tmp_path / "records"
    a = _entry(root, lb, "entry-a", lb.make_records(tasks=("cifar10",)))
    write_committed_index(root)
    if change == "edited":  # same size and time would not matter: the content is hashed
        recs = [json.loads(line) for line in (a / "results.jsonl").read_text().splitlines()]
        recs[0]["final_metric"] = 0.123456
        lb.write_jsonl(a / "results.jsonl", recs)
    elif change == "new_entry":
        _entry(root, lb, "entry-b", lb.make_records(tasks=("shakespeare",)))
    elif change == "model_version":
        m = json.loads((root / COMMITTED_INDEX[1]).read_text())
        m["model_version"] = -1
        (root / COMMITTED_INDEX[1]).write_text(json.dumps(m))
    else:
        (root / COMMITTED_INDEX[0]).write_bytes(b"not parquet")
    if change != "corrupt":
        assert any(committed_index_status(root).values())
    full = load_index([], [str(root)], index_dir=tmp_path / "full", committed=False).frame
    got = load_index([], [str(root)], index_dir=tmp_path / "cold")
    pd.testing.assert_frame_equal(got.frame, full)
    if change == "edited":
        assert 0.123456 in set(got.frame.final_metric)
    if change == "new_entry":  # the unchanged entry still comes from the committed rows
        assert got.rebuilt == [str(root / "entry-a"), str(root / "entry-b")]
