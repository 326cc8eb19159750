"""The tests mirror the packages: ``tests/suite/<layer>/`` for each of ``suite/``'s layers, and
no two test modules share a basename (the test folders are not packages, so pytest would
refuse the second one in its default import mode)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _layers() -> set[str]:
    return {p.parent.name for p in (ROOT / "suite").glob("*/__init__.py")}


def test_suite_tests_live_in_the_folder_of_their_layer():
    tests = ROOT / "tests" / "suite"
    loose = sorted(p.name for p in tests.glob("test_*.py"))
    assert not loose, f"tests/suite/ holds {loose}: move them into tests/suite/<layer>/ ({sorted(_layers())})"
    folders = {p.name for p in tests.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders == _layers(), f"tests/suite/ folders {sorted(folders)} != suite/ layers {sorted(_layers())}"


def test_no_two_test_modules_share_a_basename():
    names = Counter(p.name for p in (ROOT / "tests").rglob("test_*.py"))
    assert not [n for n, k in names.items() if k > 1], f"duplicate test module names: {names.most_common(3)}"
