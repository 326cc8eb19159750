"""Tools are started from the running interpreter's environment, never found by name on PATH.

A test or command that runs ``pytest`` (or ``ruff``, ``streamlit``...) by name gets whatever PATH
reaches first, often another Python's, and then passes or fails for the machine's reasons, not
the project's. Python tools run as ``[sys.executable, "-m", tool]``; the console scripts the README
tells users to type exist in the environment ``ci/setup.sh`` builds.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYTHON_TOOLS = {"pytest", "mpcbench", "streamlit", "ruff", "mypy", "torchrun", "python", "python3", "pip", "ray"}
SUBPROCESS_CALLS = {"run", "Popen", "call", "check_call", "check_output"}
SCANNED = ("suite", "compressors", "tasks", "leaderboard", "tests", "benchmarks", "examples")


def _offences(tree: ast.AST) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func, first = node.func, node.args[0]
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name == "which" and isinstance(first, ast.Constant) and first.value in PYTHON_TOOLS:
            out.append((node.lineno, f"shutil.which({first.value!r})"))
        if name in SUBPROCESS_CALLS and isinstance(first, (ast.List, ast.Tuple)) and first.elts:
            head = first.elts[0]
            if isinstance(head, ast.Constant) and head.value in PYTHON_TOOLS:
                out.append((node.lineno, f"{name}([{head.value!r}, ...])"))
    return out


def test_the_scan_finds_a_tool_started_by_name():
    bad = "import subprocess, shutil\nsubprocess.run(['pytest', '-q'])\nshutil.which('ruff')\n"
    assert [line for line, _ in _offences(ast.parse(bad))] == [2, 3]
    good = (
        "import subprocess, sys\nsubprocess.run([sys.executable, '-m', 'pytest'])\nsubprocess.run(['git', 'status'])\n"
    )
    assert _offences(ast.parse(good)) == []


def test_no_python_tool_is_started_by_name():
    found = []
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*.py")):
            for line, what in _offences(ast.parse(path.read_text(), filename=str(path))):
                found.append(f"{path.relative_to(ROOT)}:{line}: {what}")
    assert found == [], "start these as [sys.executable, '-m', tool] (PATH may reach another Python):\n" + "\n".join(
        found
    )


@pytest.mark.parametrize("script", ["pytest", "mpcbench", "streamlit"])
def test_the_readmes_commands_exist_in_this_environment(script):
    """``source .venv/bin/activate`` then ``pytest`` / ``mpcbench`` / ``streamlit run`` must reach this Python."""
    if sys.prefix == sys.base_prefix:
        pytest.skip("not in a virtual environment: scripts live wherever this Python's installer put them")
    path = Path(sys.executable).with_name(script)
    assert path.exists(), f"{path} is missing: `pip install -e '.[dev]'` into this environment installs it"
