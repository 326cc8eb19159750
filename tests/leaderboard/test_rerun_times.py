"""Issues 36 and 44: a verified record's quality and time-to-target come from one run, its own; the
verification re-run checks it and lends nothing (the time model prices the record)."""

from __future__ import annotations

import copy
import hashlib
import json
import math

from leaderboard import submissions
from leaderboard.frame import to_frame
from leaderboard.submissions import entry_file_hashes, load_entries, load_entry
from suite.results import COMMITTED_RECORDS
from suite.results.entries import row_id, row_key
from suite.results.network import PROFILES


def _verified(tmp_path, lb, rec, rerun):
    """``rec`` in an entry whose verification (schema 3: per row) re-ran its row and got ``rerun``."""
    d = lb.write_entry(tmp_path, "e", [rec])
    [loaded], _ = load_entry(d)
    rid = row_id(row_key(loaded))
    text = json.dumps({**rerun, "row_id": rid}) + "\n"
    (d / submissions.RERUNS_FILE).write_text(text)
    rep = {
        "schema": "mpcbench.verification/3",
        "entry": "e",
        "status": "verified",
        "seed": 1,
        "files": {k: v for k, v in entry_file_hashes(d).items() if not k.endswith(".jsonl")},
        "reruns_sha256": hashlib.sha256(text.encode()).hexdigest(),
        "rows": [{"row_id": rid, "status": "verified", "records": {rec["record_id"]: loaded["record_sha256"]},
                  "reruns": [rec["record_id"]]}],
        "cells": [{"cell_id": rec["cell_id"], "record_id": rec["record_id"], "row_id": rid, "kind": "re-run",
                   "status": "match"}],
    }  # fmt: skip
    (d / submissions.VERIFICATION_FILE).write_text(json.dumps(rep))
    [r], _ = load_entries(tmp_path)
    return r


def _committed_inputs() -> dict:
    """A real run's timing inputs (version 2: the schedule, per-action costs, the target step)."""
    path = COMMITTED_RECORDS / "mpcbench-baselines" / "quick-cpu-2core-v2.jsonl"
    for line in path.read_text().splitlines():
        r = json.loads(line)
        if r["status"] == "ok" and r["task"] == "cifar10":
            return r["timing_inputs"]
    raise AssertionError("no committed cifar10 record")


def test_a_reverification_changes_no_time_and_no_score(tmp_path, lb):
    """Issue 44: a verified row used to take its re-run's times (quant's score moved 0.930 -> 0.991 when
    its row was re-verified). The re-run checks the record; the time model prices the record itself."""
    from leaderboard.score import benchmark_score
    from leaderboard.statistics import aggregate

    rec = lb.make_record("cifar10", "fp16", 0)
    rec["timing_inputs"] = _committed_inputs()
    rec["timing_inputs"]["target_step"] = 100.0  # the record met the target at step 100
    slower = copy.deepcopy(rec["timing_inputs"])
    for stage in slower["stages"]:  # the re-run ran twice as slow (a loaded machine)
        for a in stage["actions"].values():
            a["compute_s"] *= 2
    slower["target_step"] = None  # ... and, another sample of the same cell, never met the target
    rerun_modeled = {p: {**m, "time_to_target_s": None} for p, m in rec["modeled"].items()}
    rerun = {"record_id": rec["record_id"], "timing_inputs": slower, "modeled": rerun_modeled, "wall_s": 99.0}
    verified = _verified(tmp_path / "v", lb, rec, rerun)
    assert verified["verification"] == "verified" and "times_from" not in verified
    plain = to_frame([copy.deepcopy(rec)]).iloc[0]
    row = to_frame([verified]).iloc[0]
    for p in PROFILES:
        assert math.isfinite(plain[f"time_to_target_s@{p}"])
        assert row[f"time_to_target_s@{p}"] == plain[f"time_to_target_s@{p}"]
        assert row[f"total_s@{p}"] == plain[f"total_s@{p}"]
    assert row["final_metric"] == rec["final_metric"] and row["timing_inputs"] == plain["timing_inputs"]
    base = lb.make_record("cifar10", "none", 0)
    base["timing_inputs"] = _committed_inputs()
    frames = [to_frame([copy.deepcopy(base), r]) for r in (copy.deepcopy(rec), verified)]
    scores = [benchmark_score(aggregate(f)).table for f in frames]
    assert scores[0]["score"].tolist() == scores[1]["score"].tolist()
