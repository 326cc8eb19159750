"""The ``mpcbench`` command: list, run (with resume and a broken plugin), report, validate."""

from __future__ import annotations

import copy
import re
import subprocess
import sys
import uuid
from io import StringIO
from pathlib import Path

import pandas as pd
import pytest
import torch

from compressors import registry
from suite.bench.cli import main
from suite.bench.store import ResultsStore, dump_record, read_jsonl

REPO = Path(__file__).resolve().parents[3]
TINY = str(REPO / "tests" / "fixtures" / "tiny_task.py")


def cli(capsys, *args: str) -> tuple[int, str, str]:
    rc = main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


def test_list_compressors_with_params_roles_and_broken_plugins(capsys, monkeypatch):
    registry.discover()
    monkeypatch.setitem(
        registry._PLUGIN_ERRORS,
        "badplug",
        "plugin 'badplug' (bad_pkg.mod:Bad) failed to import: ImportError: no bad_dep",
    )
    rc, out, _ = cli(capsys, "list", "compressors")
    assert rc == 0
    assert "topk" in out and "params: ratio=0.1, granularity=sample, bits=0" in out
    assert "roles: activation, activation_grad, pseudo_grad, tp_activation, tp_activation_grad, weight_grad" in out
    assert "ef " in out and "inner=<required>" in out
    assert "requires: residual_subspace" in out
    assert "broken plugins (1)" in out and "badplug" in out and "ImportError: no bad_dep" in out


def test_list_tasks_and_tiers(capsys):
    rc, out, _ = cli(capsys, "list", "tasks", "tiers", "--plugin", TINY)
    assert rc == 0
    for text in ("cifar10", "sst2", "shakespeare", "tiny", "accuracy", "smoke", "quick", "full", "cell time limit"):
        assert text in out, text


def test_list_with_no_argument_lists_everything_and_a_typo_lists_the_choices(capsys):
    rc, out, _ = cli(capsys, "list")
    assert rc == 0 and "topk" in out and "cifar10" in out and "quick" in out
    with pytest.raises(SystemExit) as exit_:
        main(["list", "compresors"])
    assert exit_.value.code == 2
    assert "unknown 'compresors': choose from compressors, tasks, tiers" in capsys.readouterr().err


FAILS_IN_CELL = """
from compressors import Compressor, register


@register("brokencomp")
class BrokenComp(Compressor):
    \"\"\"Fails on the first tensor it is given.\"\"\"

    def compress(self, x, info):
        raise RuntimeError("brokencomp: totally_missing_dependency_xyz")

    def decompress(self, payload, info):
        return payload[0]
"""


def _more_seeds(records: list[dict], n: int) -> list[dict]:
    """Synthetic extra seeds of real records (for the multi-seed report only)."""
    out = []
    for r in records:
        if r["status"] != "ok":
            continue
        for seed in range(1, n):
            c = copy.deepcopy(r)
            c.update(seed=seed, record_id=uuid.uuid4().hex, cell_key=f"{r['cell_key'][:12]}{seed:04d}")
            c["final_metric"] = r["final_metric"] + (0.01 * seed if r["compressor"] == "none" else -0.2 - 0.01 * seed)
            out.append(c)
    return out


