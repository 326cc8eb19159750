"""The tasks: CIFAR-10 image classification; GLUE SST-2, CoLA, MRPC, RTE, STS-B fine-tuning;
Shakespeare (characters) and WikiText-2 (GPT-2) pretraining.

Each task is one module that defines a top-level ``DESCRIPTION`` literal and ``TASK`` (its
``Task`` subclass): ``tasks/<name>.py``, or ``<name>.py`` in a folder on ``$MPCBENCH_TASK_PATH``
(os.pathsep-separated; a task kept outside this package). ``get_task_class(name)`` finds it by
its file name; nothing else lists tasks.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import sys
from pathlib import Path

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
    "described_tasks",
    "get_task_class",
    "build_task",
    "register_task",
]

_HERE = Path(__file__).resolve().parent
_DESCRIBED = re.compile(r"^DESCRIPTION\s*[:=]", re.M)  # a module that describes a task


def _task_files() -> dict[str, Path]:
    """name -> module file of every task (found by its DESCRIPTION; imported lazily, as
    torchvision / transformers are heavy); this package's modules win over $MPCBENCH_TASK_PATH."""
    dirs = [_HERE, *(Path(p).expanduser() for p in os.environ.get("MPCBENCH_TASK_PATH", "").split(os.pathsep) if p)]
    out: dict[str, Path] = {}
    for folder in dirs:
        try:
            entries = sorted((e.name, e.path) for e in os.scandir(folder) if e.name.endswith(".py"))
        except OSError:  # not a folder
            continue
        for name, path in entries:
            stem = name[:-3]
            if name.startswith("_") or stem in out:
                continue
            try:
                if _describes_a_task(path):
                    out[stem] = Path(path)
            except (OSError, UnicodeDecodeError):
                continue
    return out


_SEEN: dict[tuple[str, int, int], bool] = {}  # (path, mtime_ns, size) -> has DESCRIPTION


def _describes_a_task(path: str) -> bool:
    """Whether the module file describes a task; read once per version of the file (the planner asks
    for every cell: re-reading every task file each time was most of planning a tier)."""
    st = os.stat(path)
    key = (path, st.st_mtime_ns, st.st_size)
    if key not in _SEEN:
        with open(path, encoding="utf-8") as f:
            _SEEN[key] = bool(_DESCRIBED.search(f.read()))
    return _SEEN[key]


def _import(name: str, path: Path):
    if path.parent == _HERE:
        return importlib.import_module(f"tasks.{name}")
    module_name = f"mpcbench_task_{name}"  # a task module outside the package, loaded by path
    if module_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(module_name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[module_name]
            raise
    return sys.modules[module_name]


_EXTRA: dict[str, type[Task]] = {}


def register_task(name: str, cls: type[Task]) -> type[Task]:
    """Add a task class under ``name`` (test fixtures and user plugins; built-ins are fixed)."""
    if name in _task_files() or (name in _EXTRA and _EXTRA[name] is not cls):
        raise TaskError(f"task name {name!r} is already taken")
    cls.name = name
    _EXTRA[name] = cls
    return cls


def described_tasks() -> list[str]:
    """Names of the tasks that are modules (found by their ``DESCRIPTION``), not registered classes."""
    return sorted(_task_files())


def available_tasks() -> list[str]:
    """Names of all tasks."""
    return sorted({*_task_files(), *_EXTRA})


def get_task_class(name: str) -> type[Task]:
    """The Task subclass called ``name``; unknown names list the valid ones."""
    if name in _EXTRA:
        return _EXTRA[name]
    files = _task_files()
    if name not in files:
        raise TaskError(
            f"unknown task {name!r}{did_you_mean(name, available_tasks())}; valid tasks: {', '.join(available_tasks())}"
        )
    module = _import(name, files[name])
    if not isinstance(getattr(module, "TASK", None), type) or not issubclass(module.TASK, Task):
        raise TaskError(f"task module {files[name]} defines DESCRIPTION but no TASK (its Task subclass)")
    return module.TASK


def build_task(
    name: str,
    tier: str = "smoke",
    seed: int = 0,
    data_dir=None,
    features=frozenset(),
    feature_options=None,
    model_size: str | None = None,
) -> Task:
    """Instantiate a task by name; ``feature_options`` (feature -> options) configure enabled features;
    ``model_size`` names one of the task's ``model_sizes`` (None: the tier's model)."""
    cls = get_task_class(name)
    if model_size is None:  # (a registered task class may predate the model_size argument)
        task = cls(tier=tier, seed=seed, data_dir=data_dir, features=frozenset(features))
    else:
        task = cls(tier=tier, seed=seed, data_dir=data_dir, features=frozenset(features), model_size=model_size)
    if feature_options:
        task.set_feature_options(feature_options)
    return task
