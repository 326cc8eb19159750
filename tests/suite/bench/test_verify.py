"""``mpcbench verify``: re-running recorded cells with their recorded code and comparing."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from suite.bench import verify
from suite.bench.verify import compare, sample_records

REPO = Path(__file__).resolve().parents[3]
TINY = REPO / "tests" / "fixtures" / "tiny_task.py"


def _rec(cell_id="c", task="cifar10", metric=0.5, wire=100, created="2026-01-01", status="ok", key="k", **kw):
    return {
        "cell_id": cell_id,
        "cell_key": key,
        "record_id": cell_id + created,
        "task": task,
        "tier": "quick",
        "status": status,
        "created": created,
        "metric_name": "accuracy",
        "final_metric": metric,
        "error": None,
        "bytes": {"forward": {"raw": 400, "wire": wire, "messages": 2}},
        **kw,
    }


def test_compare_exact_needs_identical_numbers():
    old = _rec()
    assert compare(old, copy.deepcopy(old), exact=True)[0] == "match"
    assert compare(old, _rec(metric=0.5000001), exact=True)[0] == "mismatch"
    status, detail = compare(old, _rec(wire=101), exact=True)
    assert status == "mismatch" and "wire bytes differ" in detail
    assert compare(old, _rec(key="other"), exact=True)[0] == "mismatch"
    assert compare(old, _rec(status="failed", error="boom"), exact=True)[0] == "rerun failed"


def test_compare_across_machines_uses_the_seed_spread():
    old = _rec(metric=0.3477)
    # the example: the same cifar10 none seed-0 cell on an Intel Xeon and an AMD EPYC
    assert compare(old, _rec(metric=0.3223), exact=False, std=0.027)[0] == "within spread"
    assert compare(old, _rec(metric=0.20), exact=False, std=0.027)[0] == "mismatch"
    assert compare(old, _rec(metric=0.3477, wire=150), exact=False, std=0.027)[0] == "mismatch"


def test_sample_takes_the_latest_ok_record_per_cell_and_n_per_task():
    recs = [
        _rec("a", key="1", created="2026-01-01", metric=0.1),
        _rec("a", key="1", created="2026-01-02", metric=0.2),
        _rec("b", key="2"),
        _rec("c", key="3", task="sst2"),
        _rec("d", key="4", task="sst2", status="failed"),
    ]
    picked = sample_records(recs, 5)
    assert sorted(r["cell_id"] for r in picked) == ["a", "b", "c"]
    assert next(r for r in picked if r["cell_id"] == "a")["final_metric"] == 0.2
    assert len(sample_records(recs, 1)) == 2 and sample_records(recs, 1) == sample_records(recs, 1)


def test_a_commit_the_repository_lacks_cannot_verify(tmp_path):
    with pytest.raises(verify.VerifyError, match="is not in this repository"):
        with verify.code_tree("f" * 40, REPO, {}):
            pass
    with pytest.raises(verify.VerifyError, match="names no git commit"):
        with verify.code_tree(None, REPO, {}):
            pass


def _head_is_clean() -> bool:
    r = subprocess.run(
        ["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True
    )
    return r.returncode == 0 and not r.stdout.strip()


@pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(), reason="needs a git checkout")
def test_verify_reruns_a_tiny_cell_at_its_commit_and_catches_a_forged_number(tmp_path):
    """A record of the tiny task made here, at HEAD: the re-run (from `git archive HEAD`) matches it exactly
    when the checkout is clean; the same record with a forged metric fails verification."""
    from suite.bench.cell import run_cell
    from suite.pipeline.config import CellConfig, CompressionPlan

    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    entry = tmp_path / "records" / "tiny-entry"
    entry.mkdir(parents=True)
    shutil.copy(TINY, entry / "tiny_task.py")
    cfg = CellConfig(
        task="tiny",
        tier="smoke",
        plan=CompressionPlan("quant(bits=4)", "none"),
        stages=2,
        steps=3,
        plugins=(str(entry / "tiny_task.py"),),
        time_limit_s=300,
    )
    rec = run_cell(cfg, log_dir=tmp_path / "logs")
    assert rec["status"] == "ok", rec["error"]
    rec["provenance"]["git_commit"], rec["provenance"]["git_dirty"] = head, not _head_is_clean()
    forged = {**copy.deepcopy(rec), "record_id": "forged", "final_metric": min(1.0, rec["final_metric"] + 0.3)}
    trees: dict[str, Path] = {}
    try:
        check = verify.check_cell(rec, entry, [rec], REPO, trees, 300, 1)
        if rec["provenance"]["git_dirty"]:
            assert check.status in ("within spread", "mismatch"), check  # not exact: HEAD is not the working tree
        else:
            assert (check.status, check.mode) == ("match", "exact"), check
        bad = verify.check_cell(forged, entry, [forged], REPO, trees, 300, 1)
        assert bad.status == "mismatch", bad
    finally:
        for t in trees.values():
            shutil.rmtree(t, ignore_errors=True)


def test_verification_file_is_read_by_the_loader(tmp_path, monkeypatch):
    """verify_entry writes verification.json; the loader shows the entry as verified while the files are unchanged."""
    from leaderboard.submissions import verification_status

    entry = tmp_path / "e"
    entry.mkdir()
    (entry / "results.jsonl").write_text("{}\n")
    (entry / "entry.yaml").write_text("name: e\nsubmitter: s\ndate: '2026-01-01'\n")
    monkeypatch.setattr("leaderboard.submissions.load_entry", lambda d: ([_rec()], []))
    monkeypatch.setattr(
        verify, "check_cell", lambda rec, *a: verify.CellCheck(rec["cell_id"], rec["record_id"], "match", "same")
    )
    report = verify.verify_entry(entry)
    assert (
        report["status"] == "verified" and json.loads((entry / "verification.json").read_text())["status"] == "verified"
    )
    assert verification_status(entry) == "verified"
    monkeypatch.setattr(
        verify, "check_cell", lambda rec, *a: verify.CellCheck(rec["cell_id"], rec["record_id"], "mismatch", "no")
    )
    assert verify.verify_entry(entry)["status"] == "failed" and verification_status(entry) == "failed"
