"""Issues 23 and 35: "verified" is a property of a displayed row. A row shows as verified only while
the records the verification compared make it; a verified row shows and ranks by its re-run's times,
machine and load; a record belongs to the entry the base branch received it in first."""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
from pathlib import Path

import pytest

from leaderboard import submissions
from leaderboard.submissions import load_entries, load_entry, read_entry_info
from suite.results.entries import row_id, rows_of

VERIFIER = {"cpu": "Verifier CPU", "cpu_count": 2, "torch_build": "2.x+cpu"}


def _report(d: Path, *, status: str = "verified", rerun_time: float = 9.5, contended: bool = False, **over) -> dict:
    """A report as ``mpcbench verify`` writes it for every row of the entry as it is now: one re-run
    cell per row (its first seed), every other latest record compared with it."""
    records, _ = load_entry(d)
    rows, cells, reruns = [], [], []
    for key, idx in sorted(rows_of(records, ok_only=True).items()):
        rid = row_id(key)
        members = [records[i] for i in idx]
        first = members[0]
        for r in members:
            kind = "re-run" if r is first else "row"
            cells.append(
                {
                    "cell_id": r["cell_id"],
                    "record_id": r["record_id"],
                    "row_id": rid,
                    "kind": kind,
                    "status": "match" if status == "verified" else "mismatch",
                }
            )
        rows.append(
            {
                "row": key.to_list(),
                "row_id": rid,
                "status": status,
                "records": {r["record_id"]: r["record_sha256"] for r in members},
                "reruns": [first["record_id"]],
            }
        )
        reruns.append(
            {
                "record_id": first["record_id"],
                "row_id": rid,
                "time": {**first["time"], "step_s": rerun_time},
                "wall_s": 77.0,
                "timing_inputs": first["timing_inputs"],
                "modeled": first["modeled"],
                "model_version": first.get("model_version"),
                "verifier": {"machine": VERIFIER, "load_per_core": [0.5, 0.6], "contended": contended},
            }
        )
    text = "".join(json.dumps(r) + "\n" for r in reruns)
    files = {k: v for k, v in submissions.entry_file_hashes(d).items() if not k.endswith(".jsonl")}
    rep = {
        "schema": "mpcbench.verification/3",
        "entry": d.name,
        "status": status,
        "seed": 12345,
        "files": files,
        "reruns_sha256": hashlib.sha256(text.encode()).hexdigest(),
        "rows": rows,
        "cells": cells,
        **over,
    }
    (d / submissions.RERUNS_FILE).write_text(text)
    (d / submissions.VERIFICATION_FILE).write_text(json.dumps(rep))
    return rep


def _marks(root: Path) -> dict[tuple[str, int], tuple[str, str]]:
    records, _ = load_entries(root)
    return {(r["compressor"], r["seed"]): (r["verification"], r["verified_cells"]) for r in records}


def test_a_verified_row_binds_exactly_its_records_and_new_rows_read_not_verified(tmp_path, lb):
    """Before: the mark was the entry's; a forged record could sit unsampled in a 'verified' entry (or a
    new file unverified every row). Now: a row's mark holds while its compared records make it."""
    d = lb.write_entry(tmp_path, "e", lb.make_records(tasks=("cifar10",), compressors=("fp16", "none"), seeds=(0, 1)))
    _report(d)
    assert set(_marks(tmp_path).values()) == {("verified", "seed 0 re-run, 2 compared")}
    # another track lands in its own file (a new row): it reads "not verified"; the re-run rows stay verified
    lb.write_jsonl(d / "new-track.jsonl", [lb.make_record("cifar10", "topk(ratio=0.1)", 0)])
    marks = _marks(tmp_path)
    assert marks[("topk(ratio=0.1)", 0)] == ("not verified", "not re-run")
    assert marks[("fp16", 1)][0] == marks[("none", 0)][0] == "verified"
    # a record added to a verified row: that row is no longer verified (it was never compared)
    lb.write_jsonl(d / "late.jsonl", [dict(lb.make_record("cifar10", "fp16", 2), record_id="late" + "0" * 28)])
    marks = _marks(tmp_path)
    assert marks[("fp16", 0)] == ("not verified", "records changed since its verification")
    assert marks[("none", 0)][0] == "verified"


