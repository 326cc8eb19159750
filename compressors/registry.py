"""Compressor registry: ``@register("name")``, entry-point discovery, and building specs.

Names map to :class:`~compressors.api.Compressor` classes. Third-party plugins register
themselves when their module is imported (:func:`compressors.plugins.load_plugin`); installed
packages are discovered through the entry-point group ``mpcbench.compressors``. A spec string
(:mod:`compressors.spec`) is turned into an instance by :func:`build`; a parameter annotated
as :class:`Compressor` takes a nested spec.

The spec parser and the plugin loader live in :mod:`compressors.spec` and
:mod:`compressors.plugins`; their public names are re-exported here, so
``from compressors.registry import parse_spec, load_plugin`` keeps working.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.metadata
import importlib.util
import inspect
import sys
import typing
from typing import Any, Callable, Iterator, TypeVar

from .api import Compressor, CompressorError, did_you_mean
from .plugins import (
    DEFAULT_IMPORT_TIMEOUT_S,
    ENTRY_POINT_GROUP,
    IMPORT_TIMEOUT_ENV,
    PluginImportTimeout,
    import_deadline,
    import_timeout_s,
    load_plugin,
    one_line,
)
from .spec import Spec, parse_spec, spec_names

__all__ = [
    "register",
    "build",
    "compressor_names",
    "private_plugin_modules",
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

_REGISTRY: dict[str, type[Compressor]] = {}
_PLUGIN_ERRORS: dict[str, str] = {}  # entry-point name -> one-line import error
# Private plugin module copies (see private_plugin_modules): the realm build() is in, and the
# copies made so far, (realm, module name) -> module. Built-in compressors are never copied.
_REALM: list[Any] = [None]
_COPIES: dict[tuple[Any, str, int], Any] = {}
_COPYING = [False]  # register() is a no-op while a copy's module body runs
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
        if _COPYING[0]:  # a private copy of a registered module (private_plugin_modules): not a new class
            cls.name = name
            return cls
        if not (isinstance(cls, type) and issubclass(cls, Compressor)):
            raise CompressorError(f"register({name!r}): {cls!r} must subclass compressors.Compressor")
        other = _REGISTRY.get(name)
        if other is not None and _qualname(other) != _qualname(cls):
            raise CompressorError(_taken(name, cls, other))
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return deco


def _qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _taken(name: str, new: type, old: type) -> str:
    """The duplicate-name error, addressed to the plugin whichever registered first (a plugin loaded
    before the built-ins are imported finds its name free, and the built-in is the second to ask)."""
    builtin = (
        old if old.__module__.startswith("compressors.") else new if new.__module__.startswith("compressors.") else None
    )
    plugin = (new if builtin is old else old) if builtin is not None else new
    where = getattr(sys.modules.get(plugin.__module__), "__file__", None) or plugin.__module__
    owner = f"the built-in {_qualname(builtin)}" if builtin is not None else _qualname(old)
    return (
        f"register({name!r}): the plugin class {plugin.__qualname__} ({where}) uses the name {name!r}, already "
        f"taken by {owner}; register the plugin under another name, e.g. @register({name + '_mine'!r})"
    )


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
            with import_deadline(timeout):
                obj = ep.load()
        except (Exception, PluginImportTimeout) as e:  # noqa: BLE001 - a broken plugin must not break the rest
            _PLUGIN_ERRORS[ep.name] = f"plugin {ep.name!r} ({ep.value}) failed to import: {one_line(e)}"
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


def available() -> list[str]:
    """Sorted names of every registered compressor (built-ins and plugins)."""
    discover()
    return sorted(_REGISTRY)


@contextlib.contextmanager
def private_plugin_modules(realm: Any) -> Iterator[None]:
    """Inside this block :func:`build` makes plugin compressors from ``realm``'s own copy of their
    module: the module file is executed once more into a module object that only this realm sees.

    Single-process pipeline mode builds each stage's compressors in the stage's realm, as torchrun
    gives each stage its own process: module globals, class attributes and closures of a plugin are
    then never shared between the sender and the receiver of a link, so a plugin cannot pass the
    tensor to its receiver through them and send one byte (a forged byte count). Built-in
    compressors (``compressors.*``) are trusted and not copied. What a copy does not separate:
    state the plugin puts in other modules (``builtins``, ``sys``, ``torch``), files or sockets;
    submitted plugins are run and verified in torchrun mode for that reason (docs/reliability.md).
    """
    previous = _REALM[0]
    _REALM[0] = realm
    try:
        yield
    finally:
        _REALM[0] = previous


def _in_realm(cls: type[Compressor]) -> type[Compressor]:
    """``cls`` itself, or the same class from the current realm's private copy of its module."""
    realm = _REALM[0]
    module = sys.modules.get(cls.__module__)
    path = getattr(module, "__file__", None)
    if realm is None or cls.__module__.split(".")[0] == "compressors" or not path:
        return cls
    key = (realm, cls.__module__, id(module))  # a reloaded plugin module gets fresh copies
    copy = _COPIES.get(key)
    if copy is None:
        package = getattr(getattr(module, "__spec__", None), "submodule_search_locations", None)
        spec = importlib.util.spec_from_file_location(cls.__module__, path, submodule_search_locations=package)
        if spec is None or spec.loader is None:
            return cls
        copy = importlib.util.module_from_spec(spec)  # not put in sys.modules: nobody else can reach it
        _COPYING[0] = True
        try:
            spec.loader.exec_module(copy)
        finally:
            _COPYING[0] = False
        _COPIES[key] = copy
    obj: Any = copy
    for part in cls.__qualname__.split("."):
        obj = getattr(obj, part, None)
    if not (isinstance(obj, type) and issubclass(obj, Compressor)):
        raise CompressorError(
            f"{cls.name}: the private copy of module {cls.__module__} has no class {cls.__qualname__}"
        )
    return obj


