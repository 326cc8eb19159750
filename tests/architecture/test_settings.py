"""Every ``MPCBENCH_*`` environment variable has one row in ``suite.settings`` and in the docs table,
and ``suite`` reads them only through that module."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from suite import settings

ROOT = Path(__file__).resolve().parents[2]
NAME = re.compile(r"\bMPCBENCH_[A-Z0-9_]+\b")
SOURCES = sorted(p for pkg in ("suite", "compressors", "tasks", "leaderboard") for p in (ROOT / pkg).rglob("*.py"))


def test_every_variable_named_in_the_code_has_a_row():
    named = {m for p in SOURCES for m in NAME.findall(p.read_text())}
    rows = {s.name for s in settings.SETTINGS}
    assert named - rows == set(), "add a row to suite/settings.py SETTINGS"
    assert rows - named == set(), "a row for a variable nothing reads"


@pytest.mark.parametrize("row", settings.SETTINGS, ids=lambda s: s.name)
def test_each_row_names_files_that_exist_and_read_it(row):
    paths = [ROOT / part.strip() for chunk in row.read_by.split(",") for part in chunk.split("->")]
    assert all(p.is_file() for p in paths), row.read_by
    assert any(row.name in p.read_text() for p in paths), row.read_by


def test_the_docs_table_lists_every_variable():
    docs = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    assert {s.name for s in settings.SETTINGS} <= set(NAME.findall(docs))


def test_suite_reads_the_environment_only_through_settings():
    reads = re.compile(r"os\.environ(\.get)?\(?\[?[\"']MPCBENCH_|getenv\([\"']MPCBENCH_")
    bad = [str(p.relative_to(ROOT)) for p in (ROOT / "suite").rglob("*.py") if reads.search(p.read_text())]
    assert bad == []


def test_values_are_read_at_call_time(monkeypatch):
    monkeypatch.delenv("MPCBENCH_CHECK_CONSISTENCY", raising=False)
    assert settings.check_consistency() is False
    monkeypatch.setenv("MPCBENCH_CHECK_CONSISTENCY", "1")
    assert settings.check_consistency() is True
    monkeypatch.setenv("MPCBENCH_CLOCK", "fast")
    with pytest.raises(ValueError, match="valid values are events, sync"):
        settings.clock()
    with pytest.raises(KeyError, match="not an mpcbench setting"):
        settings.get("MPCBENCH_NOPE")