def test_a_changed_record_unbinds_its_row(tmp_path, lb):
    d = lb.write_entry(tmp_path, "e", lb.make_records(tasks=("cifar10",), compressors=("fp16",), seeds=(0, 1)))
    _report(d)
    text = (d / "results.jsonl").read_text()
    first = json.loads(text.splitlines()[0])
    first["final_metric"] = 0.99
    (d / "results.jsonl").write_text(json.dumps(first) + "\n" + "\n".join(text.splitlines()[1:]) + "\n")
    assert {v[0] for v in _marks(tmp_path).values()} == {"not verified"}


@pytest.mark.parametrize(
    "forge",
    [
        {"schema": "mpcbench.verification/2"},  # the old, entry-wide format
        {"seed": None},
        {"seed": True},
        {"rows": "all"},
        {"cells": []},  # 'verified' rows without cells
        {"files": {}},  # entry.yaml not bound
    ],
)
def test_a_hand_written_verification_reads_as_not_verified(tmp_path, lb, forge):
    d = lb.write_entry(tmp_path, "e", [lb.make_record("cifar10", "fp16", 0)])
    _report(d, **forge)
    assert {v[0] for v in _marks(tmp_path).values()} == {"not verified"}


def test_a_verified_row_shows_the_reruns_machine_and_load_and_keeps_its_own_times(tmp_path, lb):
    """The mark names the machine and load of the re-run (even contended). Times are not taken from the
    re-run (issue 44: a re-verification moved the score); a record's raw seconds never reach the board's
    time columns, which the time model prices from the record's bytes and the calibration."""
    rec = lb.make_record("cifar10", "fp16", 0)
    rec["time"]["step_s"] = 0.0001  # a forged, fast raw time: kept as recorded, priced by nothing
    d = lb.write_entry(tmp_path, "e", [rec])
    _report(d, rerun_time=9.5, contended=True)
    [r], _ = load_entries(tmp_path)
    assert r["verification"] == "verified" and r["time"]["step_s"] == 0.0001 and r["verified_under_load"]
    assert "times_from" not in r
    shown = r["rerun_provenance"]
    assert shown["machine"] == VERIFIER and shown["load"]["load_avg"][0] == 0.6 * 2
    assert r["provenance"] == rec["provenance"]  # the record's own: its machine class is the row's key
    from leaderboard.frame import to_frame

    [row] = to_frame([r]).to_dict("records")
    assert (row["machine"], row["verified_on"]) == ("test-cpu, 2 cores", "Verifier CPU, 2 cores")
    assert row["load_1m"] == 0.6 * 2 and row["cpu_count"] == 2
    (d / submissions.RERUNS_FILE).write_text((d / submissions.RERUNS_FILE).read_text().replace("9.5", "0.001"))
    [r], _ = load_entries(tmp_path)  # edited re-run times: nothing holds
    assert r["verification"] == "not verified" and r["time"]["step_s"] == 0.0001 and "rerun_provenance" not in r


def test_the_mark_says_which_cells_were_rerun(tmp_path, lb):
    from leaderboard.frame import to_frame
    from leaderboard.statistics import aggregate
    from leaderboard.views import display_table

    d = lb.write_entry(tmp_path, "e", lb.make_records(tasks=("cifar10",), compressors=("fp16",), seeds=(0, 1, 2)))
    _report(d)
    records, _ = load_entries(tmp_path)
    agg = aggregate(to_frame(records))
    table = display_table(agg.assign(rank=1))
    assert list(table["verified"]) == ["✓ verified (seed 0 re-run, 3 compared)"]


ON_B = {"cpu": "Verifier CPU", "cpu_count": 2, "torch": "2.14.1"}  # the verifier's machine class, recorded


