"""Importing compressor plugins, each under a deadline.

Plugins are imported by the runner while it plans the matrix, outside every cell's time
limit, so each import runs under a deadline (``MPCBENCH_PLUGIN_IMPORT_TIMEOUT_S``, default
60 s, 0 = none): a plugin that hangs at import fails like one that raises, with one line.
Registration itself (``@register``, entry points) is :mod:`compressors.registry`'s job.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import math
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

from .api import CompressorError

__all__ = [
    "ENTRY_POINT_GROUP",
    "IMPORT_TIMEOUT_ENV",
    "DEFAULT_IMPORT_TIMEOUT_S",
    "PluginImportTimeout",
    "import_timeout_s",
    "import_deadline",
    "load_plugin",
    "module_name_of",
    "one_line",
]

ENTRY_POINT_GROUP = "mpcbench.compressors"
IMPORT_TIMEOUT_ENV = "MPCBENCH_PLUGIN_IMPORT_TIMEOUT_S"
DEFAULT_IMPORT_TIMEOUT_S = 60.0


def one_line(e: BaseException) -> str:
    """``Type: message`` on one line (for errors that name a plugin or a parameter)."""
    msg = " ".join(str(e).split())
    return f"{type(e).__name__}: {msg}" if msg else type(e).__name__


def module_name_of(target: str) -> str:
    """The module name :func:`load_plugin` imports ``target`` as (a ``.py`` file gets a stable private name)."""
    if target.endswith(".py") or "/" in target:
        return "mpcbench_plugin_" + hashlib.sha1(str(Path(target).resolve()).encode()).hexdigest()[:10]
    return target


class PluginImportTimeout(BaseException):
    """A plugin's import passed its deadline. Raised inside the plugin's module code; a
    BaseException so that the plugin's own ``except Exception`` cannot swallow it (it is
    converted to a one-line :class:`CompressorError` by :func:`load_plugin` / :func:`discover`)."""


def import_timeout_s() -> float | None:
    """The per-plugin import deadline in seconds from ``MPCBENCH_PLUGIN_IMPORT_TIMEOUT_S``
    (default 60; ``0``: no limit, returned as None). A malformed value raises CompressorError."""
    raw = os.environ.get(IMPORT_TIMEOUT_ENV, "").strip()
    if not raw:
        return DEFAULT_IMPORT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise CompressorError(f"{IMPORT_TIMEOUT_ENV}={raw!r} must be a number of seconds >= 0 (0: no limit)")
    return value or None


@contextlib.contextmanager
def import_deadline(seconds: float | None) -> Iterator[None]:
    """Raise :class:`PluginImportTimeout` in the block once ``seconds`` have passed.

    SIGALRM with ``signal.setitimer``, so only in the main thread of a process that has it:
    elsewhere (another thread, no setitimer) the block runs WITHOUT a limit. The alarm repeats
    every second after the deadline, so a plugin that swallows the first one (a bare
    ``except:``) is interrupted again. An alarm timer that was already armed (e.g. by
    pytest-timeout) is respected: if it expires first this adds nothing; otherwise it is
    re-armed with its remaining time afterwards, with its handler. Code blocked inside a C
    call that ignores signals cannot be interrupted.
    """
    if not seconds or not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield
        return
    outer_delay, outer_interval = signal.getitimer(signal.ITIMER_REAL)
    if outer_delay and outer_delay <= seconds:
        yield  # the outer deadline comes first anyway
        return

    def on_alarm(signum: int, frame: Any) -> None:
        raise PluginImportTimeout(
            f"import did not finish within {seconds:g} s (a plugin must not block at import time: move slow "
            f"work out of module level, or raise {IMPORT_TIMEOUT_ENV})"
        )

    outer_handler = signal.signal(signal.SIGALRM, on_alarm)
    start = time.monotonic()
    signal.setitimer(signal.ITIMER_REAL, seconds, 1.0)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, outer_handler if outer_handler is not None else signal.SIG_DFL)
        if outer_delay:
            left = max(outer_delay - (time.monotonic() - start), 1e-3)
            signal.setitimer(signal.ITIMER_REAL, left, outer_interval)


def load_plugin(target: str) -> None:
    """Import a plugin given as a module name (``my_pkg.my_comp``) or a ``.py`` file path.

    Its ``@register`` decorators run on import. Errors, and an import still running after
    :func:`import_timeout_s` seconds (see :func:`import_deadline`; no limit outside the main
    thread), are re-raised as :class:`CompressorError` with a one-line reason naming the plugin.
    """
    timeout = import_timeout_s()
    mod_name = None
    try:
        with import_deadline(timeout):
            if target.endswith(".py") or "/" in target:
                path = Path(target).resolve()
                if not path.exists():
                    raise FileNotFoundError(f"no such file: {path}")
                mod_name = module_name_of(target)
                spec = importlib.util.spec_from_file_location(mod_name, path)
                assert spec is not None and spec.loader is not None
                module = importlib.util.module_from_spec(spec)
                sys.modules[mod_name] = module
                spec.loader.exec_module(module)
            else:
                importlib.import_module(target)
    except CompressorError:
        raise
    except (Exception, PluginImportTimeout) as e:
        if mod_name is not None:
            sys.modules.pop(mod_name, None)  # a half-run module is not imported (as with `import`)
        raise CompressorError(f"plugin {target!r} failed to import: {one_line(e)}") from e
