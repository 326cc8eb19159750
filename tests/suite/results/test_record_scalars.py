"""The record validator's scalar walk: the fast check (no path per value) agrees with the
explaining one that names the offender."""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np
import pytest

from suite.results.records import RecordError


def test_the_fast_scalar_check_agrees_with_the_explaining_walk():
    """``_scalars_ok`` (no path per value, issue 28) passes exactly what the explaining walk passes."""
    import json
    from pathlib import Path

    from suite.results import records as rec

    deep: Any = 1.0
    for _ in range(9):
        deep = [deep]
    cases: list[Any] = [
        {"a": [1.0, float("nan"), None, True, "x"]},
        {"a": float("inf")},
        {"a": [-float("inf")]},
        {"a": 10**19},
        {"a": [10**400]},
        {"a": 1e18, "b": -1e18},
        {"a": "x" * (rec.MAX_STR + 1)},
        {"x" * (rec.MAX_STR + 1): 1},
        {1: 2},
        {"a": [0] * (rec.MAX_CURVE + 1)},
        {"a": {"b": (1, 2)}},
        {"a": [{"b": [[]]}]},
        deep,
        deep[0],
        {"a": [object()]},
        {"a": [[[[[[[[]]]]]]]]},
        # long numeric lists take the C-level path (type set, sum of magnitudes): the same verdicts
        {"a": [1] * 20 + [10**19]},
        {"a": [-(10**18) - 1] + [0] * 20},
        {"a": [9 * 10**17] * 20},
        {"a": [1.0] * 20 + [float("inf")]},
        {"a": [1.0] * 20 + [float("nan")]},
        {"a": [float("nan")] + [1.0] * 20 + [2e18]},
        {"a": [True, 2, 3.5] * 10},
        {"a": [1] * 20 + ["x" * (rec.MAX_STR + 1)]},
        {"a": [1] * 20 + [None]},
        {"a": [1] * 20 + [[2e18]]},
        {"a": [np.float64(1.0)] * 20},  # not a JSON type: refused, as one value alone is
    ]
    root = Path(__file__).resolve().parents[3] / "records"
    cases += [json.loads(line) for f in sorted(root.glob("*/*.jsonl"))[:2] for line in f.read_text().splitlines()[:5]]
    for obj in cases:
        try:
            rec._explain_scalars(obj, "record")
            explained = True
        except (RecordError, OverflowError):
            explained = False
        if rec._scalars_ok(obj):
            assert explained, obj
        with pytest.raises((RecordError, OverflowError)) if not explained else contextlib.nullcontext():
            rec._check_scalars(obj, "record")
