"""The type checker is part of the test command: ``python -m mypy`` (the running interpreter's,
never a tool found on PATH) over the packages, with the settings of ``pyproject.toml``
([tool.mypy]: default strictness, a per-module list of the error codes still owed).

Its cache lives in the temp directory (one per checkout), so a second run checks only what
changed: about 50 s of CPU cold, a few seconds warm."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(tempfile.gettempdir()) / f"mpcbench-mypy-{hashlib.sha1(str(ROOT).encode()).hexdigest()[:8]}"

pytest.importorskip("mypy", reason="mypy is in the dev extras (pip install -e '.[dev]')")


def _mypy(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(CACHE)]
    return subprocess.run([*cmd, *args], cwd=ROOT, capture_output=True, text=True, timeout=900)


def test_the_packages_type_check():
    out = _mypy()
    assert out.returncode == 0, f"mypy found type errors (settings: pyproject.toml [tool.mypy]):\n{out.stdout[-6000:]}"


def test_the_typed_contracts_are_visible_to_the_checker(tmp_path):
    # Selection is a real dataclass and Compressor declares what the runtime reads: misuse is caught
    bad = (
        "from suite.bench.options import Selection\n"
        "from compressors.api import Compressor\n"
        "Selection(tier=3)\n"
        "Compressor().stats().nope\n"
        "Compressor().inner.compress\n"
    )
    (tmp_path / "misuse.py").write_text(bad)
    out = _mypy(str(tmp_path / "misuse.py"))
    assert out.returncode == 1, out.stdout
    assert 'Argument "tier" to "Selection" has incompatible type "int"' in out.stdout, out.stdout
    assert '"Mapping[str, float]" has no attribute "nope"' in out.stdout, out.stdout
    assert 'Item "None" of "Compressor | None" has no attribute "compress"' in out.stdout, out.stdout