def test_run_resume_broken_plugin_report_validate(capsys, tmp_path, restore_registry):
    store = tmp_path / "store.jsonl"
    # -j 1: the progress lines in order (the default runs a cell per core)
    base = ["run", "--task", "tiny", "--plugin", TINY, "--results", str(store), "--no-progress", "-j", "1"]
    rc, out, err = cli(capsys, *base, "--compressor", "fp16")
    assert rc == 0, err
    assert "2 ok" in err
    # the closing summary: quality against none, the ratio and time-to-target of the cells it ran
    summary = out[out.index("summary of this run") :].splitlines()
    assert summary[1].split()[:6] == ["task", "compressor", "quality", "Δ", "vs", "none"], summary
    assert "time-to-target @" in summary[1]
    none, fp16 = (next(ln for ln in summary[2:4] if f" {c} " in ln) for c in ("none", "fp16"))
    assert "baseline" in none and re.search(r" (1\.9\d|2)x ", fp16), summary  # fp16: half the bytes
    # not a terminal: a line per cell start and end, with the time left once a cell has finished
    lines = [ln for ln in err.splitlines() if ln.startswith("[")]
    assert [ln.split()[:3] for ln in lines] == [
        ["[1/2]", "start", "tiny-none-seed0"],
        ["[1/2]", "ok", "tiny-none-seed0"],
        ["[2/2]", "start", "tiny-fp16-seed0"],
        ["[2/2]", "ok", "tiny-fp16-seed0"],
    ]
    assert "ETA" in lines[1] and "[1/2 run," in lines[2] and "[2/2 run," in lines[3]
    records, problems = read_jsonl(store)
    assert problems == [] and [r["cell_id"] for r in records] == ["tiny-none-seed0", "tiny-fp16-seed0"]
    log = (
        store.parent / records[1]["log"]
    ).read_text()  # progress lines, written while it trained; path relative to the store
    steps = records[1]["run"]["steps"]
    assert f"step {steps}/{steps}  loss " in log, log
    fp16 = records[1]
    assert fp16["compression_ratio"]["forward"] > 1.5 and fp16["provenance"]["plugin_hashes"]["fp16"]
    assert fp16["provenance"]["machine"]["cpu_count"] >= 1 and "git_commit" in fp16["provenance"]

    # a --plugin that fails to import is refused before anything trains: exit 2, one line, the store untouched
    broken = tmp_path / "broken_comp.py"
    broken.write_text("def oops(:\n")
    rc, out, err = cli(capsys, *base, "--plugin", str(broken), "--compressor", "brokencomp", "--compressor", "fp16")
    assert rc == 2 and out == ""
    assert err.splitlines() == [
        f"mpcbench: error: plugin {str(broken)!r} failed to import: SyntaxError: invalid syntax "
        f"(broken_comp.py, line 1) (nothing was run; fix the plugin or leave out --plugin {broken})"
    ]
    assert len(read_jsonl(store)[0]) == 2
    # a compressor that fails in its cell fails only that cell; the others are already in the store
    failing = tmp_path / "failing_comp.py"
    failing.write_text(FAILS_IN_CELL)
    # --mode single: one process (a submitted compressor's default is torchrun, tested in tests/reliability)
    args = ("--plugin", str(failing), "--compressor", "brokencomp", "--compressor", "fp16", "--mode", "single")
    rc, _, err = cli(capsys, *base, *args)
    assert rc == 1
    assert "failed: tiny-brokencomp-seed0: RuntimeError: brokencomp: totally_missing_dependency_xyz" in err
    assert "already in store" in err
    records, problems = read_jsonl(store)
    assert problems == [] and len(records) == 3 and records[2]["status"] == "failed"

    rc, out, _ = cli(capsys, *base, "--compressor", "fp16", "--dry-run")
    assert rc == 0 and out.count("already in store") == 2

    rc, _, err = cli(capsys, "validate", str(store))
    assert rc == 0 and "OK; 3 valid records" in err

    # report over three seeds (two synthetic): mean ± std (n), delta with a significance marker
    multi = tmp_path / "multi.jsonl"
    multi.write_text("".join(dump_record(r) + "\n" for r in records + _more_seeds(records, 3)))
    rc, out, err = cli(capsys, "report", "--results", str(multi), "--network", "100Mbps")
    assert rc == 0, err
    assert "== tiny / smoke" in out and "(n=3)" in out and "baseline" in out
    assert "***" in out or "**" in out  # fp16's synthetic seeds are 0.2 worse: significant
    assert "time-to-target @ 100Mbps" in out
    assert "failed: tiny-brokencomp-seed0: RuntimeError: brokencomp" in out
    assert "Q: which compressor first reaches" in out  # the default rule answers a question, with the target
    assert max(len(line) for line in out.splitlines()) <= 120 and "cell step (raw)" not in out
    rc, out, _ = cli(capsys, "report", "--results", str(multi), "--wide", "--rule", "quality_at_ratio")
    assert rc == 0 and "cell step (raw)" in out and "Q: which compressor gives the highest" in out
    rc, out, _ = cli(capsys, "report", "--results", str(multi), "--format", "csv")
    frame = pd.read_csv(StringIO(out))
    assert set(frame["compressor"]) == {"none", "fp16", "brokencomp"} and "metric_mean" in frame
    rc, _, err = cli(capsys, "report", "--results", str(multi), "--network", "3Baud")
    assert rc == 2 and "unknown network profile '3Baud'" in err


