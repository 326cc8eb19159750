"""ruff: the lint rules and the formatting of ``pyproject.toml`` ([tool.ruff]) hold in every Python file.

Files written before ruff was configured are listed in :data:`PENDING` until the one
repository-wide pass (``ruff check --fix . && ruff format .``, run once by the coordinator so
that it does not conflict with branches in flight) cleans them; empty the list then. Every
other file, a new one included, must pass both checks.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUFF = shutil.which("ruff")
pytestmark = pytest.mark.skipif(RUFF is None, reason="ruff is not installed (pip install -e '.[dev]')")

PENDING: frozenset[str] = frozenset(
    {
        "benchmarks/_harness.py",
        "benchmarks/conftest.py",
        "benchmarks/load_robustness_check.py",
        "benchmarks/network_model_check.py",
        "benchmarks/report.py",
        "benchmarks/test_compressor_speed.py",
        "benchmarks/test_leaderboard_scale.py",
        "benchmarks/test_pipeline_overhead.py",
        "compressors/api.py",
        "compressors/builtins/__init__.py",
        "compressors/builtins/aqsgd.py",
        "compressors/builtins/error_feedback.py",
        "compressors/builtins/quantization.py",
        "compressors/builtins/subspace.py",
        "compressors/contract.py",
        "leaderboard/app.py",
        "leaderboard/frame.py",
        "leaderboard/networks.py",
        "leaderboard/rules.py",
        "leaderboard/screenshot.py",
        "leaderboard/statistics.py",
        "leaderboard/submissions.py",
        "leaderboard/views.py",
        "suite/bench/cell.py",
        "suite/bench/cli.py",
        "suite/bench/forkserver.py",
        "suite/bench/links.py",
        "suite/bench/options.py",
        "suite/bench/pytest_plugin.py",
        "suite/bench/record_builder.py",
        "suite/bench/runner.py",
        "suite/bench/store.py",
        "suite/bench/submit.py",
        "suite/pipeline/accounting.py",
        "suite/pipeline/boundary.py",
        "suite/pipeline/config.py",
        "suite/pipeline/data_parallel.py",
        "suite/pipeline/emulation.py",
        "suite/pipeline/launch.py",
        "suite/pipeline/link_model.py",
        "suite/pipeline/netns.py",
        "suite/pipeline/overhead.py",
        "suite/pipeline/placement.py",
        "suite/pipeline/result.py",
        "suite/pipeline/schedules.py",
        "suite/pipeline/stage.py",
        "suite/pipeline/summary.py",
        "suite/pipeline/timing.py",
        "suite/pipeline/trainer.py",
        "suite/pipeline/transport.py",
        "suite/pipeline/wire_check.py",
        "suite/pipeline/worker.py",
        "suite/results/network.py",
        "tasks/__init__.py",
        "tasks/api.py",
        "tasks/cifar10.py",
        "tasks/data.py",
        "tasks/gpt.py",
        "tasks/schedules.py",
        "tasks/shakespeare.py",
        "tasks/sst2.py",
        "tasks/standalone.py",
        "tests/architecture/test_layers.py",
        "tests/compressors/test_autoencoder.py",
        "tests/compressors/test_error_feedback.py",
        "tests/compressors/test_fast_paths.py",
        "tests/compressors/test_quantization.py",
        "tests/compressors/test_registry.py",
        "tests/compressors/test_sparsification.py",
        "tests/conftest.py",
        "tests/fixtures/faulty_plugin_unimportable.py",
        "tests/fixtures/netns_pair.py",
        "tests/leaderboard/conftest.py",
        "tests/leaderboard/test_app.py",
        "tests/leaderboard/test_browser.py",
        "tests/leaderboard/test_integrity.py",
        "tests/leaderboard/test_labels.py",
        "tests/leaderboard/test_ranking.py",
        "tests/leaderboard/test_statistics.py",
        "tests/leaderboard/test_submissions.py",
        "tests/reliability/conftest.py",
        "tests/reliability/reliability_support.py",
        "tests/reliability/test_bad_config.py",
        "tests/reliability/test_crash_resume.py",
        "tests/reliability/test_determinism.py",
        "tests/reliability/test_distributed_faults.py",
        "tests/reliability/test_faulty_plugins.py",
        "tests/suite/test_cell.py",
        "tests/suite/test_check.py",
        "tests/suite/test_cli.py",
        "tests/suite/test_data_parallel_hook.py",
        "tests/suite/test_emulated_links.py",
        "tests/suite/test_launch_errors.py",
        "tests/suite/test_matrix_config.py",
        "tests/suite/test_network_model.py",
        "tests/suite/test_pipeline_distributed.py",
        "tests/suite/test_pipeline_single.py",
        "tests/suite/test_provenance.py",
        "tests/suite/test_pytest_plugin.py",
        "tests/suite/test_schedules_and_transport.py",
        "tests/suite/test_store.py",
        "tests/suite/test_timing.py",
        "tests/tasks/test_task_cifar10.py",
        "tests/tasks/test_task_contract.py",
        "tests/tasks/test_task_shakespeare.py",
        "tests/tasks/test_task_sst2.py",
    }
)


def _ruff(*args: str) -> list[str]:
    """Paths (relative to the repository) that ``ruff <args>`` reports, one per problem."""
    r = subprocess.run([RUFF, *args, "--output-format", "concise", "."], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode in (0, 1), r.stderr
    return [line for line in r.stdout.splitlines() if line.split(":", 1)[0].endswith(".py")]


def test_lint_rules_hold():
    problems = [p for p in _ruff("check", "--no-fix") if p.split(":", 1)[0] not in PENDING]
    assert problems == [], "ruff check (fix with `ruff check --fix <file>`):\n" + "\n".join(problems)


def test_files_are_formatted():
    problems = [p for p in _ruff("format", "--check") if p.split(":", 1)[0] not in PENDING]
    assert problems == [], "ruff format --check (fix with `ruff format <file>`):\n" + "\n".join(problems)


def test_pending_files_exist():
    assert sorted(f for f in PENDING if not (ROOT / f).is_file()) == []
