"""Issue 12's attacks on the submission loader, one test each (A1-A8 of docs/reliability.md section 5).

Every test builds a hostile entry next to a good one and checks that the hostile part is refused
with one line naming it while every other entry still loads. Each failed on the loader before the fix
(an uncaught exception, seconds and gigabytes of work, a forged row, or an impossible value ranked).
"""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest

from leaderboard import submissions
from leaderboard.ranking import aggregate, to_frame
from leaderboard.submissions import load_entries

BASE = {"name": "x", "submitter": "y"}


def _entry_yaml(d: Path, text: str) -> None:
    (d / "entry.yaml").write_text(text)


def _good(lb, root: Path) -> list[dict]:
    recs = lb.make_records(tasks=("cifar10",), compressors=("none", "fp16"), seeds=(0,))
    lb.write_entry(root, "good", recs)
    return recs


def _assert_good_loaded(records, problems, good) -> None:
    assert {r["record_id"] for r in records if r["entry"] == "good"} == {r["record_id"] for r in good}
    for p in problems:
        assert p.reason and "\n" not in p.reason, p


# --------------------------------------------------------------------------- A1, A2: values YAML cannot read
@pytest.mark.parametrize("date", ["2026-13-45", "2026-02-30", "9999-12-31", "1970-01-01"])
def test_a1_impossible_or_future_entry_date_skips_only_that_entry(tmp_path, lb, date):
    good = _good(lb, tmp_path)
    d = lb.write_entry(tmp_path, "bad-date", [lb.make_record("cifar10", "quant(bits=4)", 0)])
    _entry_yaml(d, f"name: x\nsubmitter: y\ndate: {date}\n")  # unquoted: YAML's own date parser sees it
    records, problems = load_entries(tmp_path)
    _assert_good_loaded(records, problems, good)
    [p] = problems
    assert p.path.endswith("bad-date") and "date" in p.reason and p.reason.startswith("entry skipped")


def test_a2_integer_of_5000_digits_in_entry_yaml(tmp_path, lb):
    good = _good(lb, tmp_path)
    d = lb.write_entry(tmp_path, "big-int", [lb.make_record("cifar10", "quant(bits=4)", 0)])
    _entry_yaml(d, f"name: {'9' * 5000}\nsubmitter: y\ndate: 2026-01-01\n")
    records, problems = load_entries(tmp_path)
    _assert_good_loaded(records, problems, good)
    [p] = problems
    assert p.path.endswith("big-int") and "entry.yaml" in p.reason


