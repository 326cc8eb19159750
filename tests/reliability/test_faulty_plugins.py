"""Faulty compressor plugins (tests/fixtures/faulty_plugins.py): each fails only its own cell,
with a one-line reason that names the fault, and the rest of the matrix and the store survive.

Two layers:

- every fault, in process: the cell runs through exactly the code its child process runs
  (``suite.bench.cell.execute``) and the runner's reading of the outcome (``suite.bench.cell.interpret``),
  so each specific reason is checked without paying a process start per fault;
- a small matrix through the real runner (``suite.bench.runner.run_cells``: one child process per
  cell, time limits, the results store): a raising plugin, a plugin too slow for its cell's
  time limit and a plugin module that does not import, next to a healthy baseline.

The data-parallel gradient path gets the same runtime checks as the pipeline boundaries
(tested on a one-replica gloo group, in process).
"""

from __future__ import annotations

import inspect
import json
import os
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
import torch
from reliability_support import FAULTY, TINY, UNIMPORTABLE, run_in_process, tiny_config

from suite.bench.store import ResultsStore, read_jsonl
from suite.results.records import validate_record

CONSISTENCY = {"MPCBENCH_CHECK_CONSISTENCY": "1"}

# spec -> (status, [substrings of the one-line reason], extra cell fields, env)
# The tiny task's activation at boundary 0 is one micro-batch of 4 rows x 32 features.
FAULT_CASES: dict[str, tuple[str, list[str], dict, dict]] = {
    "fault_raise_compress": (
        "failed",
        ["RuntimeError: fault_raise_compress: injected failure in compress at step 0 second line"],
        {},
        {},
    ),
    "fault_raise_decompress": (
        "failed",
        ["ValueError: fault_raise_decompress: injected failure in decompress"],
        {},
        {},
    ),
    "fault_wrong_shape": (
        "failed",
        [
            "CompressorError: fault_wrong_shape: decompress returned (128,) torch.float32 on cpu, expected (4, 32) torch.float32 on cpu",
            "activation boundary 0 step 0",
        ],
        {},
        {},
    ),
    "fault_wrong_dtype": (
        "failed",
        [
            "CompressorError: fault_wrong_dtype: decompress returned (4, 32) torch.float64 on cpu, expected (4, 32) torch.float32"
        ],
        {},
        {},
    ),
    "fault_nan": (  # named at the boundary whose decoder made it, not as the next stage's diverged input
        "failed",
        [
            "CompressorError: fault_nan: decompress returned 128 non-finite value(s) (NaN/Inf) of 128 from a finite "
            "payload (at activation boundary 0 step 0)"
        ],
        {},
        {},
    ),
    "fault_wrong_device": (
        "failed",
        ["CompressorError: fault_wrong_device: compress returned payload tensor 0 on device meta, expected cpu"],
        {},
        {},
    ),
    "fault_wrong_device(side=output)": (
        "failed",
        [
            "CompressorError: fault_wrong_device(side=output): decompress returned (4, 32) torch.float32 on meta, "
            "expected (4, 32) torch.float32 on cpu"
        ],
        {},
        {},
    ),
    "fault_non_tensor": (
        "failed",
        ["CompressorError: fault_non_tensor: compress must return a tuple of tensors, got tuple containing list"],
        {},
        {},
    ),
    "fault_diverge": (
        "failed",
        [
            "CompressorError: fault_diverge: sender/receiver consistency check (MPCBENCH_CHECK_CONSISTENCY=1) failed at "
            "activation boundary 0 step 0 micro-batch 0",
            "a twin receiver fed the same payloads decoded a different tensor",
        ],
        {},
        CONSISTENCY,
    ),
    "fault_slow(seconds=0.5)": ("timeout", ["RunTimeout: run exceeded time_limit_s=1"], {"time_limit_s": 1.0}, {}),
    # allowed (bytes are measured, so the numbers stay honest) but flagged in the record
    "fault_expand": ("ok", [], {}, {}),
}


