"""One record line -> one validated record (issue 28): the orjson path gives exactly what the
standard ``json`` path gives, and refuses exactly what it refuses, with the same reason."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from suite.results import record_json
from suite.results.record_json import load_record, load_record_json

TEMPLATE = Path(__file__).resolve().parents[3] / "records" / "mpcbench-baselines" / "quick-cpu-2core-v2.jsonl"


def _base() -> dict[str, Any]:
    return json.loads(TEMPLATE.read_text().splitlines()[0])


def _outcome(load, line: bytes) -> tuple[str, str]:
    """("ok", repr of the record: int and float, key order and NaN told apart) or (error type, message)."""
    try:
        return "ok", repr(load(line))
    except Exception as e:  # noqa: BLE001 - the point is to compare whatever happens
        return type(e).__name__, str(e)


def _with(path: list[Any], value: Any) -> bytes:
    rec = _base()
    target = rec
    for k in path[:-1]:
        target = target[k]
    target[path[-1]] = value
    return json.dumps(rec).encode()


def _raw(text: str) -> bytes:
    """The base record with ``"log": <text>`` spliced in as raw JSON text (what json.dumps cannot write)."""
    line = json.dumps(_base())
    assert line.endswith("}")
    return (line[:-1] + ', "extra": ' + text + "}").encode()


CASES = {
    "valid": json.dumps(_base()).encode(),
    "nan in a curve": _with(["curve", 0, "metric"], math.nan),
    "infinity in time": _with(["time", "step_s"], math.inf),
    "seed 2**64": _with(["seed"], 2**64),
    "seed 2**70": _with(["seed"], 2**70),
    "int below -2**63": _with(["config", "seed"], -(2**63) - 1),
    "int of 30 digits in a list": _with(["wire_bytes_by_step", "forward", 3], 10**30),
    "int 2**63 - 1 (in orjson's range, over the cap)": _with(["compressor_state_bytes"], 2**63 - 1),
    "1e400": _raw("1e400"),
    "-1e400": _raw("-1e400"),
    "NaN literal": _raw("NaN"),
    "lone surrogate": _raw('"\\ud800"'),
    "surrogate pair": _raw('"\\ud83d\\ude00"'),
    "duplicate keys": _raw('{"a": 1, "b": 2, "a": 3}'),
    "minus zero": _raw("[-0, -0.0, 0e0, 1E2, 1.5e-7]"),
    "long float": _raw("0.1000000000000000055511151231257827021181583404541015625"),
    "control character": _raw('"a\x01b"'),
    "DEL character": _raw('"a\x7fb"'),
    "not UTF-8": _raw('"a\xff"'.encode("latin-1").decode("latin-1")).replace(b"\xc3\xbf", b"\xff"),
    "UTF-8 BOM": b"\xef\xbb\xbf" + json.dumps(_base()).encode(),
    "trailing garbage": json.dumps(_base()).encode() + b" x",
    "form feed whitespace": b"\x0c" + json.dumps(_base()).encode(),
    "not an object": b"[1, 2, 3]",
    "null": b"null",
    "deep nesting": _raw("[" * 3000 + "]" * 3000),
    "nested too deep for the validator": _raw("[" * 20 + "]" * 20),
    "empty": b"",
    "truncated": json.dumps(_base()).encode()[:-10],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_fast_path_agrees_with_json(name):
    line = CASES[name]
    assert _outcome(load_record, line) == _outcome(load_record_json, line)


def test_the_fast_path_is_taken_when_orjson_is_installed(monkeypatch):
    orjson = pytest.importorskip("orjson")
    calls = []

    class Spy:
        @staticmethod
        def loads(b):
            calls.append(1)
            return orjson.loads(b)

    want = _base()["record_id"]
    monkeypatch.setattr(record_json, "_orjson", Spy)
    monkeypatch.setattr(record_json.json, "loads", lambda *a, **k: pytest.fail("a valid record went through json"))
    assert load_record(CASES["valid"])["record_id"] == want and calls == [1]


def test_without_orjson_the_standard_path_does_everything(monkeypatch):
    monkeypatch.setattr(record_json, "_orjson", None)
    for name, line in CASES.items():
        assert _outcome(load_record, line) == _outcome(load_record_json, line), name


_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(value=_values, where=st.sampled_from(["extra", "compressor_stats", "seed", "final_metric", "time"]))
def test_any_value_anywhere_gets_the_same_verdict(value, where):
    rec = _base()
    rec[where] = value
    line = json.dumps(rec).encode()  # NaN / Infinity written as json writes them
    assert _outcome(load_record, line) == _outcome(load_record_json, line)
