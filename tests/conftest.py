"""Fixtures shared across the test packages (tests/ is on sys.path, so ``fixtures`` imports)."""

from __future__ import annotations

from typing import Callable

import pytest

# the contract's asserts explain themselves (tests/compressors/test_roundtrip.py imports them)
pytest.register_assert_rewrite("compressors.contract")

from fixtures.processes import processes_with_env as _processes_with_env  # noqa: E402 (after the assert-rewrite hook)


@pytest.fixture
def restore_registry():
    """Plugins a test imports register compressors: unregister them afterwards."""
    from compressors import registry

    registry.discover()  # save the full registry: built-ins register once, at their first import
    saved = dict(registry._REGISTRY)
    yield
    registry._REGISTRY.clear()
    registry._REGISTRY.update(saved)


@pytest.fixture
def world_of_one():
    """A one-process gloo group (the data-parallel hook in process)."""
    import torch.distributed as dist

    if dist.is_initialized():
        pytest.skip("a process group is already initialized in this process")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield dist.group.WORLD
    finally:
        dist.destroy_process_group()


@pytest.fixture
def processes_with_env() -> Callable[[str, str], list[int]]:
    """``find(name, value)``: pids of live processes whose environment has ``name=value``."""
    return _processes_with_env