def get_class(name: str) -> type[Compressor]:
    """The class registered as ``name`` (inside :func:`private_plugin_modules`: from the realm's copy of
    a plugin's module); unknown names raise an error listing valid ones."""
    discover()
    if name in _REGISTRY:
        return _in_realm(_REGISTRY[name])
    if name in _PLUGIN_ERRORS:
        raise CompressorError(_PLUGIN_ERRORS[name])
    raise CompressorError(
        f"unknown compressor {name!r}{did_you_mean(name, available())}; valid names: {', '.join(available())}"
    )


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
    for name in sorted(spec_names(parse_spec(spec))):
        cls = get_class(name)
        try:
            h.update(inspect.getsource(sys.modules[cls.__module__]).encode())
        except (OSError, TypeError):
            h.update(_qualname(cls).encode())
    return h.hexdigest()[:16]


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


def compressor_names(spec: str | Spec) -> set[str]:
    """Every compressor a spec builds, also those named by a bare word where a wrapper's parameter
    takes a compressor (``ef(mycomp)``); unknown names are kept (never raises on a name)."""
    out, todo = set(), [parse_spec(spec) if isinstance(spec, str) else spec]
    while todo:
        s = todo.pop()
        out.add(s.name)
        try:
            cls = get_class(s.name)
            names = list(_params(cls))
        except CompressorError:
            todo += s.children()
            continue
        for pname, value in list(zip(names, s.args)) + list(s.kwargs):
            if isinstance(value, Spec):
                todo.append(value)
            elif isinstance(value, str) and pname in names and _wants_compressor(cls, pname):
                todo.append(Spec(value))
    return out


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
        raise CompressorError(f"{s.name}: {one_line(e)}") from e
    obj.spec = str(s)
    return obj


def canonical_spec(spec: str) -> str:
    """Normalized spelling of a spec (whitespace, booleans, quoting); validates it too."""
    s = parse_spec(spec)
    build(s)
    return str(s)


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