# --------------------------------------------------------------------------- A3: huge plugin file
def test_a3_sparse_3gib_plugin_is_refused_without_reading_it(tmp_path, lb):
    good = _good(lb, tmp_path)
    d = lb.write_entry(
        tmp_path, "huge-plugin", [lb.make_record("cifar10", "quant(bits=4)", 0)], plugin="p.py", plugin_hash="0" * 16
    )
    with open(d / "p.py", "wb") as f:
        f.truncate(3 * 2**30)  # sparse: no disk used, but reading it would need 3 GiB of memory
    tracemalloc.start()
    try:
        records, problems = load_entries(tmp_path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    _assert_good_loaded(records, problems, good)
    [p] = problems
    assert "p.py" in p.reason and f"over the {submissions.MAX_PLUGIN_BYTES}-byte limit" in p.reason
    assert peak < 50 * 2**20
    with pytest.raises(ValueError, match="byte limit"):
        submissions.plugin_file_hash(d / "p.py")


# --------------------------------------------------------------------------- A4, A5: cost under the caps
def test_a4_junk_line_file_is_cheap_and_reported_in_a_few_lines(tmp_path, lb):
    good = _good(lb, tmp_path)
    d = lb.write_entry(tmp_path, "junk", [])
    (d / "results.jsonl").write_bytes(b"1\n" * (4 * 2**20))  # 8 MiB of one-byte lines
    tracemalloc.start()
    try:
        records, problems = load_entries(tmp_path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    _assert_good_loaded(records, problems, good)
    junk = [p for p in problems if "junk" in p.path]
    assert len(junk) == submissions.MAX_PROBLEMS_PER_ENTRY + 1  # before: one problem per line, 4 million
    assert "stopped reading" in junk[-1].reason
    assert peak < 20 * 2**20  # before: ~1.4 GB for these 8 MiB


def test_a4_entry_budget_spans_files(tmp_path, lb, monkeypatch):
    monkeypatch.setattr(submissions, "MAX_ENTRY_LINES", 3)
    d = lb.write_entry(
        tmp_path, "many", lb.make_records(tasks=("cifar10",), compressors=("none", "fp16"), seeds=(0, 1))
    )
    records, problems = load_entries(tmp_path)
    assert len(records) == 3 and "more than 3 lines" in problems[-1].reason and problems[-1].path == str(d)


def test_a5_yaml_merge_key_bomb_is_refused_before_it_expands(tmp_path, lb):
    good = _good(lb, tmp_path)
    d = lb.write_entry(tmp_path, "bomb", [lb.make_record("cifar10", "quant(bits=4)", 0)])
    levels = ["a0: &a0 {k0: v, k1: v, k2: v, k3: v, k4: v, k5: v, k6: v, k7: v, k8: v, k9: v}"]
    levels += [f"a{i}: &a{i} {{" + ", ".join(f"m{j}: {{<<: *a{i - 1}}}" for j in range(10)) + "}" for i in range(1, 5)]
    _entry_yaml(d, "\n".join(levels) + "\nname: x\nsubmitter: y\ndate: 2026-01-01\n")
    records, problems = load_entries(tmp_path)
    _assert_good_loaded(records, problems, good)
    [p] = problems
    assert "anchors or aliases" in p.reason


def test_a5_yaml_node_budget(tmp_path, lb):
    d = lb.write_entry(tmp_path, "wide", [lb.make_record("cifar10", "quant(bits=4)", 0)])
    _entry_yaml(d, "name: x\nsubmitter: y\ndate: 2026-01-01\ndescription: [" + ", ".join(["1"] * 5000) + "]\n")
    _, problems = load_entries(tmp_path)
    assert "YAML nodes" in problems[0].reason


# --------------------------------------------------------------------------- A6: forgery across entries
def test_a6_copied_record_ids_never_hide_the_original_entry(tmp_path, lb):
    """An entry that sorts first and re-commits the maintainers' record ids: the copies are dropped,
    the originals stay with their entry (before: every baseline vanished as a 'duplicate')."""
    base = lb.make_records(tasks=("cifar10",), compressors=("none", "fp16"), seeds=(0, 1))
    lb.write_entry(tmp_path, "mpcbench-baselines", base)
    lb.write_entry(tmp_path, "0-attacker", base + [lb.make_record("cifar10", "quant(bits=4)", 0)])
    records, problems = load_entries(tmp_path)
    by_entry = {}
    for r in records:
        by_entry.setdefault(r["entry"], []).append(r["record_id"])
    assert sorted(by_entry["mpcbench-baselines"]) == sorted(r["record_id"] for r in base)
    assert len(by_entry["0-attacker"]) == 1  # only its own record
    [p] = problems
    assert p.path.endswith("0-attacker") and f"{len(base)} record(s) copied from entry 'mpcbench-baselines'" in p.reason
    assert all(r["is_maintainer"] == (r["entry"] == "mpcbench-baselines") for r in records)


def test_a6_between_third_parties_the_repository_order_decides_not_the_name(tmp_path, lb, monkeypatch):
    rec = lb.make_record("cifar10", "none", 0)
    lb.write_entry(tmp_path, "b-original", [rec])
    lb.write_entry(tmp_path, "a-copy", [rec])
    monkeypatch.setattr(
        submissions,
        "_publication_order",
        lambda root, wanted: {("b-original", rec["record_id"]): 1, ("a-copy", rec["record_id"]): 2},
    )
    records, problems = load_entries(tmp_path)
    assert [r["entry"] for r in records] == ["b-original"] and problems[0].path.endswith("a-copy")


def test_a6_record_belongs_to_its_folder_whatever_it_claims(tmp_path, lb):
    rec = lb.make_record("cifar10", "none", 0, entry="mpcbench-baselines", is_maintainer=True, submitter="maintainers")
    lb.write_entry(tmp_path, "someone", [rec], submitter="someone")
    [r], _ = load_entries(tmp_path)
    assert (r["entry"], r["is_maintainer"], r["submitter"]) == ("someone", False, "someone")


# --------------------------------------------------------------------------- A8: impossible values
@pytest.mark.parametrize(
    "override,reason",
    [
        ({"final_metric": 7.5}, "final_metric = 7.5 is outside the plausible range [0, 1]"),
        ({"final_metric": -1e18}, "final_metric = -1e+18 is outside"),
        ({"seed": 10**18}, "seed must be in [0, 2147483647]"),
        ({"created": "9999-99-99"}, "created must be an ISO 8601 date-time"),
        ({"created": "2099-01-01T00:00:00+00:00"}, "in the future"),
        ({"metric_name": "acc2"}, "task 'cifar10' is measured by 'accuracy'"),
        ({"bytes_per_step": {"forward": -1e18, "backward": 0.0, "dp": 0.0}}, "bytes_per_step.forward"),
        ({"bytes_per_step": {"forward": 1.0, "backward": 1.0, "dp": 0.0}}, "derived from the counted bytes"),
        (
            {"bytes": {"forward": {"raw": 2**55, "wire": 1, "messages": 1}}},
            "bytes.forward.raw must be a non-negative integer",
        ),
        ({"bytes": {"forward": {"raw": 10, "wire": 5, "messages": 0}}}, "in 0 messages"),
        ({"time": {"step_s": -1.0}}, "time.step_s"),
        ({"run": {"steps": 0}}, "run.steps"),
    ],
)
def test_a8_impossible_values_are_rejected_not_ranked(tmp_path, lb, override, reason):
    good = _good(lb, tmp_path)
    lb.write_entry(tmp_path, "liar", [lb.make_record("cifar10", "quant(bits=4)", 0)])
    bad = {**lb.make_record("cifar10", "topk(ratio=0.1)", 0), **override}
    with open(tmp_path / "liar" / "results.jsonl", "a") as f:
        f.write(json.dumps(bad) + "\n")
    records, problems = load_entries(tmp_path)
    _assert_good_loaded(records, problems, good)
    assert [r["compressor"] for r in records if r["entry"] == "liar"] == ["quant(bits=4)"]
    [p] = problems
    assert reason in p.reason, p.reason


def test_a8_bytes_per_step_is_derived_by_the_loader(tmp_path, lb):
    rec = lb.make_record("cifar10", "fp16", 0)
    lb.write_entry(tmp_path, "e", [rec])
    [r], _ = load_entries(tmp_path)
    assert r["bytes_per_step"] == {d: c["wire"] / rec["run"]["steps"] for d, c in rec["bytes"].items()}
    agg = aggregate(to_frame([r]))
    assert agg["bytes_per_step_forward"].iloc[0] == rec["bytes"]["forward"]["wire"] / rec["run"]["steps"]


# --------------------------------------------------------------------------- containment
def test_any_exception_inside_one_entry_is_one_line(tmp_path, lb, monkeypatch):
    good = _good(lb, tmp_path)
    lb.write_entry(tmp_path, "zz-explodes", [lb.make_record("cifar10", "fp16", 3)])
    real = submissions._read_entry_info

    def explode(d):
        if d.name == "zz-explodes":
            raise MemoryError("simulated")
        return real(d)

    monkeypatch.setattr(submissions, "_read_entry_info", explode)
    records, problems = load_entries(tmp_path)
    _assert_good_loaded(records, problems, good)
    assert [str(p) for p in problems] == [f"{tmp_path / 'zz-explodes'}: entry skipped: MemoryError: simulated"]


# --------------------------------------------------------------------------- A7: forged baselines
def test_a7_forged_none_records_never_become_another_entrys_baseline(tmp_path, lb):
    """An entry that commits two forged `none` records (accuracy 0.9, more seeds than the maintainers') became
    other entries' baseline and moved their deltas from -0.10 to -0.66. Deltas now compare an entry with its own
    `none` cells or the maintainers' baseline (marked by the loader, from the folder: is_maintainer)."""
    maint = [lb.make_record("cifar10", "none", 0)]
    lb.write_entry(tmp_path, "mpcbench-baselines", maint)
    forged = [{**lb.make_record("cifar10", "none", s, record_id=f"forged-{s}"), "final_metric": 0.9} for s in (1, 2)]
    lb.write_entry(tmp_path, "0-forger", forged)
    lb.write_entry(tmp_path, "victim", [lb.make_record("cifar10", "fp16", 0, record_id="victim-0")])
    records, problems = load_entries(tmp_path)
    assert problems == []
    agg = aggregate(to_frame(records))
    victim = agg[agg["entry"] == "victim"].iloc[0]
    assert victim["baseline_entry"] == "mpcbench-baselines"
    assert victim["delta"] == pytest.approx(victim["metric_mean"] - maint[0]["final_metric"])
    forger = agg[(agg["entry"] == "0-forger")].iloc[0]
    assert forger["maintainers"] is False or not forger["maintainers"]


def test_a6_the_report_index_drops_copies_too(tmp_path, lb):
    """The page and the report read a cached index built entry by entry: copies are dropped there as well."""
    from leaderboard.index import load_index

    base = lb.make_records(tasks=("cifar10",), compressors=("none", "fp16"), seeds=(0,))
    lb.write_entry(tmp_path / "records", "mpcbench-baselines", base)
    lb.write_entry(tmp_path / "records", "0-attacker", base + [lb.make_record("cifar10", "quant(bits=4)", 0)])
    index = load_index([], [str(tmp_path / "records")], index_dir=tmp_path / "index")
    by_entry = index.frame.groupby("entry")["record_id"].apply(set).to_dict()
    assert by_entry["mpcbench-baselines"] == {r["record_id"] for r in base}
    assert len(by_entry["0-attacker"]) == 1
    assert any("copied from entry 'mpcbench-baselines'" in p.reason for p in index.problems)