@pytest.fixture(scope="module")
def in_process(faulty_registry, tmp_path_factory):
    """Every fault cell (and a healthy control cell) run in process into one store."""
    tmp = tmp_path_factory.mktemp("faults")
    store = ResultsStore(tmp / "store.jsonl")
    records = {}
    for i, (spec, (_, _, fields, env)) in enumerate({"none": ("ok", [], {}, {}), **FAULT_CASES}.items()):
        with pytest.MonkeyPatch.context() as mp:
            for k, v in env.items():
                mp.setenv(k, v)
            records[spec] = run_in_process(tiny_config(spec, **fields), tmp / f"cell{i}")
        store.append(records[spec])
    return records, store


@pytest.mark.parametrize("spec", [s for s, case in FAULT_CASES.items() if case[0] != "ok"])
def test_fault_fails_its_cell_with_a_one_line_reason(in_process, tally, spec):
    records, _ = in_process
    status, parts, _, _ = FAULT_CASES[spec]
    with tally.fault("plugin (in process)", spec):
        rec = records[spec]
        validate_record(rec)
        assert rec["status"] == status, rec["error"]
        err = rec["error"]
        assert "\n" not in err and "Traceback" not in err and len(err) <= 1000
        for p in parts:
            assert p in err, err
        assert rec["final_metric"] is None and rec["bytes"] is None and rec["cell_id"] == f"tiny-{spec}-seed0"


def test_payload_larger_than_raw_is_measured_and_flagged(in_process, tally):
    """Decision: a payload larger than the raw tensor is allowed (its bytes are counted from the
    wire, so it simply ranks low) but the record says so in ``warnings``."""
    records, _ = in_process
    with tally.fault("plugin (in process)", "fault_expand"):
        rec, none = records["fault_expand"], records["none"]
        assert rec["status"] == "ok"
        for d in ("forward", "backward"):
            b = rec["bytes"][d]
            assert b["wire"] >= 4 * b["raw"] > 0  # four copies + headers: measured, not claimed
            assert rec["compression_ratio"][d] < 0.26
        assert [w.split(":")[0] for w in rec["warnings"]] == ["forward", "backward"]
        assert "compressed payloads are larger than the raw tensors" in rec["warnings"][0]
        assert none["warnings"] == []  # the uncompressed baseline's header overhead is not flagged


def test_store_holds_every_cell_and_stays_valid(in_process, tally):
    records, store = in_process
    lines = store.path.read_text().splitlines()
    for line in lines:
        validate_record(json.loads(line))
    got, problems = read_jsonl(store.path)
    assert problems == [] and len(lines) == len(got)
    assert tally.cells("plugin (in process)", len(records), len({r["cell_key"] for r in got})) == 0
    assert {r["compressor"]: r["status"] for r in got}["none"] == "ok"
    assert len(pd.read_json(store.path, lines=True)) == len(records)


def test_unimportable_plugin_fails_only_its_cells(faulty_registry, tmp_path, tally):
    from suite.bench.cell import run_cell
    from suite.bench.matrix import Selection, plan_cells

    with tally.fault("plugin (in process)", "fault_unimportable"):
        sel = Selection(
            tasks=("tiny",), compressors=("fault_unimportable", "fp16"), plugins=(TINY, UNIMPORTABLE), steps=2
        )
        cells = plan_cells(sel)
        by = {c.config.cell_id: c for c in cells}
        assert set(by) == {"tiny-none-seed0", "tiny-fault_unimportable-seed0", "tiny-fp16-seed0"}
        assert by["tiny-none-seed0"].runnable and by["tiny-fp16-seed0"].runnable
        broken = by["tiny-fault_unimportable-seed0"]
        assert broken.error is not None
        rec = run_cell(broken, log_dir=tmp_path)  # recorded without starting a process
        validate_record(rec)
        assert rec["status"] == "failed"
        assert f"plugin {UNIMPORTABLE!r} failed to import: ModuleNotFoundError" in rec["error"]
        assert "mpcbench_fault_missing_dependency" in rec["error"] and "\n" not in rec["error"]


