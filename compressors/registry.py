"""Compressor registry: ``@register("name")``, entry-point discovery and spec strings.

A *spec* selects and parameterizes a compressor with Python call syntax::

    none
    topk(ratio=0.1)
    quant(bits=4, scale=row, rounding=stochastic)
    ef(topk(ratio=0.1))            # wrappers take a compressor spec as an argument

Bare words (``row``, ``stochastic``) are strings; numbers, ``true``/``false`` and quoted
strings work as expected. A parameter annotated as :class:`Compressor` takes a nested spec.
Third-party plugins register themselves when their module is imported; installed packages
are discovered through the entry-point group ``mpcbench.compressors``.

Plugins are imported in the runner while it plans the matrix, outside every cell's time
limit, so each import runs under a deadline (``MPCBENCH_PLUGIN_IMPORT_TIMEOUT_S``, default
60 s, 0 = none): a plugin that hangs at import fails like one that raises, with one line.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib
import importlib.metadata
import importlib.util
import inspect
import math
import os
import signal
import sys
import threading
import time
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

from .api import Compressor, CompressorError, did_you_mean

__all__ = [
    "register",
    "build",
    "parse_spec",
    "canonical_spec",
    "available",
    "describe",
    "default_spec",
    "get_class",
    "load_plugin",
    "discover",
    "plugin_errors",
    "source_hash",
    "ENTRY_POINT_GROUP",
    "IMPORT_TIMEOUT_ENV",
    "DEFAULT_IMPORT_TIMEOUT_S",
    "PluginImportTimeout",
    "import_timeout_s",
    "Spec",
]

ENTRY_POINT_GROUP = "mpcbench.compressors"
IMPORT_TIMEOUT_ENV = "MPCBENCH_PLUGIN_IMPORT_TIMEOUT_S"
DEFAULT_IMPORT_TIMEOUT_S = 60.0

_REGISTRY: dict[str, type[Compressor]] = {}
_PLUGIN_ERRORS: dict[str, str] = {}  # entry-point name -> one-line import error
_DISCOVERED = False
C = TypeVar("C", bound=type[Compressor])


def register(name: str) -> Callable[[C], C]:
    """Class decorator: make a :class:`Compressor` subclass available under ``name``.

    Raises :class:`CompressorError` if ``name`` is taken by another class, is not an
    identifier, or the class does not subclass :class:`Compressor`.
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise CompressorError(f"register({name!r}): a compressor name must be a Python identifier")

    def deco(cls: C) -> C:
        if not (isinstance(cls, type) and issubclass(cls, Compressor)):
            raise CompressorError(f"register({name!r}): {cls!r} must subclass compressors.Compressor")
        other = _REGISTRY.get(name)
        if other is not None and _qualname(other) != _qualname(cls):
            raise CompressorError(
                f"register({name!r}): name already taken by {_qualname(other)}; "
                f"pick another name for {_qualname(cls)}"
            )
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return deco


def _qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


# --------------------------------------------------------------------------- import deadline
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
def _import_deadline(seconds: float | None) -> Iterator[None]:
    """Raise :class:`PluginImportTimeout` in the block once ``seconds`` have passed.

    SIGALRM with ``signal.setitimer``, so only in the main thread of a process that has it:
    elsewhere (another thread, no setitimer) the block runs WITHOUT a limit. The alarm repeats
    every second after the deadline, so a plugin that swallows the first one (a bare
    ``except:``) is interrupted again. An alarm timer that was already armed (e.g. by
    pytest-timeout) is respected: if it expires first this adds nothing; otherwise it is
    re-armed with its remaining time afterwards, with its handler. Code blocked inside a C
    call that ignores signals cannot be interrupted.
    """
    if (
        not seconds
        or not hasattr(signal, "setitimer")
        or threading.current_thread() is not threading.main_thread()
    ):
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


# --------------------------------------------------------------------------- discovery
def _ensure_builtins() -> None:
    importlib.import_module("compressors.builtins")


