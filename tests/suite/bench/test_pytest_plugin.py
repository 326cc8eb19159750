"""The pytest entry: ``pytest suite --tier smoke`` on the tiny task, a broken plugin, resume, options."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pandas as pd
import pytest

from suite.bench.store import read_jsonl

pytest_plugins = ["pytester"]
# inner runs: no cache, and no hypothesis plugin (its summary re-imports hypothesis on every run)
INNER = ("-p", "no:cacheprovider", "-p", "no:hypothesispytest")
HOME = os.environ.get("HOME")  # pytester points HOME at its tmp dir; cells keep the real one

REPO = Path(__file__).resolve().parents[3]
SUITE = REPO / "suite"
TINY = str(REPO / "tests" / "fixtures" / "tiny_task.py")

EXPLODE = '''
from compressors import Compressor, register


@register("explode")
class Explode(Compressor):
    """Fault injection: raises in compress."""

    def compress(self, x, info):
        raise RuntimeError("kaboom in compress\\nsecond line")

    def decompress(self, payload, info):
        return payload[0]
'''


def test_matrix_run_broken_plugin_and_resume(pytester, restore_registry, monkeypatch):
    """In-process pytest runs (each cell still runs in its own child process)."""
    if HOME:  # same environment as the other tests: the cells reuse the runner's fork server
        monkeypatch.setenv("HOME", HOME)
        monkeypatch.delenv("USERPROFILE", raising=False)
    # under pytest-xdist (`pytest -n 2`) the inner run would read the outer worker's variable and
    # pytest-benchmark would switch itself off, leaving no --benchmark-json to check
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    (pytester.path / "explode.py").write_text(EXPLODE)
    store = pytester.path / "out" / "store.jsonl"
    bench = pytester.path / "bench.json"
    common = [
        str(SUITE),
        *INNER,
        "-rs",
        "--tier",
        "smoke",
        "--task",
        "tiny",
        "--plugin",
        TINY,
        "--results",
        "out/store.jsonl",
        "--mode",
        "single",  # the in-process reason (a submitted compressor's default, auto, runs under torchrun)
    ]
    r = pytester.runpytest_inprocess(
        *common, "--plugin", "explode.py", "--compressor", "explode", "--benchmark-json", str(bench)
    )
    out = r.stdout.str()
    assert r.ret == pytest.ExitCode.TESTS_FAILED, out
    r.assert_outcomes(passed=1, failed=1)
    assert "test_cell[tiny-explode-seed0]" in out
    assert "failed: RuntimeError: kaboom in compress second line" in out  # one line, no traceback
    records, problems = read_jsonl(store)
    assert problems == []
    by = {r["cell_id"]: r for r in records}
    assert set(by) == {"tiny-none-seed0", "tiny-explode-seed0"}
    assert by["tiny-explode-seed0"]["status"] == "failed"
    assert by["tiny-explode-seed0"]["error"] == "RuntimeError: kaboom in compress second line"
    assert by["tiny-none-seed0"]["status"] == "ok"
    assert (Path(store).parent / by["tiny-explode-seed0"]["log"]).read_text().count(
        "Traceback"
    ) >= 1  # relative to the store
    assert len(pd.read_json(store, lines=True)) == 2
    # --benchmark-json carries the timing and everything the store has
    benches = {b["extra_info"]["cell_id"]: b for b in json.loads(bench.read_text())["benchmarks"]}
    none = benches["tiny-none-seed0"]
    assert none["stats"]["rounds"] == 1 and none["stats"]["mean"] > 0
    assert none["extra_info"]["final_metric"] == by["tiny-none-seed0"]["final_metric"]
    assert none["extra_info"]["bytes"]["forward"]["wire"] > none["extra_info"]["bytes"]["forward"]["raw"] > 0
    assert set(none["extra_info"]["modeled_time_to_target_s"]) >= {"1Gbps"}
    assert benches["tiny-explode-seed0"]["extra_info"]["status"] == "failed"
    # the closing summary: the cells' quality against none, ratio and time-to-target (the failed cell has none)
    summary = out[out.index("summary of this run") :].splitlines()
    assert summary[1].split()[:3] == ["task", "compressor", "quality"] and "time-to-target @" in summary[1], out
    assert summary[2].split()[:4] == ["tiny", "/", "smoke", "none"] and "baseline" in summary[2], out

    # resume: the finished cell is skipped ("already in store"); nothing is appended
    r = pytester.runpytest_inprocess(*common, "--no-baseline", "--compressor", "none")
    assert r.ret == pytest.ExitCode.OK, r.stdout.str()
    r.assert_outcomes(skipped=1)
    assert "already in store" in r.stdout.str()
    assert len(read_jsonl(store)[0]) == 2


def test_check_consistency_option_reaches_the_cell(pytester, restore_registry, monkeypatch):
    """``--check-consistency`` is parsed, travels in the cell's config to its child process and
    fails a plugin whose receiver decodes differently from its sender, with one line."""
    if HOME:
        monkeypatch.setenv("HOME", HOME)
        monkeypatch.delenv("USERPROFILE", raising=False)
    monkeypatch.delenv("MPCBENCH_CHECK_CONSISTENCY", raising=False)
    faulty = str(REPO / "tests" / "fixtures" / "faulty_plugins.py")
    r = pytester.runpytest_inprocess(
        str(SUITE),
        *INNER,
        "--task",
        "tiny",
        "--steps",
        "2",
        "--plugin",
        TINY,
        "--plugin",
        faulty,
        "--compressor",
        "fault_diverge",
        "--no-baseline",
        "--check-consistency",
        "--mode",
        "single",
        "--results",
        "out/store.jsonl",
    )
    out = r.stdout.str()
    r.assert_outcomes(failed=1)
    assert "failed: CompressorError: fault_diverge: sender/receiver consistency check" in out
    (rec,), problems = read_jsonl(pytester.path / "out" / "store.jsonl")
    assert problems == [] and rec["status"] == "failed" and "\n" not in rec["error"]
    assert rec["config"]["check_consistency"] is True and rec["provenance"]["consistency_check"] is True


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has a GPU")
def test_cuda_cells_are_skipped_without_a_gpu(pytester, restore_registry):
    r = pytester.runpytest_inprocess(
        str(SUITE),
        *INNER,
        "-rs",
        "--task",
        "tiny",
        "--plugin",
        TINY,
        "--device",
        "cuda",
        "--compressor",
        "fp16",
        "--results",
        "out/store.jsonl",
    )
    r.assert_outcomes(skipped=2)
    assert "no CUDA device is available here" in r.stdout.str()
    assert not (pytester.path / "out" / "store.jsonl").exists()  # nothing ran, nothing recorded


def test_options_do_not_interfere_with_other_runs(pytester):
    pytester.makepyfile(test_plain="def test_one():\n    assert 1 + 1 == 2\n")
    result = pytester.runpytest_inprocess(*INNER)
    result.assert_outcomes(passed=1)
    assert not (pytester.path / "results").exists()
    # another project's pytest session: only the prefixed spellings (its own --device or --tier stay free)
    help_text = pytester.runpytest_inprocess(*INNER, "--help").stdout.str()
    for opt in ("tier", "compressor", "results", "cell-timeout", "plugin", "check-consistency", "device", "dry-run"):
        assert f"--mpcbench-{opt}" in help_text
        assert not re.search(rf"^  --{opt}\b", help_text, re.M)  # an option line, not a mention in a help text
    pytester.makeconftest("def pytest_addoption(parser):\n    parser.addoption('--device', default='tpu')\n")
    pytester.makepyfile(test_dev="def test_dev(request):\n    assert request.config.getoption('--device') == 'tpu'\n")
    pytester.runpytest_inprocess(*INNER, "test_dev.py").assert_outcomes(passed=1)


def test_this_checkout_adds_the_short_spellings(pytester):
    # the root conftest.py of the checkout (loaded for paths inside it) adds --tier etc.
    result = pytester.runpytest_inprocess(
        str(SUITE), *INNER, "--tier", "smoke", "--task", "tiny", "--plugin", TINY, "--dry-run"
    )
    assert result.ret == 0, result.stdout.str()[-2000:]
    result = pytester.runpytest_inprocess(
        str(SUITE),
        *INNER,
        "--mpcbench-tier",
        "smoke",
        "--mpcbench-task",
        "tiny",
        "--mpcbench-plugin",
        TINY,
        "--mpcbench-dry-run",
    )
    assert result.ret == 0, result.stdout.str()[-2000:]


def test_bad_selection_is_a_one_line_collection_error(pytester):
    result = pytester.runpytest_inprocess(str(SUITE), *INNER, "--task", "imagenet")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    out = result.stdout.str()
    assert "mpcbench: unknown task 'imagenet'; valid tasks:" in out
    assert "Traceback" not in out and "During handling" not in out
    result = pytester.runpytest_inprocess(str(SUITE), *INNER, "--seeds", "a,b")
    assert "mpcbench: --seeds: 'a,b' is not a seed count" in result.stdout.str()


def test_a_bad_signing_key_is_one_line_before_any_cell(pytester, monkeypatch):
    """Before: every collected cell trained and then failed stamping its record with MPCBENCH_SIGNING_KEY."""
    monkeypatch.setenv("MPCBENCH_SIGNING_KEY", "ssh-ed25519 AAAA")
    store = pytester.path / "out" / "store.jsonl"
    result = pytester.runpytest_inprocess(
        str(SUITE), *INNER, "--task", "tiny", "--plugin", TINY, "--results", str(store)
    )
    assert result.ret == pytest.ExitCode.INTERRUPTED and not store.exists()
    out = result.stdout.str()
    assert "mpcbench: MPCBENCH_SIGNING_KEY" in out and "or unset it (nothing was run)" in out
    assert "Traceback" not in out
