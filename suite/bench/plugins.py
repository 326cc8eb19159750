"""The ``--plugin`` modules of a selection: import each once per process, and say what it provides.

A plugin that fails to import (raises, or passes its import deadline) does not stop the
planning: :class:`Plugins` records its one-line error and the cells that need it fail with
that error, while the rest of the matrix runs.
"""

from __future__ import annotations

import hashlib
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from compressors.api import CompressorError

__all__ = ["Plugins", "plugin_module"]

_FAILED_PLUGINS: dict[str, str] = {}  # plugin -> one-line import error (this process)


def plugin_module(target: str) -> str:
    """The module name ``compressors.registry.load_plugin`` imports ``target`` as."""
    if target.endswith(".py") or "/" in target:
        return "mpcbench_plugin_" + hashlib.sha1(str(Path(target).resolve()).encode()).hexdigest()[:10]
    return target


@dataclass
class Plugins:
    """What each ``--plugin`` registered (compressor names, task names) or why it failed."""

    provides: dict[str, set[str]] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)

    @classmethod
    def load(cls, plugins: Iterable[str]) -> Plugins:
        import tasks as tasks_pkg
        from compressors.registry import available, get_class, load_plugin
        from tasks import available_tasks, get_task_class

        out = cls()
        for p in plugins:
            mod = plugin_module(p)
            if p in _FAILED_PLUGINS:
                out.failed[p] = _FAILED_PLUGINS[p]
                continue
            if mod not in sys.modules:  # import once per process: re-running a module re-registers
                try:
                    load_plugin(p)
                except CompressorError as e:
                    out.failed[p] = _FAILED_PLUGINS[p] = str(e)
                    continue

            def ours(module: str) -> bool:
                return module == mod or module.startswith(mod + ".")

            # tasks with a module of their own are never a plugin's (and importing them all here would be slow)
            plugin_tasks = set(available_tasks()) - set(tasks_pkg.described_tasks())
            out.provides[p] = {n for n in available() if ours(get_class(n).__module__)} | {
                f"task:{t}" for t in plugin_tasks if ours(get_task_class(t).__module__)
            }
        return out

    def needed_by(self, names: set[str]) -> tuple[str, ...]:
        return tuple(p for p, provided in self.provides.items() if provided & names)


def refuse_unimportable(plugins: Iterable[str]) -> None:
    """For the front ends (``mpcbench run``, ``pytest suite``): a ``--plugin`` named on the command
    line that does not import stops everything before a cell trains, with its one-line error
    (the planner itself, :func:`suite.bench.matrix.plan_cells`, fails only the cells needing it)."""
    from .matrix_file import MatrixError

    failed = Plugins.load(plugins).failed
    if failed:
        plugin, error = next(iter(failed.items()))
        raise MatrixError(f"{error} (nothing was run; fix the plugin or leave out --plugin {plugin})")
