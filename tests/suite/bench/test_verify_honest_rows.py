"""Issue 45: honest rows verify and ``verify`` always ends with a report.

Each test failed on 68ecf20: the loopback allowance counted one process for a 4-stage cell whose stage
count came from the tier default (``config.stages`` None; the count is in ``run.n_stages``); a row with
several recorded seeds ended ``verify`` with a FileNotFoundError traceback (the lazy loop over the
row's other seeds ran after the code trees were closed) and no verification file; a re-run that produced
no ok record read as a loopback side channel; collectives switched the loopback audit off."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from test_verify import MACHINE, _fake_entry, _rec  # noqa: E402

from suite.bench.verify import VerifyError, loopback, report, rerun, sandbox  # noqa: E402
from suite.bench.verify.rerun import Rerun  # noqa: E402


def _four_stage_none(wire: int, messages: int) -> dict:
    half = {"raw": wire, "wire": wire // 2, "messages": messages // 2}
    return {
        "bytes": {"forward": dict(half), "backward": dict(half), "dp": {"raw": 0, "wire": 0, "messages": 0}},
        "eval_bytes": {"raw": 0, "wire": 0, "messages": 0},
        "config": {"stages": None, "dp": 1, "tp": 1},  # the tier's default stage count applied
        "run": {"n_stages": 4, "dp": 1},
    }


def test_the_loopback_allowance_counts_the_records_own_stages_and_replicas():
    rec = _four_stage_none(860_556, 849)
    assert loopback.processes(rec) == 4
    # measured on an honest 4-stage none cell (docs/reliability.md): lo carried 1,295,019 bytes; an honest
    # slow one at load ~15 went 2.7 kB over the one-process allowance (retransmits), which failed the row
    slow = sandbox.Loopback(0, 0, loopback.allowance({**rec, "run": {}, "config": {}}) + 2_700, 9000)
    assert loopback.audit(rec, slow)[0] == ""
    dp = {**rec, "config": {"stages": 1, "dp": 2}, "run": {"n_stages": 1, "dp": 2}}
    assert loopback.processes(dp) == 2


def test_collectives_are_audited_and_one_replica_puts_nothing_on_the_wire():
    """Before: any collective kind in the byte set switched the audit off for the whole re-run, and
    ``--dp fp16 --dp-size 1`` made one with one replica: a UDP side channel then went unaudited."""
    rec = _four_stage_none(10_000, 20)
    rec["bytes"]["dp"] = {"raw": 2_000_000, "wire": 1_000_000, "messages": 40}  # counted, never sent
    honest = sandbox.Loopback(0, 0, 60_000, 200)
    udp = sandbox.Loopback(0, 0, 900_000, 900)  # the gradient's worth on a side channel
    assert loopback.audit(rec, honest)[0] == ""
    why, seen = loopback.audit(rec, udp)
    assert why.startswith("side channel: lo carried 900000 bytes") and seen["audited"] and seen["collectives"]
    two = copy.deepcopy(rec)
    two["run"]["dp"] = 2  # two replicas: a ring all-reduce puts up to 2 (n - 1) / n of each count on lo
    assert loopback.audit(two, sandbox.Loopback(0, 0, 1_900_000, 900))[0] == ""
    assert loopback.audit(two, sandbox.Loopback(0, 0, 3_000_000, 900))[0].startswith("side channel")


class _ClosingTrees:
    """Code trees that, like the real ones, are gone once closed."""

    def __init__(self, repo, base):
        self.base_commit = "b" * 40
        self.closed = False

    def tree(self, commit):
        if self.closed:
            raise FileNotFoundError("/tmp/mpcbench-verify-tree-x/abc: gone")
        return "a" * 40, Path(".")

    def close(self):
        self.closed = True


def test_a_row_with_several_seeds_gets_a_status_and_the_report_is_written(tmp_path, monkeypatch):
    """Before: the other seeds of a row were compared after the code trees were closed; the verifier's
    own seeds of the row then raised FileNotFoundError out of ``verify`` and no file was written."""
    recs = [_rec(cell_id=f"c{s}", key=f"k{s}", seed=s, config={"task": "cifar10", "seed": s}) for s in range(3)]
    entry = _fake_entry(tmp_path, monkeypatch, recs)
    monkeypatch.setattr(report, "CodeTrees", _ClosingTrees)
    out = report.verify_entry(entry, base="HEAD", seed=3, fraction=0.0, write=True)
    (row,) = out["rows"]
    assert row["status"] in ("verified", "failed", "cannot verify")
    assert {c["record_id"] for c in out["cells"] if c["kind"] != "held-out"} == {r["record_id"] for r in recs}
    assert json.loads((entry / "verification.json").read_text())["rows"][0]["row_id"] == row["row_id"]
    # the verifier's own (held-out) seed of the row ran from an open tree and was judged
    (held,) = [c for c in out["cells"] if c["kind"] == "held-out"]
    assert held["status"] == "within spread", held


def test_a_surprise_in_one_comparison_is_that_rows_status_not_a_traceback(tmp_path, monkeypatch):
    recs = [_rec(cell_id=f"c{s}", key=f"k{s}", seed=s, config={"task": "cifar10", "seed": s}) for s in range(2)]
    entry = _fake_entry(tmp_path, monkeypatch, recs)
    calls = []

    def fake_run(rec, *a, **kw):
        calls.append(rec["seed"])
        if len(calls) > 1:  # the verifier's own seeds of the row
            raise KeyError("surprise")
        return Rerun(copy.deepcopy(rec), dict(MACHINE), [0.4, 0.4])

    monkeypatch.setattr(report, "run_cell_contained", fake_run)
    out = report.verify_entry(entry, base="HEAD", seed=3, fraction=0.0, write=True)
    (row,) = out["rows"]
    assert row["status"] == "cannot verify"
    held = next(c for c in out["cells"] if c["kind"] == "held-out")
    assert held["status"] == "cannot verify" and "raised (KeyError)" in held["detail"] and "\n" not in held["detail"]
    assert (entry / "verification.json").is_file()


def test_a_rerun_that_produced_no_record_says_so_and_is_never_a_side_channel(monkeypatch):
    """Before: a re-run whose cell failed counted little wire while lo carried the run's traffic, so the
    row read "side channel"."""
    failed = {**_four_stage_none(0, 0), "status": "failed", "error": "RuntimeError: rank 2 died"}
    lots = sandbox.Loopback(0, 0, 50_000_000, 90_000)
    monkeypatch.setattr(rerun, "_once", lambda *a, **k: (copy.deepcopy(failed), lots, {}))
    try:
        rerun.run_cell_contained({}, Path("."), "a" * 40, Path("."), 60.0, 1, None, attempts=1)  # type: ignore[arg-type]
    except rerun.NoRecord as e:
        assert "produced no ok record (its cell ended failed)" in str(e) and "side channel" not in str(e)
    else:
        raise AssertionError("a failed re-run was audited as if it had counted its wire")
    assert issubclass(rerun.NoRecord, VerifyError)


def test_a_missing_rerun_record_reads_rerun_failed_with_the_reason(tmp_path, monkeypatch):
    recs = [_rec()]
    entry = _fake_entry(tmp_path, monkeypatch, recs)

    def no_record(rec, *a, **kw):
        raise rerun.NoRecord("the re-run produced no record (exit 1)")

    monkeypatch.setattr(report, "run_cell_contained", no_record)
    out = report.verify_entry(entry, base="HEAD", seed=1, write=False)
    (cell,) = out["cells"]
    assert cell["status"] == "rerun failed" and cell["detail"] == "the re-run produced no record (exit 1)"
