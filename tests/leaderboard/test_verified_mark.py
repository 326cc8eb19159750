"""Issue 23: the "verified" mark binds every file of the entry, follows from its cells, and a record
belongs to the entry the base branch received it in first (merge order, not commit dates)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from leaderboard import submissions
from leaderboard.submissions import entry_file_hashes, load_entries, read_entry_info, verification_status


def _report(d: Path, *, status: str = "verified", cells=None, reruns: str = "", **over) -> dict:
    cells = [{"cell_id": "c", "record_id": "r", "status": "match"}] if cells is None else cells
    rep = {
        "schema": "mpcbench.verification/2",
        "entry": d.name,
        "status": status,
        "seed": 12345,
        "files": entry_file_hashes(d),
        "reruns_sha256": hashlib.sha256(reruns.encode()).hexdigest(),
        "cells": cells,
        **over,
    }
    if reruns:
        (d / submissions.RERUNS_FILE).write_text(reruns)
    (d / submissions.VERIFICATION_FILE).write_text(json.dumps(rep))
    return rep


def test_a_verification_binds_every_file_of_the_entry(tmp_path, lb):
    """Before: a .jsonl added after verification kept the entry 'verified'."""
    d = lb.write_entry(tmp_path, "e", [lb.make_record("cifar10", "fp16", 0)])
    assert verification_status(d) == "not verified"
    _report(d)
    assert verification_status(d) == "verified"
    [r], _ = load_entries(tmp_path)
    assert r["entry_info"]["verification"] == "verified"
    (d / "more.jsonl").write_text(json.dumps(lb.make_record("cifar10", "fp16", 1)) + "\n")  # an added results file
    assert verification_status(d) == "not verified"
    os.remove(d / "more.jsonl")
    assert verification_status(d) == "verified"
    (d / "entry.yaml").write_text((d / "entry.yaml").read_text().replace("fixture entry", "changed"))
    assert verification_status(d) == "not verified"  # a changed entry.yaml
    _report(d)
    (d / "notes.txt").write_text("x")  # any file at all
    assert verification_status(d) == "not verified"


@pytest.mark.parametrize(
    "forge",
    [
        {"schema": "mpcbench.verification/1"},  # the old, unbound format
        {"seed": None},  # no seed: not a report of the check
        {"seed": True},
        {"cells": []},
        {"cells": [{"cell_id": "c", "record_id": "r", "status": "mismatch"}]},  # 'verified' that its cells contradict
        {"cells": [{"cell_id": "c", "record_id": "r", "status": "cannot verify"}]},
        {"status": "VERIFIED"},
    ],
)
def test_a_hand_written_verification_with_correct_hashes_reads_as_not_verified(tmp_path, lb, forge):
    """Before: {"status": "verified", "files": {<correct sha256>}} typed by hand read as verified."""
    d = lb.write_entry(tmp_path, "e", [lb.make_record("cifar10", "fp16", 0)])
    _report(d, **forge)
    assert verification_status(d) == "not verified"


def test_the_reruns_file_is_bound_and_supplies_the_verified_records_times(tmp_path, lb):
    rec = lb.make_record("cifar10", "fp16", 0)
    d = lb.write_entry(tmp_path, "e", [rec])
    rerun = {"record_id": rec["record_id"], "time": {**rec["time"], "step_s": 9.5}, "wall_s": 77.0}
    text = json.dumps(rerun) + "\n"
    _report(d, reruns=text, cells=[{"cell_id": rec["cell_id"], "record_id": rec["record_id"], "status": "match"}])
    [r], _ = load_entries(tmp_path)
    assert r["time"]["step_s"] == 9.5 and r["wall_s"] == 77.0 and r["times_from"] == "verification re-run"
    (d / submissions.RERUNS_FILE).write_text(text.replace("9.5", "0.001"))  # edited re-run times
    assert verification_status(d) == "not verified"
    [r], _ = load_entries(tmp_path)
    assert r["time"]["step_s"] == rec["time"]["step_s"] and "times_from" not in r


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
    ],
)
def test_names_that_look_like_the_maintainers_entry_are_flagged(tmp_path, lb, field, value):
    d = lb.write_entry(tmp_path, "someone", [lb.make_record("cifar10", "fp16", 0)], **{field: value})
    records, problems = load_entries(tmp_path)
    assert len(records) == 1 and records[0]["entry_info"]["lookalike"]  # flagged, still loaded
    [p] = problems
    assert "looks like the maintainers' entry" in p.reason and "\n" not in p.reason
    assert submissions.lookalike_of_maintainers(read_entry_info(d))


def test_ordinary_names_are_not_flagged(tmp_path, lb):
    lb.write_entry(tmp_path, "topk-paper", [lb.make_record("cifar10", "fp16", 0)], name="TopK on mpcbench")
    records, problems = load_entries(tmp_path)
    assert not problems and "lookalike" not in records[0]["entry_info"]


def test_a_contended_reruns_times_are_not_shown(tmp_path, lb):
    """A re-run on a loaded machine is no better estimate of time than the record: its times stay unused."""
    rec = lb.make_record("cifar10", "fp16", 0)
    d = lb.write_entry(tmp_path, "e", [rec])
    rerun = {"record_id": rec["record_id"], "wall_s": 77.0, "timing_inputs": {"measurement": {"contended": True}}}
    _report(
        d,
        reruns=json.dumps(rerun) + "\n",
        cells=[{"cell_id": rec["cell_id"], "record_id": rec["record_id"], "status": "within spread"}],
    )
    [r], _ = load_entries(tmp_path)
    assert r["entry_info"]["verification"] == "verified" and r["wall_s"] == rec["wall_s"] and "times_from" not in r


def test_ci_keeps_verification_files_to_the_maintainers_check():
    """The hosting half of item 4 (docs/leaderboard.md, "Who writes verification.json"): a submitter's pull
    request may not touch the files, CI re-runs `verify --check` on any change to them, and CODEOWNERS
    gives them to the maintainers."""
    import yaml

    root = Path(__file__).resolve().parents[2]
    ci = yaml.safe_load((root / ".github" / "workflows" / "ci.yml").read_text())
    steps = " ".join(str(s.get("run", "")) for job in ci["jobs"].values() for s in job.get("steps", []))
    assert "verify" in steps and "--check" in steps and "--base" in steps
    assert "verification.reruns" in steps and "must not add or edit its verification files" in steps
    owners = (root / ".github" / "CODEOWNERS").read_text()
    assert "/records/*/verification.json" in owners and "/records/*/verification.reruns" in owners