def test_a_row_verified_on_another_machine_class_keeps_the_class_it_was_recorded_on(tmp_path, lb):
    """Before: a verified record took the re-run's machine as its row key, so a row recorded on class A and
    verified on class B merged with B's row of the same setup, and one seed superseded the other there."""
    from leaderboard.frame import to_frame
    from leaderboard.statistics import aggregate
    from leaderboard.views import display_table

    on_a = lb.make_record("cifar10", "fp16", 0)  # machine class "test-cpu, 2 cores"
    d = lb.write_entry(tmp_path, "e", [on_a])
    _report(d)  # its row is re-run on class B (VERIFIER)
    # the same setup and seed recorded on class B, later, asked for as `stages: 3` (the resolved setup is
    # the same, the cell key is not: only the row-and-seed rule can supersede it)
    on_b = lb.make_record("cifar10", "fp16", 0, created="2026-02-01T12:00:00+00:00", record_id="b" * 32)
    on_b["provenance"] = {**on_b["provenance"], "machine": ON_B}
    on_b["config"] = {**on_b["config"], "stages": None}
    on_b["cell_key"] = "f" * 16
    lb.write_jsonl(d / "on-b.jsonl", [on_b])
    records, _ = load_entries(tmp_path)
    frame = to_frame(records)
    assert frame["latest"].all() and len(frame) == 2  # neither seed supersedes the other
    agg = aggregate(frame)
    by_machine = {r["machine"]: r for r in agg.to_dict("records")}
    assert set(by_machine) == {"test-cpu, 2 cores", "Verifier CPU, 2 cores"}
    assert [r["n"] for r in by_machine.values()] == [1, 1]
    verified, other = by_machine["test-cpu, 2 cores"], by_machine["Verifier CPU, 2 cores"]
    assert (verified["verification"], verified["verified_on"]) == ("verified", "Verifier CPU, 2 cores")
    assert (other["verification"], other["verified_on"]) == ("not verified", "")
    table = display_table(agg.assign(rank=1)).set_index("machine")
    assert table.loc["test-cpu, 2 cores", "verified"].startswith("✓ verified")
    assert table.loc["test-cpu, 2 cores", "measured on (load)"] == (
        "Verifier CPU, 2 cores; load 1.2 (60% of 2 cores) (verification re-run; recorded on test-cpu, 2 cores)"
    )
    assert table.loc["Verifier CPU, 2 cores", "measured on (load)"].startswith("Verifier CPU, 2 cores; load 1.5")
    # the page's detail card and curves take the whole row key too: the two classes are two rows there
    from leaderboard.networks import Link
    from leaderboard.views import curve_frame, entry_card, entry_detail, time_to_quality_frame

    setup = str(frame["setup"].iloc[0])
    detail = entry_detail(frame, "cifar10", "quick", "e", "fp16", setup, "test-cpu, 2 cores")
    assert [s["record_id"] for s in detail["seeds"]] == [on_a["record_id"]]
    assert dict(entry_card(detail))["machine and load"].endswith("(verification re-run; recorded on test-cpu, 2 cores)")
    keys = [("e", "fp16", setup, m) for m in sorted(by_machine)]
    assert curve_frame(frame, keys)["label"].nunique() == 2
    assert curve_frame(frame, keys[:1])["seed"].tolist() == [0] * len(on_b["curve"])
    assert time_to_quality_frame(frame, Link(1e9, 5e-4), keys)["label"].nunique() == 2
    # the verifier draws the same two rows from the records as recorded
    raw, _ = load_entry(d, as_recorded=True)
    assert sorted(k.machine for k in rows_of(raw)) == sorted(by_machine)
    assert {row_id(k) for k in rows_of(raw) if k.machine == "test-cpu, 2 cores"} == {
        r["row_id"] for r in json.loads((d / submissions.VERIFICATION_FILE).read_text())["rows"]
    }