def discover() -> dict[str, str]:
    """Import built-ins and every installed plugin in the ``mpcbench.compressors`` group.

    A plugin that fails to import (or does not finish importing within
    :func:`import_timeout_s`) does not break discovery: its error is kept (see
    :func:`plugin_errors`) and surfaces when a spec names it. Returns the errors.
    """
    global _DISCOVERED
    _ensure_builtins()
    if _DISCOVERED:
        return dict(_PLUGIN_ERRORS)
    timeout = import_timeout_s()
    _DISCOVERED = True
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            with _import_deadline(timeout):
                obj = ep.load()
        except (Exception, PluginImportTimeout) as e:  # noqa: BLE001 - a broken plugin must not break the rest
            _PLUGIN_ERRORS[ep.name] = f"plugin {ep.name!r} ({ep.value}) failed to import: {_one_line(e)}"
            continue
        if isinstance(obj, type) and issubclass(obj, Compressor) and obj not in _REGISTRY.values():
            try:
                register(ep.name)(obj)
            except CompressorError as e:  # e.g. a name clash: report it, keep discovering
                _PLUGIN_ERRORS[ep.name] = f"plugin {ep.name!r} ({ep.value}) not registered: {e}"
    return dict(_PLUGIN_ERRORS)


def plugin_errors() -> dict[str, str]:
    """Entry-point plugins that failed to import: name -> one-line reason."""
    discover()
    return dict(_PLUGIN_ERRORS)


def load_plugin(target: str) -> None:
    """Import a plugin given as a module name (``my_pkg.my_comp``) or a ``.py`` file path.

    Its ``@register`` decorators run on import. Errors, and an import still running after
    :func:`import_timeout_s` seconds (see :func:`_import_deadline`; no limit outside the main
    thread), are re-raised as :class:`CompressorError` with a one-line reason naming the plugin.
    """
    timeout = import_timeout_s()
    mod_name = None
    try:
        with _import_deadline(timeout):
            if target.endswith(".py") or "/" in target:
                path = Path(target).resolve()
                if not path.exists():
                    raise FileNotFoundError(f"no such file: {path}")
                mod_name = "mpcbench_plugin_" + hashlib.sha1(str(path).encode()).hexdigest()[:10]
                spec = importlib.util.spec_from_file_location(mod_name, path)
                assert spec is not None and spec.loader is not None
                module = importlib.util.module_from_spec(spec)
                sys.modules[mod_name] = module
                spec.loader.exec_module(module)
            else:
                importlib.import_module(target)
    except CompressorError:
        raise
    except (Exception, PluginImportTimeout) as e:  # noqa: BLE001
        if mod_name is not None:
            sys.modules.pop(mod_name, None)  # a half-run module is not imported (as with `import`)
        raise CompressorError(f"plugin {target!r} failed to import: {_one_line(e)}") from e


def available() -> list[str]:
    """Sorted names of every registered compressor (built-ins and plugins)."""
    discover()
    return sorted(_REGISTRY)


def get_class(name: str) -> type[Compressor]:
    """The class registered as ``name``; unknown names raise an error listing valid ones."""
    discover()
    if name in _REGISTRY:
        return _REGISTRY[name]
    if name in _PLUGIN_ERRORS:
        raise CompressorError(_PLUGIN_ERRORS[name])
    raise CompressorError(f"unknown compressor {name!r}{did_you_mean(name, available())}; "
                          f"valid names: {', '.join(available())}")


def describe(name: str) -> dict[str, Any]:
    """Name, first docstring line, parameters with defaults, roles, requirements."""
    cls = get_class(name)
    params = {
        p.name: (None if p.default is inspect.Parameter.empty else p.default)
        for p in inspect.signature(cls.__init__).parameters.values()
        if p.name != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
    }
    doc = (inspect.getdoc(cls) or "").strip().splitlines()
    return {
        "name": name,
        "summary": doc[0] if doc else "",
        "params": params,
        "roles": sorted(r.value for r in cls.roles),
        "requires": sorted(cls.requires),
        "linear": cls.linear,
        "differentiable": cls.differentiable,
        "module": cls.__module__,
    }