# --------------------------------------------------------------------------- the real runner
@pytest.mark.distributed  # one child process per cell
def test_faulty_cells_in_a_matrix_through_the_runner(faulty_registry, tmp_path, tally):
    """none + a raising plugin + a plugin too slow for its time limit + a plugin that does not
    import: the faulty cells fail (or time out) alone, the baseline finishes, the store is valid."""
    from suite.bench.matrix import Selection, plan_cells
    from suite.bench.runner import run_cells

    slow, limit = "fault_slow(seconds=5)", 3.0  # cells start in milliseconds from the runner's fork server
    cells = plan_cells(
        Selection(
            tasks=("tiny",),
            compressors=("fault_raise_compress", slow, "fault_unimportable"),
            plugins=(TINY, FAULTY, UNIMPORTABLE),
            steps=2,
            cell_timeout_s=300,
            mode="single",  # the in-process reasons (a submitted compressor's default, auto, runs under torchrun)
        )
    )
    cells = [replace(c, config=replace(c.config, time_limit_s=limit)) if slow in c.config.cell_id else c for c in cells]
    store = ResultsStore(tmp_path / "store.jsonl")
    outcomes = run_cells(cells, store, progress=False, stream=open(os.devnull, "w"))
    by = {o.cell.config.cell_id: o for o in outcomes}
    assert by["tiny-none-seed0"].status == "ok"
    with tally.fault("plugin (runner)", "fault_raise_compress"):
        raised = by["tiny-fault_raise_compress-seed0"]
        assert raised.status == "failed"
        assert raised.reason == "RuntimeError: fault_raise_compress: injected failure in compress at step 0 second line"
        # the traceback is in the cell's log; the record keeps one line
        log = Path(raised.record["log"]).read_text()
        assert "Traceback (most recent call last)" in log and "second line" in log
    with tally.fault("plugin (runner)", slow):
        timed = by[f"tiny-{slow}-seed0"]
        assert timed.status == "timeout"
        assert timed.reason == f"timeout: the cell ran longer than its time limit of {limit:g} s and was killed"
        assert limit <= timed.record["wall_s"] < limit + 30  # killed at the limit, not after 2 x 4 x 5 s
    with tally.fault("plugin (runner)", "fault_unimportable"):
        broken = by["tiny-fault_unimportable-seed0"]
        assert broken.status == "failed" and "failed to import: ModuleNotFoundError" in broken.reason
    records, problems = read_jsonl(store.path)
    assert problems == []
    assert tally.cells("plugin (runner)", len(cells), len({r["cell_key"] for r in records})) == 0
    assert sorted(r["status"] for r in records) == ["failed", "failed", "ok", "timeout"]


# --------------------------------------------------------------------------- plugins that hang at import
HANGING_PLUGINS = {
    # blocked in C (interrupted by the signal), and a busy loop that swallows ordinary exceptions
    "sleeps": "import time\ntime.sleep(10**6)\n",
    "spins": "while True:\n    try:\n        pass\n    except Exception:\n        pass\n",
}
HANG_COMPRESSOR = (
    "\nfrom compressors import Compressor, register\n\n\n@register('hangcomp')\nclass Hang(Compressor):\n"
    "    def compress(self, x, info):\n        return (x,)\n\n    def decompress(self, payload, info):\n"
    "        return payload[0]\n"
)


@pytest.mark.timeout(60)  # safety net: the deadline below must end the import long before
@pytest.mark.parametrize("kind", list(HANGING_PLUGINS))
def test_plugin_hanging_at_import_times_out_with_one_line(tmp_path, monkeypatch, tally, kind):
    import signal
    import time

    from compressors.api import CompressorError
    from compressors.registry import IMPORT_TIMEOUT_ENV, load_plugin

    plugin = tmp_path / f"hang_{kind}.py"
    plugin.write_text(HANGING_PLUGINS[kind] + HANG_COMPRESSOR)
    monkeypatch.setenv(IMPORT_TIMEOUT_ENV, "1")
    handler = signal.getsignal(signal.SIGALRM)
    with tally.fault("plugin (in process)", f"hangs at import ({kind})"):
        t0 = time.monotonic()
        with pytest.raises(CompressorError) as err:
            load_plugin(str(plugin))
        assert time.monotonic() - t0 < 10
        msg = str(err.value)
        assert (
            msg.startswith(
                f"plugin {str(plugin)!r} failed to import: PluginImportTimeout: import did not finish within 1 s"
            )
            and IMPORT_TIMEOUT_ENV in msg
            and "\n" not in msg
        )
        # the alarm is off again and whatever handled SIGALRM before (pytest-timeout) is back
        assert signal.getsignal(signal.SIGALRM) is handler
        assert signal.getitimer(signal.ITIMER_REAL)[0] > 10 or handler in (signal.SIG_DFL, None)


