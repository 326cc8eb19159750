"""Fixtures for the runtime tests: the tiny task and the runtime test plugins.

``tiny_cell(**fields)`` builds a CellConfig for the ``tiny`` task (tests/fixtures/tiny_task.py)
with the runtime test plugins loaded; ``plan`` may be a spec string or a plan mapping.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

import pytest

from compressors.registry import load_plugin
from suite.config import CellConfig, CompressionPlan

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


@pytest.fixture
def processes_with_env() -> Callable[[str, str], list[int]]:
    """``find(name, value)``: pids of live processes whose environment has ``name=value``."""
    return _processes_with_env


def _processes_with_env(name: str, value: str) -> list[int]:
    needle = f"{name}={value}".encode()
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if needle in env and state != "Z":  # zombies are dead already (awaiting their parent)
            out.append(int(entry.name))
    return out


@pytest.fixture
def restore_registry():
    """Plugins a test imports register compressors: unregister them afterwards."""
    from compressors import registry

    saved = dict(registry._REGISTRY)
    yield
    registry._REGISTRY.clear()
    registry._REGISTRY.update(saved)