NESTED_DEFAULT = "topk(ratio=0.1)"  # inner compressor of a wrapper at default settings


def default_spec(name: str) -> str:
    """The spec of ``name`` at its default settings: the bare name, or for a wrapper whose
    required parameters take compressors, ``name(topk(ratio=0.1))`` (required parameters
    come first in a signature, so they are given positionally).

    Used wherever every registered compressor is exercised (generic tests, benchmarks), so a
    new plugin is covered without editing a list. Raises :class:`CompressorError` when a
    required parameter is not a compressor (there is no default to give it).
    """
    cls = get_class(name)
    args = []
    for pname, p in _params(cls).items():
        if p.default is not inspect.Parameter.empty:
            continue
        if not _wants_compressor(cls, pname):
            raise CompressorError(f"{name}: required parameter {pname!r} has no default; give a full spec")
        args.append(NESTED_DEFAULT)
    return f"{name}({', '.join(args)})" if args else name


def source_hash(spec: str) -> str:
    """sha256 (first 16 hex) of the source files of every class a spec uses (provenance)."""
    h = hashlib.sha256()
    for name in sorted(_names_in(parse_spec(spec))):
        cls = get_class(name)
        try:
            h.update(inspect.getsource(sys.modules[cls.__module__]).encode())
        except (OSError, TypeError):
            h.update(_qualname(cls).encode())
    return h.hexdigest()[:16]


# --------------------------------------------------------------------------- specs
@dataclass(frozen=True)
class Spec:
    """A parsed spec: compressor name, positional and keyword arguments (nested Specs allowed)."""

    name: str
    args: tuple[Any, ...] = ()
    kwargs: tuple[tuple[str, Any], ...] = ()

    def __str__(self) -> str:
        parts = [_fmt(a) for a in self.args] + [f"{k}={_fmt(v)}" for k, v in self.kwargs]
        return f"{self.name}({', '.join(parts)})" if parts else self.name


def _fmt(v: Any) -> str:
    if isinstance(v, Spec):
        return str(v)
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return v if v.isidentifier() else repr(v)
    return repr(v)


def _names_in(spec: Spec) -> set[str]:
    out = {spec.name}
    for v in list(spec.args) + [v for _, v in spec.kwargs]:
        if isinstance(v, Spec):
            out |= _names_in(v)
    return out


_WORDS = {"true": True, "false": False, "True": True, "False": False, "none": None, "None": None}


def parse_spec(text: str) -> Spec:
    """Parse a spec string into a :class:`Spec`. Syntax errors name the offending text."""
    if not isinstance(text, str) or not text.strip():
        raise CompressorError(f"empty compressor spec {text!r}; e.g. 'none' or 'topk(ratio=0.1)'")
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as e:
        raise CompressorError(
            f"cannot parse compressor spec {text!r} ({e.msg}); expected e.g. 'quant(bits=4, scale=row)'"
        ) from None
    return _to_spec(node, text)


def _to_spec(node: ast.AST, text: str) -> Spec:
    if isinstance(node, ast.Name):
        return Spec(node.id)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        args = tuple(_to_value(a, text) for a in node.args)
        kws = []
        for kw in node.keywords:
            if kw.arg is None:
                raise CompressorError(f"spec {text!r}: '**' is not allowed")
            kws.append((kw.arg, _to_value(kw.value, text)))
        return Spec(node.func.id, args, tuple(kws))
    raise CompressorError(f"spec {text!r}: expected name or name(key=value, ...), got {ast.unparse(node)!r}")


def _to_value(node: ast.AST, text: str) -> Any:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str, bool)):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
        return -node.operand.value
    if isinstance(node, ast.Name):
        return _WORDS.get(node.id, node.id)  # bare word: string (or a nested spec, decided at build)
    if isinstance(node, ast.Call):
        return _to_spec(node, text)
    raise CompressorError(f"spec {text!r}: unsupported value {ast.unparse(node)!r} (use numbers, words or specs)")