@pytest.mark.distributed  # the runner in a subprocess
@pytest.mark.timeout(300)  # safety net: without the deadline the run would hang forever
def test_plugin_hanging_at_import_is_refused_by_mpcbench_run_before_anything_trains(tmp_path, tally):
    """A --plugin named on the command line that hangs at import: exit 2 with one line once
    the deadline passes, before any cell (the none baseline included) trains; store untouched."""
    import subprocess
    import sys

    from compressors.registry import IMPORT_TIMEOUT_ENV

    plugin = tmp_path / "hang.py"
    plugin.write_text(HANGING_PLUGINS["sleeps"] + HANG_COMPRESSOR)
    store = tmp_path / "store.jsonl"
    cmd = [
        sys.executable,
        "-m",
        "suite",
        "run",
        "--task",
        "tiny",
        "--steps",
        "2",
        "--plugin",
        TINY,
        "--plugin",
        str(plugin),
        "--compressor",
        "hangcomp",
        "--results",
        str(store),
        "--no-progress",
    ]
    with tally.fault("plugin (runner)", "hangs at import"):
        repo = str(Path(__file__).resolve().parents[2])
        path = os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")]))
        env = {**os.environ, IMPORT_TIMEOUT_ENV: "1", "PYTHONPATH": path}
        r = subprocess.run(cmd, env=env, cwd=repo, capture_output=True, text=True, timeout=240)
        assert r.returncode == 2, r.stderr
        reason = f"plugin {str(plugin)!r} failed to import: PluginImportTimeout: import did not finish within 1 s"
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"mpcbench: error: {reason}"), r.stderr
        assert "nothing was run" in lines[0] and "Traceback" not in r.stderr
        assert not store.exists() or read_jsonl(store) == ([], [])


# --------------------------------------------------------------------------- --check-consistency
def test_check_consistency_config_field_turns_the_check_on(faulty_registry, tmp_path, monkeypatch):
    """``CellConfig.check_consistency`` (what ``--check-consistency`` sets) turns the check on for
    its run only, is recorded, and does not change the cell key."""
    from suite.pipeline.boundary import CONSISTENCY_ENV

    monkeypatch.delenv(CONSISTENCY_ENV, raising=False)
    on = run_in_process(tiny_config("fault_diverge", check_consistency=True), tmp_path / "on")
    assert on["status"] == "failed" and "\n" not in on["error"]
    assert "fault_diverge: sender/receiver consistency check" in on["error"]
    assert CONSISTENCY_ENV not in os.environ  # restored after the run
    off = run_in_process(tiny_config("fault_diverge"), tmp_path / "off")
    assert off["status"] == "ok"  # without the check a divergent plugin trains on garbage, silently
    assert on["cell_key"] == off["cell_key"]
    assert (on["config"]["check_consistency"], on["provenance"]["consistency_check"]) == (True, True)
    assert (off["config"]["check_consistency"], off["provenance"]["consistency_check"]) == (False, False)


