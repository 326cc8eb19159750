"""Spec strings: ``topk(ratio=0.1)`` -> :class:`Spec` trees, parsed once per distinct text.

A *spec* selects and parameterizes a compressor with Python call syntax::

    none
    topk(ratio=0.1)
    quant(bits=4, scale=row, rounding=stochastic)
    ef(topk(ratio=0.1))            # wrappers take a compressor spec as an argument

Bare words (``row``, ``stochastic``) are strings; numbers, ``true``/``false`` and quoted
strings work as expected. Whether a value is a nested compressor is decided when the spec is
built (:func:`compressors.registry.build`), from the parameter's annotation.

Cost: one linear scan bounds the nesting depth (:data:`MAX_DEPTH`) before ``ast.parse`` sees
the text, the parse itself is linear in the text, and results are cached per text (a
:class:`Spec` is immutable), so a spec that travels from the command line to every boundary
is parsed once per process.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from typing import Any

from .api import CompressorError

__all__ = ["Spec", "parse_spec", "spec_names", "MAX_DEPTH", "MAX_LENGTH"]

MAX_DEPTH = 8  # levels of parentheses, e.g. ef(ef(topk(ratio=0.1))) has 3; each wrapper level doubles build cost
MAX_LENGTH = 10_000  # characters; a spec is a short line of text


@dataclass(frozen=True)
class Spec:
    """A parsed spec: compressor name, positional and keyword arguments (nested Specs allowed)."""

    name: str
    args: tuple[Any, ...] = ()
    kwargs: tuple[tuple[str, Any], ...] = ()

    def __str__(self) -> str:
        parts = [_fmt(a) for a in self.args] + [f"{k}={_fmt(v)}" for k, v in self.kwargs]
        return f"{self.name}({', '.join(parts)})" if parts else self.name

    def children(self) -> list[Spec]:
        """The nested specs among the arguments."""
        return [v for v in (*self.args, *(v for _, v in self.kwargs)) if isinstance(v, Spec)]


def _fmt(v: Any) -> str:
    if isinstance(v, Spec):
        return str(v)
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return v if v.isidentifier() else repr(v)
    return repr(v)


def spec_names(spec: Spec) -> set[str]:
    """Every compressor name in the tree (iterative: no recursion limit to meet)."""
    out, todo = set(), [spec]
    while todo:
        s = todo.pop()
        out.add(s.name)
        todo += s.children()
    return out


_WORDS = {"true": True, "false": False, "True": True, "False": False, "none": None, "None": None}


def _check_shape(text: str) -> None:
    """Refuse, in one pass over the text, specs nested deeper than :data:`MAX_DEPTH` or too long.

    Parentheses inside quoted strings do not count. Runs before ``ast.parse``, whose recursion
    a hostile spec could otherwise exhaust."""
    if len(text) > MAX_LENGTH:
        raise CompressorError(f"compressor spec of {len(text)} characters is too long (at most {MAX_LENGTH})")
    depth = deepest = 0
    quote = ""
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif ch == ")":
            depth -= 1
    if deepest > MAX_DEPTH:
        head = text if len(text) <= 60 else text[:57] + "..."
        raise CompressorError(
            f"compressor spec {head!r} nests {deepest} levels of parentheses; at most {MAX_DEPTH} are allowed "
            "(each wrapper level doubles the instances a spec builds)"
        )


@functools.lru_cache(maxsize=1024)
def _parse(text: str) -> Spec:
    _check_shape(text)
    if "\x00" in text:  # Python 3.11's ast.parse raises ValueError (not SyntaxError) for a NUL byte
        raise CompressorError(f"cannot parse compressor spec {text[:60]!r}: it contains a NUL byte")
    try:
        node = ast.parse(text, mode="eval").body
        return _to_spec(node, text)
    except SyntaxError as e:
        raise CompressorError(
            f"cannot parse compressor spec {text!r} ({e.msg}); expected e.g. 'quant(bits=4, scale=row)'"
        ) from None
    except (RecursionError, MemoryError):  # an operator chain without parentheses: 1+1+1+... nests in the AST
        raise CompressorError(
            f"compressor spec {text[:60]!r}... is nested too deeply to parse; a value is a number, a string or a name"
        ) from None


def parse_spec(text: str) -> Spec:
    """Parse a spec string into a :class:`Spec` (cached per text). Errors name the offending text."""
    if not isinstance(text, str) or not text.strip():
        raise CompressorError(f"empty compressor spec {text!r}; e.g. 'none' or 'topk(ratio=0.1)'")
    return _parse(text.strip())


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
        value = node.operand.value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return -value
    if isinstance(node, ast.Name):
        return _WORDS.get(node.id, node.id)  # bare word: string (or a nested spec, decided at build)
    if isinstance(node, ast.Call):
        return _to_spec(node, text)
    raise CompressorError(f"spec {text!r}: unsupported value {ast.unparse(node)!r} (use numbers, words or specs)")