def _params(cls: type[Compressor]) -> dict[str, inspect.Parameter]:
    return {
        n: p
        for n, p in inspect.signature(cls.__init__).parameters.items()
        if n != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
    }


def _wants_compressor(cls: type[Compressor], pname: str) -> bool:
    try:
        hints = typing.get_type_hints(cls.__init__)
    except Exception:  # noqa: BLE001 - unresolvable annotations: fall back to the raw string
        ann = _params(cls)[pname].annotation
        return isinstance(ann, str) and "Compressor" in ann
    ann = hints.get(pname)
    if ann is None:
        return False
    if ann is Compressor or (isinstance(ann, type) and issubclass(ann, Compressor)):
        return True
    return any(a is Compressor for a in typing.get_args(ann))


def build(spec: str | Spec) -> Compressor:
    """Instantiate a compressor from a spec string. Errors name the compressor and parameter."""
    s = parse_spec(spec) if isinstance(spec, str) else spec
    cls = get_class(s.name)
    params = _params(cls)
    names = list(params)
    kwargs: dict[str, Any] = {}
    if len(s.args) > len(names):
        raise CompressorError(
            f"{s.name}: takes at most {len(names)} positional argument(s) ({', '.join(names) or 'none'}), "
            f"got {len(s.args)}"
        )
    for pname, value in list(zip(names, s.args)) + list(s.kwargs):
        if pname not in params:
            raise CompressorError(
                f"{s.name}: unknown parameter {pname!r}; valid parameters: {', '.join(names) or '(none)'}"
            )
        if pname in kwargs:
            raise CompressorError(f"{s.name}: parameter {pname!r} given twice")
        if _wants_compressor(cls, pname):
            if isinstance(value, str):
                value = Spec(value)
            if not isinstance(value, Spec):
                raise CompressorError(f"{s.name}: parameter {pname!r} must be a compressor spec, got {value!r}")
            value = build(value)
        elif isinstance(value, Spec):
            raise CompressorError(f"{s.name}: parameter {pname!r} does not take a compressor spec ({value})")
        kwargs[pname] = value
    missing = [n for n, p in params.items() if p.default is inspect.Parameter.empty and n not in kwargs]
    if missing:
        raise CompressorError(f"{s.name}: missing required parameter(s) {', '.join(missing)}")
    try:
        obj = cls(**kwargs)
    except CompressorError:
        raise
    except (TypeError, ValueError) as e:
        raise CompressorError(f"{s.name}: {_one_line(e)}") from e
    obj.spec = str(s)
    return obj


def canonical_spec(spec: str) -> str:
    """Normalized spelling of a spec (whitespace, booleans, quoting); validates it too."""
    s = parse_spec(spec)
    build(s)
    return str(s)


def _one_line(e: BaseException) -> str:
    msg = " ".join(str(e).split())
    return f"{type(e).__name__}: {msg}" if msg else type(e).__name__


# Parameter validation helpers for compressor constructors -------------------------------
def check_choice(owner: str, pname: str, value: Any, allowed: typing.Iterable[Any]) -> Any:
    """Raise unless ``value`` is one of ``allowed`` (message lists them)."""
    allowed = list(allowed)
    if value not in allowed:
        raise CompressorError(
            f"{owner}: parameter {pname}={value!r} is not allowed; allowed values: {', '.join(map(str, allowed))}"
        )
    return value


def check_range(owner: str, pname: str, value: Any, lo: float, hi: float, *, integer: bool = False) -> Any:
    """Raise unless ``lo <= value <= hi`` (and an int when ``integer``)."""
    ok_type = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok_type or not (lo <= value <= hi):
        kind = "an integer" if integer else "a number"
        raise CompressorError(f"{owner}: parameter {pname}={value!r} must be {kind} in [{lo}, {hi}]")
    return value