def test_times_measured_on_two_machine_classes_are_not_tested_against_each_other(tmp_path, lb):
    """A verified row's times are its re-run's: against a baseline whose times were measured on another
    machine class the page shows the difference and no test (before: a p-value across two machines)."""
    from leaderboard.frame import to_frame
    from leaderboard.statistics import OTHER_MACHINE, aggregate

    d = lb.write_entry(tmp_path, "e", [lb.make_record("cifar10", "fp16", s) for s in (0, 1, 2)])
    _report(d)  # fp16 re-run on class B; its own baseline (recorded on class A) is not verified
    lb.write_jsonl(d / "none.jsonl", [lb.make_record("cifar10", "none", s) for s in (0, 1, 2)])
    records, _ = load_entries(tmp_path)
    agg = aggregate(to_frame(records)).set_index("compressor")
    assert agg.loc["fp16", "machine"] == agg.loc["none", "machine"] == "test-cpu, 2 cores"
    assert agg.loc["fp16", "baseline_entry"] == "e" and agg.loc["fp16", "verified_on"] == "Verifier CPU, 2 cores"
    assert agg.loc["fp16", "time_test@1Gbps"] == OTHER_MACHINE and math.isnan(agg.loc["fp16", "time_p@1Gbps"])
    assert math.isfinite(agg.loc["fp16", "time_delta@1Gbps"])
    assert agg.loc["fp16", "significance"] != "no baseline"  # quality: both recorded on class A, compared


# --------------------------------------------------------------------------- ownership from the base branch
def _git(cwd: Path, *args: str, date: str | None = None) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t"}
    env["GIT_COMMITTER_EMAIL"] = "t@x"
    if date:
        env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = date
    subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True, env=env)


@pytest.mark.skipif(subprocess.run(["git", "--version"], capture_output=True).returncode != 0, reason="needs git")
def test_ownership_follows_the_base_branchs_merge_order_not_commit_dates(tmp_path, lb):
    """Before: a copy of another entry's records in a commit with an earlier committer date took them
    over, and the original entry's rows were dropped as 'copied'."""
    repo = tmp_path / "repo"
    (repo / "records").mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    recs = lb.make_records(tasks=("cifar10",), compressors=("fp16",), seeds=(0, 1))
    lb.write_entry(repo / "records", "original", recs)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "original", date="2026-11-20T12:00:00")
    # the copier's branch: a commit dated long before, merged later (a merge commit on main)
    _git(repo, "checkout", "-q", "-b", "pr")
    lb.write_entry(repo / "records", "a-copier", recs + [lb.make_record("cifar10", "quant(bits=4)", 0)])
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "copy", date="2020-01-02T12:00:00")
    _git(repo, "checkout", "-q", "main")
    _git(repo, "merge", "-q", "--no-ff", "-m", "merge pr", "pr", date="2026-11-21T12:00:00")
    records, problems = load_entries(repo / "records")
    by_entry: dict[str, set] = {}
    for r in records:
        by_entry.setdefault(r["entry"], set()).add(r["record_id"])
    assert by_entry["original"] == {r["record_id"] for r in recs}
    assert len(by_entry["a-copier"]) == 1
    [p] = problems
    assert p.path.endswith("a-copier") and "copied from entry 'original'" in p.reason


@pytest.mark.parametrize(
    "field,value",
    [
        ("name", "MPCBench-Baselines"),
        ("name", "mpcbench-base1ines"),  # digit / letter swap
        ("name", "mрcbench-baselines"),  # Cyrillic 'р'
        ("submitter", "mpcbench-maintainers"),
        ("name", "ＭＰＣｂｅｎｃｈ baselines v2"),
        ("name", "mpcbench official"),
        # issue 45: found past the old table (UTS #39 confusables skeleton now)
        ("name", "mpcbench-basel\u0131nes"),  # dotless i
        ("name", "mpcbench-\u0299aselines"),  # Latin small capital B
        ("name", "\u13b7PC\u13cfENCH-BASELINES"),  # Cherokee letters MU and SI
        ("name", "mpcbench\u202e-baselines"),  # a right-to-left override inside
        ("submitter", "mpcbench team"),  # the project's name
    ],
)
def test_names_that_look_like_the_maintainers_entry_are_flagged(tmp_path, lb, field, value):
    d = lb.write_entry(tmp_path, "someone", [lb.make_record("cifar10", "fp16", 0)], **{field: value})
    records, problems = load_entries(tmp_path)
    assert len(records) == 1 and records[0]["entry_info"]["lookalike"]  # flagged, still loaded
    [p] = problems
    assert "looks like the maintainers' entry" in p.reason and "\n" not in p.reason
    assert submissions.lookalike_of_maintainers(read_entry_info(d))


