"""Property (issue 23, item 9): the spec parser, the verification reader, the record validator's
timing-input caps and the verifier's comparison never raise anything but their own one-line error on
hostile input, and a forged field is always seen."""

from __future__ import annotations

import copy
import hashlib
import json
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leaderboard.submissions import entry_file_hashes, read_verification, verification_status

TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=60)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    TEXT,
)
VALUES = st.recursive(SCALARS, lambda v: st.lists(v, max_size=4) | st.dictionaries(TEXT, v, max_size=4), max_leaves=12)
SPEC_PIECES = st.sampled_from(
    ["topk", "quant", "ef", "(", ")", "=", ",", "1", "+", "-", "0.1", "'x'", " ", "not ", "*"]
)


@settings(max_examples=200, deadline=None)
@given(st.one_of(TEXT, st.lists(SPEC_PIECES, max_size=400).map("".join)))
def test_the_spec_parser_gives_a_spec_or_one_line(text):
    from compressors.api import CompressorError
    from compressors.spec import parse_spec

    try:
        parse_spec(text)
    except CompressorError as e:
        assert "\n" not in str(e).strip() or "\n" in text


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    report=st.dictionaries(
        st.sampled_from(["schema", "status", "seed", "files", "cells", "rows", "reruns_sha256", "entry", "x"]), VALUES
    ),
    real_hashes=st.booleans(),
    honest_cells=st.booleans(),
)
def test_a_hostile_verification_file_never_reads_as_verified(report, real_hashes, honest_cells):
    d = Path(tempfile.mkdtemp())
    try:
        (d / "entry.yaml").write_text("name: e\nsubmitter: s\ndate: '2026-01-01'\n")
        (d / "results.jsonl").write_text("{}\n")
        if real_hashes:
            report["files"] = entry_file_hashes(d)
        if honest_cells:
            report["cells"] = [{"cell_id": "c", "record_id": "r", "status": "match"}]
        (d / "verification.json").write_text(json.dumps(report, default=str))
        verdicts = read_verification(d).rows
        # a verdict needs rows whose cells (with their row id, one a re-run) agree: never from random fields
        assert not any(v["status"] == "verified" for v in verdicts.values())
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _baseline() -> dict:
    path = next((Path(__file__).resolve().parents[2] / "records" / "mpcbench-baselines").glob("*.jsonl"))
    return json.loads(path.open().readline())


BASE = _baseline()


@settings(max_examples=100, deadline=None)
@given(key=st.sampled_from(["schedule", "steps", "counts", "stages", "microbatches", "replicas"]), value=VALUES)
def test_hostile_timing_inputs_are_a_record_error_or_valid(key, value):
    from suite.results.records import RecordError, validate_record

    rec = copy.deepcopy(BASE)
    rec["timing_inputs"][key] = value
    try:
        validate_record(rec)
    except RecordError as e:
        assert "\n" not in str(e)


COMPARED = [
    "compressor",
    "specs",
    "final_metric",
    "final_metric_uncompressed",
    "reached_target_step",
    "bytes",
    "bytes_per_boundary",
    "curve",
    "target",
    "run",
]


@settings(max_examples=100, deadline=None)
@given(key=st.sampled_from(COMPARED), value=VALUES, exact=st.booleans())
def test_the_verifier_sees_every_forged_field_and_never_raises(key, value, exact):
    from suite.bench.verify.compare import field_diffs

    old = copy.deepcopy(BASE)
    forged = copy.deepcopy(BASE)
    forged[key] = value
    diffs = field_diffs(forged, old, exact=exact, tol=0.05)
    assert all(isinstance(d, str) and "\n" not in d for d in diffs)
    if json.dumps(value, sort_keys=True, default=str) != json.dumps(old[key], sort_keys=True, default=str):
        same_number = isinstance(value, (int, float)) and not exact and key.startswith("final_metric")
        if not same_number:
            assert diffs, (key, value)


def test_the_reruns_file_hash_is_what_binds_it(tmp_path):
    """A sanity anchor for the property above: the real binding, built by hand, reads as verified."""
    (tmp_path / "entry.yaml").write_text("name: e\nsubmitter: s\ndate: '2026-01-01'\n")
    (tmp_path / "results.jsonl").write_text("{}\n")
    line = json.dumps({"record_id": "r", "row_id": "x"}) + "\n"
    report = {
        "schema": "mpcbench.verification/3",
        "status": "verified",
        "seed": 1,
        "files": {k: v for k, v in entry_file_hashes(tmp_path).items() if not k.endswith(".jsonl")},
        "rows": [{"row_id": "x", "status": "verified", "records": {"r": "h"}, "reruns": ["r"]}],
        "cells": [{"cell_id": "c", "record_id": "r", "row_id": "x", "kind": "re-run", "status": "match"}],
        "reruns_sha256": hashlib.sha256(line.encode()).hexdigest(),
    }
    (tmp_path / "verification.reruns").write_text(line)
    (tmp_path / "verification.json").write_text(json.dumps(report))
    assert read_verification(tmp_path).rows["x"]["status"] == "verified"
    assert verification_status(tmp_path) == "verified"
    (tmp_path / "verification.reruns").write_text(line.replace("r", "q"))
    assert read_verification(tmp_path).rows == {}
