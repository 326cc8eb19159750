"""One record line -> one validated record, with ``orjson`` where it is installed (optional).

    record = load_record(line)       # bytes of one JSON Lines line; raises what json.loads would

:func:`load_record` returns exactly what ``validate_record(json.loads(line.decode("utf-8")))``
returns and raises exactly what it raises. ``orjson`` (about 3x faster on a 19 KB record) is
tried first and its result is kept only when it passes :func:`validate_record`; anything else
(a line orjson refuses, a record the validator refuses) goes through ``json`` again, so every
error and its message come from the standard path. Where the two parsers differ on text both
accept, the validator refuses orjson's result: orjson reads an integer beyond 64 bits as a
float (at least 2**63 in magnitude, over :data:`~suite.results.records.MAX_ABS`); it refuses
``NaN``, ``Infinity``, lone surrogates and invalid UTF-8, which ``json`` then reads (or
refuses) itself. ``tests/suite/results/test_record_json.py`` compares the two paths.
"""

from __future__ import annotations

import json
from typing import Any

from .records import validate_record

_orjson: Any
try:  # optional: `pip install mpcbench[leaderboard]`
    import orjson as _orjson
except ImportError:  # pragma: no cover - exercised by the tests with the module hidden
    _orjson = None

__all__ = ["load_record", "load_record_json", "FAST"]

FAST = _orjson is not None  # orjson installed: the fast path is used


def load_record_json(line: bytes) -> dict[str, Any]:
    """The standard path: ``validate_record(json.loads(line.decode("utf-8")))``."""
    return validate_record(json.loads(line.decode("utf-8")))


def load_record(line: bytes) -> dict[str, Any]:
    """The validated record of one line (see the module docstring); raises ``UnicodeDecodeError``,
    ``json.JSONDecodeError``, ``RecordError``, ``ValueError`` or ``RecursionError`` as the standard
    path does."""
    if _orjson is not None:
        try:
            return validate_record(_orjson.loads(line))
        except Exception:  # noqa: BLE001 - whatever it was, the standard path decides and words the reason
            pass
    return load_record_json(line)
