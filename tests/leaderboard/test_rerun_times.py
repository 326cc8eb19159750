"""Issue 36: a verified record's quality and time-to-target come from one run. The verification
re-run lends its seconds per step; the step at which the target was met stays the record's."""

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
from suite.results.network import PROFILES, TimingInputs, model_run


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


def test_a_record_that_met_its_target_keeps_meeting_it_with_its_reruns_times(tmp_path, lb):
    rec = lb.make_record("cifar10", "fp16", 0)
    rec["timing_inputs"] = _committed_inputs()
    rec["timing_inputs"]["target_step"] = 100.0  # the record met the target at step 100
    slower = copy.deepcopy(rec["timing_inputs"])
    for stage in slower["stages"]:  # the re-run ran slower
        for a in stage["actions"].values():
            a["compute_s"] *= 2
    slower["target_step"] = None  # ... and, another sample of the same cell, never met the target
    rerun_modeled = {p: {**m, "time_to_target_s": None} for p, m in rec["modeled"].items()}
    rerun = {"record_id": rec["record_id"], "timing_inputs": slower, "modeled": rerun_modeled, "wall_s": 99.0}
    r = _verified(tmp_path, lb, rec, rerun)
    assert r["times_from"] == "verification re-run" and r["wall_s"] == 99.0
    assert r["timing_inputs"]["target_step"] == 100.0  # the record's own step
    expected = model_run(
        TimingInputs.from_dict({**slower, "target_step": 100.0}), {p: PROFILES[p] for p in rec["modeled"]}
    )
    row = to_frame([r]).iloc[0]
    for p in rec["modeled"]:
        # before: the re-run's own time-to-target (None: "never reached") beside the record's quality
        assert row[f"time_to_target_s@{p}"] == expected[p]["time_to_target_s"]
        assert math.isfinite(row[f"time_to_target_s@{p}"])
    assert row["final_metric"] == rec["final_metric"]
