"""Fixtures for the runtime tests: the tiny task and the runtime test plugins.

``tiny_cell(**fields)`` builds a CellConfig for the ``tiny`` task (tests/fixtures/tiny_task.py)
with the runtime test plugins loaded; ``plan`` may be a spec string or a plan mapping.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

from compressors.registry import load_plugin
from suite.pipeline.config import CellConfig, CompressionPlan

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
TINY_TASK = str(FIXTURES / "tiny_task.py")
RUNTIME_PLUGINS = str(FIXTURES / "runtime_plugins.py")
RECORD_SENDS = str(FIXTURES / "record_sends.py")


@pytest.fixture(scope="session")
def tiny_task() -> str:
    """Absolute path of the tiny task plugin (registered as ``tiny`` and ``tiny_adamw``)."""
    load_plugin(TINY_TASK)
    load_plugin(RUNTIME_PLUGINS)
    return TINY_TASK


@pytest.fixture(scope="session")
def fixture_paths(tiny_task: str) -> dict[str, str]:
    return {"tiny_task": TINY_TASK, "runtime_plugins": RUNTIME_PLUGINS, "record_sends": RECORD_SENDS}


@pytest.fixture
def tiny_cell(tiny_task: str) -> Callable[..., CellConfig]:
    def make(plan: Any = "none", plugins: tuple[str, ...] = (), task: str = "tiny", **fields: Any) -> CellConfig:
        if not isinstance(plan, CompressionPlan):
            plan = CompressionPlan.from_dict(plan)
        return CellConfig(task=task, plan=plan, plugins=(TINY_TASK, RUNTIME_PLUGINS, *plugins), **fields)

    return make
