"""The type checker is part of the test command: ``python -m mypy`` (the running interpreter's,
never a tool found on PATH) over the packages, with the settings of ``pyproject.toml``
([tool.mypy]: default strictness, a per-module list of the error codes still owed).

Its cache lives in the temp directory (one per checkout), so a second run checks only what
changed: about 50 s of CPU cold, a few seconds warm. In a whole-suite run the packages' check starts
in the background once the tests are collected and is collected at the end (conftest.py here)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import IO

import pytest

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(tempfile.gettempdir()) / f"mpcbench-mypy-{hashlib.sha1(str(ROOT).encode()).hexdigest()[:8]}"

pytest.importorskip("mypy", reason="mypy is in the dev extras (pip install -e '.[dev]')")


MYPY = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(CACHE)]
_background: tuple[subprocess.Popen, IO[str]] | None = None


def _mypy(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*MYPY, *args], cwd=ROOT, capture_output=True, text=True, timeout=900)


def start_in_background() -> None:
    """Start the packages' check now; :func:`test_the_packages_type_check` collects it."""
    global _background
    if _background is None:
        out = tempfile.TemporaryFile("w+")  # a file, not a pipe: mypy never blocks on unread output
        _background = (subprocess.Popen(MYPY, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, text=True), out)


def stop_background() -> None:
    global _background
    if _background is not None:
        proc, out = _background
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        out.close()
        _background = None


def test_the_packages_type_check():
    if _background is None:
        out = _mypy()
        rc, stdout = out.returncode, out.stdout
    else:
        proc, log = _background
        rc = proc.wait(timeout=900)
        log.seek(0)
        stdout = log.read()
        stop_background()
    assert rc == 0, f"mypy found type errors (settings: pyproject.toml [tool.mypy]):\n{stdout[-6000:]}"


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
