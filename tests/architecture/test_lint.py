"""ruff: the lint rules and the formatting of ``pyproject.toml`` ([tool.ruff]) hold in every Python file.

Every file, a new one included, must pass both checks (fix with ``ruff check --fix . && ruff format .``).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# the ruff of this interpreter's environment, never one found on PATH (a machine's own may differ)
RUFF = [sys.executable, "-m", "ruff"] if importlib.util.find_spec("ruff") else None
pytestmark = pytest.mark.skipif(RUFF is None, reason="ruff is not installed (pip install -e '.[dev]')")


def _ruff(*args: str) -> list[str]:
    """Paths (relative to the repository) that ``ruff <args>`` reports, one per problem."""
    r = subprocess.run([*RUFF, *args, "--output-format", "concise", "."], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode in (0, 1), r.stderr
    return [line for line in r.stdout.splitlines() if line.split(":", 1)[0].endswith(".py")]


def test_lint_rules_hold():
    problems = [p for p in _ruff("check", "--no-fix")]
    assert problems == [], "ruff check (fix with `ruff check --fix <file>`):\n" + "\n".join(problems)


def test_files_are_formatted():
    problems = [p for p in _ruff("format", "--check")]
    assert problems == [], "ruff format --check (fix with `ruff format <file>`):\n" + "\n".join(problems)