def test_an_entry_that_looks_like_another_entry_is_flagged(tmp_path, lb):
    """Issue 45: look-alikes against existing entries, not only the maintainers'."""
    lb.write_entry(tmp_path, "topk-paper", [lb.make_record("cifar10", "fp16", 0)], name="TopK paper")
    lb.write_entry(tmp_path, "copy", [lb.make_record("cifar10", "fp16", 1)], name="T\u043epK paper")  # Cyrillic o
    records, problems = load_entries(tmp_path)
    assert len(records) == 2  # flagged, still loaded
    flagged = {r["entry"] for r in records if r["entry_info"].get("lookalike")}
    assert flagged == {"copy", "topk-paper"} and all("looks like another entry" in p.reason for p in problems)


def test_untrusted_text_never_becomes_a_link():
    """Issue 45: a bare URL or address in a notice was auto-linked by the page's markdown."""
    import re

    from leaderboard.page_notes import notice_text

    text = notice_text("Entry 'https://evil.example/login www.evil.example admin@evil.example' has no records")
    autolink = re.compile(r"https?://|www\.|[\w.+-]+@[\w-]+\.")
    assert not autolink.search(text) and "evil.example" in text
    assert text.replace("\u200b", "").replace("\\", "").count("https://evil.example/login") == 1  # reads the same


def test_ordinary_names_are_not_flagged(tmp_path, lb):
    lb.write_entry(tmp_path, "topk-paper", [lb.make_record("cifar10", "fp16", 0)], name="TopK on mpcbench")
    records, problems = load_entries(tmp_path)
    assert not problems and "lookalike" not in records[0]["entry_info"]


def test_ci_keeps_verification_files_to_the_maintainers_check():
    """The hosting half of item 4 (docs/leaderboard.md, "Who writes verification.json"): a submitter's pull
    request may not touch the files, CI re-runs `verify --check` on any change to them, and CODEOWNERS
    gives them to the maintainers."""
    import yaml

    root = Path(__file__).resolve().parents[2]
    ci = yaml.safe_load((root / ".github" / "workflows" / "ci.yml").read_text())
    steps = " ".join(str(s.get("run", "")) for job in ci["jobs"].values() for s in job.get("steps", []))
    assert "verify" in steps and "--check" in steps and "--base" in steps
    assert "verification.reruns" in steps and "must not add or edit verification files" in steps
    owners = (root / ".github" / "CODEOWNERS").read_text()
    assert "/records/*/verification.json" in owners and "/records/*/verification.reruns" in owners


def test_a_row_that_failed_verification_never_ranks_and_says_why(tmp_path, lb):
    """Issue 45. Before: a row whose verification failed still ranked (marked failed), in the top two of
    its setup when its records were forged. Now it is listed after the ranked rows, unranked, with the
    first failed comparison's reason on its line."""
    import pandas as pd

    from leaderboard.frame import to_frame
    from leaderboard.rules import rank
    from leaderboard.statistics import aggregate
    from leaderboard.views import display_table

    good = lb.write_entry(tmp_path, "good", lb.make_records(tasks=("cifar10",), compressors=("fp16",), seeds=(0,)))
    forged = [lb.make_record("cifar10", "topk(ratio=0.01)", 0)]
    forged[0]["final_metric"] = 0.99  # better than anything honest
    bad = lb.write_entry(tmp_path, "forger", forged)
    _report(good)
    rep = _report(bad, status="failed")
    rep["cells"][0]["detail"] = "side channel: lo carried 8000000 bytes, the wire counted 100"
    (bad / submissions.VERIFICATION_FILE).write_text(json.dumps(rep))
    records, _ = load_entries(tmp_path)
    ranked = rank(aggregate(to_frame(records)), "quality_at_ratio")
    by_entry = {r["entry"]: r for r in ranked.to_dict("records")}
    assert by_entry["good"]["rank"] == 1 and by_entry["forger"]["rank"] in (None, pd.NA)
    assert by_entry["forger"]["rank_label"] == "-"
    assert list(ranked["entry"]) == ["good", "forger"]  # listed after the ranked rows
    table = display_table(ranked)
    line = table[table["rank"] == "-"].iloc[0]
    assert line["verified"].startswith("✗ failed verification (mismatch: side channel: lo carried 8000000 bytes")