def test_validate_problems_and_entries(capsys, tmp_path):
    good = tmp_path / "good.jsonl"
    ResultsStore(good)  # an empty store is valid
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"schema": "mpcbench.record/1"}\nnot json\n')
    rc, out, err = cli(capsys, "validate", str(bad))
    assert rc == 1
    assert f"{bad}: line 1: missing field 'record_id'" in out and f"{bad}: line 2: not valid JSON" in out
    # a submission folder goes through leaderboard.submissions
    entry = tmp_path / "records" / "my-entry"
    entry.mkdir(parents=True)
    (entry / "entry.yaml").write_text("name: My entry\nsubmitter: someone\ndate: 2026-11-22\n")
    (entry / "results.jsonl").write_text("not json\n")
    rc, out, _ = cli(capsys, "validate", str(entry))
    assert rc == 1 and "invalid JSON" in out
    (entry / "results.jsonl").write_text("")
    rc, out, _ = cli(capsys, "validate", str(tmp_path / "records"))
    assert rc == 0
    # a matrix file
    m = tmp_path / "m.yaml"
    m.write_text(
        "schema: mpcbench.matrix/1\ntiers:\n  smoke: {tasks: [cifar10], seeds: 1, compressors: [topk(ratio=9)]}\n"
    )
    rc, out, _ = cli(capsys, "validate", str(m))
    assert rc == 1 and "ratio=9 must be a number in" in out
    rc, _, err = cli(capsys, "validate", str(REPO / "suite" / "bench" / "matrix.yaml"))
    assert rc == 0, err


@pytest.mark.parametrize(
    "args, expected",
    [
        (["run", "--task", "nope"], "unknown task 'nope'; valid tasks:"),
        (["run", "--task", "cifar10", "--compressor", "topk(ratio=7)"], "ratio=7 must be a number"),
        (["run", "--task", "cifar10", "--compressor", "nosuch"], "unknown compressor 'nosuch'; valid names:"),
        (["run", "--seeds", "0,0"], "--seeds: '0,0' is not a seed count"),
        (["run", "--tier", "huge"], "unknown tier 'huge'; valid tiers: smoke, quick, plateau, scale, gpu, full"),
        (["run", "--matrix", "/nonexistent.yaml"], "cannot read matrix file"),
        pytest.param(
            ["run", "--tier", "gpu", "--task", "shakespeare"],
            "runs on cuda but no CUDA device is available here; pass --device cpu",
            marks=pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU"),
        ),
    ],
)
def test_usage_errors_are_one_line_exit_2(capsys, tmp_path, args, expected):
    rc, out, err = cli(capsys, *args, "--results", str(tmp_path / "s.jsonl"))
    assert rc == 2
    assert err.startswith("mpcbench: error: ") and expected in err and err.count("\n") == 1, err
    assert not (tmp_path / "s.jsonl").exists()


