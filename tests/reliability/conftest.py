"""Fixtures and the end-of-run tally report of the reliability tests (see reliability_support)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Iterator

import pytest
from reliability_support import FAULTY, TALLY, TALLY_ENV, TINY, Tally


@pytest.fixture(scope="session")
def tally() -> Tally:
    return TALLY


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if not TALLY.rows:
        return
    s = TALLY.summary()
    terminalreporter.write_sep("-", "mpcbench reliability tally")
    terminalreporter.write_line(
        f"faults injected: {s['faults_injected']}, faults caught: {s['faults_caught']}, "
        f"cells in checked stores: {s['cells_checked']}, cells lost: {s['cells_lost']}"
    )
    for area, a in s["by_area"].items():
        terminalreporter.write_line(
            f"  {area:<28} injected {a['injected']:>3}  caught {a['caught']:>3}  cells {a['cells']:>3}  lost {a['cells_lost']}"
        )
    path = os.environ.get(TALLY_ENV)
    if path:
        Path(path).write_text(json.dumps(s, indent=1) + "\n")
        terminalreporter.write_line(f"  written to {path}")


@pytest.fixture(scope="module")
def faulty_registry() -> Iterator[None]:
    """Load the faulty plugins for one module and unregister them afterwards, so that tests
    elsewhere that iterate over ``compressors.available()`` never meet them."""
    from compressors import registry
    from compressors.registry import load_plugin
    from suite.bench.plugins import plugin_module

    registry.discover()
    saved = dict(registry._REGISTRY)
    load_plugin(TINY)
    load_plugin(FAULTY)
    try:
        yield
    finally:
        registry._REGISTRY.clear()
        registry._REGISTRY.update(saved)
        for name in [n for n in registry._REGISTRY if n.startswith("fault_")]:
            registry._REGISTRY.pop(name)
        sys.modules.pop(plugin_module(FAULTY), None)  # the next load imports (and registers) again
