"""The entry model (issue 35): one row key and one latest-record rule, used by the board and the verifier."""

from __future__ import annotations

from suite.results.entries import ROW_FIELDS, RowKey, latest_flags, row_id, row_key, row_keys, rows_of


def _rec(seed=0, created="2026-01-01", cell="k0", status="ok", run=True, **kw):
    r = {
        "task": "cifar10",
        "tier": "quick",
        "entry": "e",
        "compressor": "fp16",
        "seed": seed,
        "created": created,
        "cell_key": cell,
        "status": status,
        "config": {"stages": None, "mode": "single"},
        "provenance": {"machine": {"cpu": "Xeon", "cpu_count": 2}},
    }
    if run:
        r["run"] = {"n_stages": 3, "schedule": "1f1b", "microbatches": 4, "mode": "single", "device": "cpu"}
    r.update(kw)
    return r


def test_the_board_groups_by_the_entry_models_row_key():
    from leaderboard.statistics import GROUP

    assert GROUP == list(ROW_FIELDS) == list(RowKey.__dataclass_fields__)


def test_a_failed_record_without_run_joins_the_row_of_its_config():
    ok, failed = _rec(), _rec(seed=1, cell="k1", status="failed", run=False)
    assert row_key(failed) != row_key(ok)
    assert row_keys([ok, failed]) == [row_key(ok), row_key(ok)]


def test_a_newer_record_of_the_same_seed_or_cell_supersedes_the_older():
    old, new = _rec(created="2026-01-01"), _rec(created="2026-01-02", cell="k-other")
    other_seed = _rec(seed=1, cell="k1")
    rerun = _rec(seed=2, cell="k2", created="2026-01-03")
    assert latest_flags([new, old, other_seed, rerun]) == [True, False, True, True]
    rows = rows_of([new, old, other_seed, rerun])
    assert list(rows.values()) == [[0, 2, 3]]


def test_ok_only_rows_leave_failed_records_out_and_ids_are_stable():
    rows = rows_of([_rec(), _rec(seed=1, cell="k1", status="failed")], ok_only=True)
    (key,) = rows
    assert rows[key] == [0] and row_id(key) == row_id(RowKey.from_list(key.to_list())) and len(row_id(key)) == 16


def test_the_machine_class_is_part_of_the_row():
    a, b = _rec(), _rec(seed=1, cell="k1", provenance={"machine": {"cpu": "EPYC", "cpu_count": 2}})
    assert row_key(a).machine != row_key(b).machine and len(rows_of([a, b])) == 2


def test_one_seed_on_two_machine_classes_is_two_rows_but_one_cell_rerun_anywhere_replaces_it():
    """A seed recorded on two classes under two cell keys (same resolved setup) is one record in each
    class's row; the same cell re-run on another class supersedes the older record (the cell rule is per
    entry and cell, as a store's resume is: docs/reliability.md, section 9)."""
    a = _rec(created="2026-01-01")
    b = _rec(created="2026-01-02", cell="k-other", provenance={"machine": {"cpu": "EPYC", "cpu_count": 2}})
    assert latest_flags([a, b]) == [True, True] and len(rows_of([a, b])) == 2
    same_cell = dict(b, cell_key=a["cell_key"])
    assert latest_flags([a, same_cell]) == [False, True]
