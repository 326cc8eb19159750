"""The task matrix: CIFAR-10 image classification, SST-2 fine-tuning, Shakespeare pretraining.

Each task is one module; ``get_task_class(name)`` finds it by name.
"""

from __future__ import annotations

import importlib

from .api import (
    PRECISIONS,
    TIERS,
    Batch,
    DataMissingError,
    Metric,
    Task,
    TaskError,
    TierBudget,
    autocast,
    default_data_dir,
    did_you_mean,
)

__all__ = [
    "TIERS",
    "PRECISIONS",
    "autocast",
    "Batch",
    "DataMissingError",
    "Metric",
    "Task",
    "TaskError",
    "TierBudget",
    "default_data_dir",
    "available_tasks",
    "get_task_class",
    "build_task",
    "register_task",
]

# name -> module that defines it (imported lazily: torchvision / transformers are heavy)
_TASK_MODULES = {
    "cifar10": "tasks.cifar10",
    "sst2": "tasks.sst2",
    "shakespeare": "tasks.shakespeare",
    "cola": "tasks.cola",
    "mrpc": "tasks.mrpc",
    "rte": "tasks.rte",
    "stsb": "tasks.stsb",
    "wikitext2": "tasks.wikitext2",
}


_EXTRA: dict[str, type[Task]] = {}


def register_task(name: str, cls: type[Task]) -> type[Task]:
    """Add a task class under ``name`` (test fixtures and user plugins; built-ins are fixed)."""
    if name in _TASK_MODULES or (name in _EXTRA and _EXTRA[name] is not cls):
        raise TaskError(f"task name {name!r} is already taken")
    cls.name = name
    _EXTRA[name] = cls
    return cls


def available_tasks() -> list[str]:
    """Names of all tasks."""
    return sorted([*_TASK_MODULES, *_EXTRA])


def get_task_class(name: str) -> type[Task]:
    """The Task subclass called ``name``; unknown names list the valid ones."""
    if name in _EXTRA:
        return _EXTRA[name]
    if name not in _TASK_MODULES:
        raise TaskError(
            f"unknown task {name!r}{did_you_mean(name, available_tasks())}; valid tasks: {', '.join(available_tasks())}"
        )
    module = importlib.import_module(_TASK_MODULES[name])
    return module.TASK


def build_task(
    name: str, tier: str = "smoke", seed: int = 0, data_dir=None, features=frozenset(), feature_options=None
) -> Task:
    """Instantiate a task by name; ``feature_options`` (feature -> options) configure enabled features."""
    task = get_task_class(name)(tier=tier, seed=seed, data_dir=data_dir, features=frozenset(features))
    if feature_options:
        task.set_feature_options(feature_options)
    return task