def test_python_m_suite_is_the_cli():
    r = subprocess.run([sys.executable, "-m", "suite", "--help"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "{list,run,links,check,submit,report,compare,validate,verify}" in r.stdout
    r = subprocess.run(
        [sys.executable, "-m", "suite", "run", "--mode", "mpi"], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 2 and "invalid choice: 'mpi'" in r.stderr


def test_check_consistency_flag_is_parsed_into_every_cell_without_changing_keys(restore_registry):
    from suite.bench.cli import _selection, build_parser
    from suite.bench.matrix import plan_cells

    base = ["run", "--task", "tiny", "--plugin", TINY, "--compressor", "fp16"]
    on = plan_cells(_selection(build_parser().parse_args([*base, "--check-consistency"])))
    off = plan_cells(_selection(build_parser().parse_args(base)))
    assert [c.config.check_consistency for c in on] == [True, True]
    assert [c.config.check_consistency for c in off] == [False, False]
    assert [c.config.key() for c in on] == [c.config.key() for c in off]  # a debug check, not a new cell


@pytest.mark.parametrize(
    "args, expected",
    [
        (
            ["--tier", "quik"],
            "unknown tier 'quik' (did you mean 'quick'?); valid tiers: smoke, quick, plateau, scale, gpu, full",
        ),
        (["--task", "cifar1"], "unknown task 'cifar1' (did you mean 'cifar10'?); valid tasks: cifar10, "),
        (["--compressor", "topkk(ratio=0.1)"], "unknown compressor 'topkk' (did you mean 'topk'?); valid names: "),
        (["--compressor", "zzz"], "unknown compressor 'zzz'; valid names: "),  # nothing close: no guess
    ],
    ids=["tier", "task", "compressor", "no-close-name"],
)
def test_unknown_names_suggest_the_closest_valid_one(capsys, args, expected):
    rc, out, err = cli(capsys, "run", "--dry-run", *args)
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert expected in err, err


def test_report_refuses_an_unknown_task_or_tier_listing_the_valid_ones(capsys):
    """`report --task bert` is a typo, not "no records yet": one line naming the valid tasks."""
    rc, out, err = cli(capsys, "report", "--task", "bert")
    assert rc == 2 and out == ""
    (line,) = err.strip().splitlines()
    assert line.startswith("mpcbench: error: unknown task 'bert'; valid: ") and "cifar10" in line and "sst2" in line
    rc, _, err = cli(capsys, "report", "--tier", "quik")
    assert rc == 2 and "unknown tier 'quik' (did you mean 'quick'?); valid: " in err


def test_run_defaults_to_a_cell_per_core_as_memory_allows(capsys, monkeypatch, tmp_path):
    from suite.bench import forkserver, resources, runner

    monkeypatch.setattr(resources, "machine_cores", lambda: 3)
    monkeypatch.setattr(resources.os, "sysconf", lambda name: {"SC_PAGE_SIZE": 4096}.get(name, 64 * 2**30 // 4096))
    assert resources.default_jobs() == 3  # 64 GiB hold more than 3 cells
    monkeypatch.setattr(resources.os, "sysconf", lambda name: {"SC_PAGE_SIZE": 4096}.get(name, 7 * 2**30 // 4096))
    assert resources.default_jobs() == 2  # 7 GiB hold two cells of CELL_MEMORY_GIB = 3
    seen = []
    monkeypatch.setattr(forkserver, "prestart", lambda *a: None)
    monkeypatch.setattr(runner, "run_cells", lambda cells, store, executor, **kw: seen.append(executor) or [])
    rc, _, err = cli(capsys, "run", "--task", "tiny", "--plugin", TINY, "--results", str(tmp_path / "s.jsonl"))
    assert rc == 0 and seen[0].slots == 2 and "2 cell(s) at once" in err
    rc, _, _ = cli(capsys, "run", "--task", "tiny", "--plugin", TINY, "--results", str(tmp_path / "s.jsonl"), "-j", "1")
    assert seen[1].slots == 1


@pytest.mark.parametrize("key", ["ssh-ed25519 AAAA", "ssh-rsa AAAAB3Nza", "/nonexistent/id_ed25519.pub"])
def test_a_bad_signing_key_stops_the_run_once_before_any_cell(capsys, monkeypatch, tmp_path, key):
    """Before: each cell raised on MPCBENCH_SIGNING_KEY when its record was stamped, after it trained."""
    from suite.bench import forkserver, runner

    monkeypatch.setattr(forkserver, "prestart", lambda *a: None)
    ran = []
    monkeypatch.setattr(runner, "run_cells", lambda cells, *a, **kw: ran.append(cells) or [])
    monkeypatch.setenv("MPCBENCH_SIGNING_KEY", key)
    store = tmp_path / "s.jsonl"
    rc, _, err = cli(capsys, "run", "--task", "tiny", "--plugin", TINY, "--results", str(store), "-j", "1")
    (line,) = err.strip().splitlines()
    assert rc == 2 and not ran and not store.exists()
    assert line.startswith("mpcbench: error: MPCBENCH_SIGNING_KEY") and "or unset it (nothing was run)" in line
    monkeypatch.delenv("MPCBENCH_SIGNING_KEY")  # no key: the run goes on
    rc, _, _ = cli(capsys, "run", "--task", "tiny", "--plugin", TINY, "--results", str(store), "-j", "1")
    assert rc == 0 and len(ran) == 1


def test_report_with_no_source_named_reads_the_checkouts_committed_records(tmp_path, monkeypatch, capsys):
    """A fresh clone has no results store: `mpcbench report` reads records/ (here a one-record copy)."""
    import suite.results

    src = REPO / "records" / "mpcbench-baselines"
    records = tmp_path / "records"
    entry = records / "mpcbench-baselines"
    entry.mkdir(parents=True)
    (entry / "entry.yaml").write_text((src / "entry.yaml").read_text())
    first = next(ln for ln in (src / "quick-cpu-2core-v2.jsonl").read_text().splitlines() if '"status":"ok"' in ln)
    (entry / "results.jsonl").write_text(first + "\n")
    monkeypatch.setattr(suite.results, "COMMITTED_RECORDS", records)
    monkeypatch.chdir(tmp_path / "records")  # no results/store.jsonl here
    assert main(["report"]) == 0
    out, err = capsys.readouterr()
    assert "== " in out and "no records to report" not in err and "no such results file" not in err
    monkeypatch.setattr(suite.results, "COMMITTED_RECORDS", tmp_path / "nowhere")
    assert main(["report"]) != 0
    assert "--records DIR" in capsys.readouterr().err