@pytest.mark.distributed  # cells in child processes
def test_check_consistency_flag_fails_a_divergent_cell_through_the_cli(faulty_registry, tmp_path, capsys, tally):
    """``mpcbench run --check-consistency``: the choice reaches the cell processes; the divergent
    plugin's cell fails with a one-line reason, the healthy baseline passes the check."""
    from suite.bench.cli import main
    from suite.pipeline.boundary import CONSISTENCY_ENV

    store = tmp_path / "store.jsonl"
    with tally.fault("plugin (runner)", "fault_diverge (--check-consistency)"):
        rc = main(
            [
                "run",
                "--task",
                "tiny",
                "--steps",
                "2",
                "--plugin",
                TINY,
                "--plugin",
                FAULTY,
                "--compressor",
                "fault_diverge",
                "--check-consistency",
                "--mode",
                "single",
                "--results",
                str(store),
                "--no-progress",
            ]
        )
        err = capsys.readouterr().err
        assert rc == 1, err
        assert "consistency check on" in err
        assert (
            "failed: tiny-fault_diverge-seed0: CompressorError: fault_diverge: sender/receiver consistency check "
            "(MPCBENCH_CHECK_CONSISTENCY=1) failed at activation boundary 0 step 0 micro-batch 0"
        ) in err
        records, problems = read_jsonl(store)
        assert problems == [] and CONSISTENCY_ENV not in os.environ
        by = {r["compressor"]: r for r in records}
        assert by["none"]["status"] == "ok" and by["fault_diverge"]["status"] == "failed"
        assert "\n" not in by["fault_diverge"]["error"]
        for r in records:  # recorded: requested (config) and in effect in the cell process (provenance)
            assert r["config"]["check_consistency"] is True and r["provenance"]["consistency_check"] is True
    assert tally.cells("plugin (runner)", 2, len({r["cell_key"] for r in records})) == 0


# --------------------------------------------------------------------------- data-parallel path
@pytest.mark.parametrize(
    "spec, reason",
    [
        (
            "fault_wrong_dtype",
            "fault_wrong_dtype: decompress returned (300,) torch.float64 on cpu, expected (300,) torch.float32",
        ),
        ("fault_wrong_device", "fault_wrong_device: compress returned payload tensor 0 on device meta, expected cpu"),
        (
            "fault_wrong_device(side=output)",
            "decompress returned (300,) torch.float32 on meta, expected (300,) torch.float32 on cpu",
        ),
        ("fault_non_tensor", "fault_non_tensor: compress must return a tuple of tensors, got tuple containing list"),
        ("fault_raise_compress", "fault_raise_compress: injected failure in compress"),
    ],
)
def test_data_parallel_gradient_path_checks_the_same(faulty_registry, world_of_one, tally, spec, reason):
    from compressors.api import CompressorError
    from suite.pipeline.accounting import ByteMeter
    from suite.pipeline.data_parallel import CompressedReduce
    from suite.pipeline.timing import Clock

    hook = CompressedReduce(
        spec, stage=0, group=world_of_one, meter=ByteMeter(), clock=Clock(torch.device("cpu")), seed=0
    )
    with tally.fault("plugin (data-parallel hook)", spec):
        with pytest.raises((CompressorError, RuntimeError)) as err:
            hook.reduce(torch.randn(300), bucket=0)
        assert reason in str(err.value)


# --------------------------------------------------------------------------- no false alarms
def _builtin_plans() -> list[str]:
    """Every built-in at its defaults in the directions it supports (wrappers around topk)."""
    from compressors import available
    from compressors.api import TensorRole
    from compressors.registry import get_class

    out = []
    for name in available():
        cls = get_class(name)
        if not cls.__module__.startswith("compressors.builtins.") or cls.requires:
            continue
        spec = f"{name}(topk)" if "inner" in inspect.signature(cls.__init__).parameters else name
        fwd = spec if TensorRole.ACTIVATION in cls.roles else "none"
        bwd = spec if TensorRole.ACTIVATION_GRAD in cls.roles and not cls.differentiable else "none"
        if fwd != "none" or bwd != "none":
            out.append(f"{fwd}|{bwd}")
    return out


@pytest.mark.parametrize("plan", _builtin_plans())
def test_consistency_check_passes_every_builtin(faulty_registry, tmp_path, monkeypatch, plan):
    """The debug check must not flag correct compressors (sender and receiver agree)."""
    from suite.pipeline.runtime import run

    fwd, bwd = plan.split("|")
    monkeypatch.setenv("MPCBENCH_CHECK_CONSISTENCY", "1")
    result = run(tiny_config({"forward": fwd, "backward": bwd}, steps=1, eval_uncompressed=False))
    assert result.steps == 1 and result.bytes["forward"].messages > 0
