"""The result record: one JSON object per cell, the unit of the results store and leaderboard.

Schema ``mpcbench.record/1`` (JSON Lines, one record per line; ``pandas.read_json(path,
lines=True)`` reads a store). Required keys and types are in ``REQUIRED``; a record that
fails :func:`validate_record` is rejected with the reason. Validation is strict about types
and bounded sizes because records also come from strangers (leaderboard submissions).

Example (abridged)::

    {"schema": "mpcbench.record/1", "record_id": "9f0c...", "cell_key": "1a2b3c4d5e6f7a8b",
     "cell_id": "cifar10-topk(ratio=0.1)-seed0", "created": "2026-11-22T15:30:00+00:00",
     "task": "cifar10", "tier": "quick", "seed": 0, "compressor": "topk(ratio=0.1)",
     "specs": {"forward": "topk(ratio=0.1)", "backward": "topk(ratio=0.1)", "dp": "none"},
     "status": "ok", "error": null,
     "metric_name": "accuracy", "higher_is_better": true, "final_metric": 0.61,
     "final_metric_uncompressed": 0.62, "target": 0.5, "reached_target_step": 120,
     "curve": [{"step": 10, "metric": 0.3, "metric_uncompressed": 0.31, "train_loss": 1.9, "wall_s": 4.2}],
     "bytes": {"forward": {"raw": 1, "wire": 1, "messages": 1}, "backward": {...}, "dp": {...}},
     "bytes_per_boundary": {"b0.forward": {...}}, "bytes_per_step": {"forward": 1.0, ...},
     "compression_ratio": {"forward": 10.0, "backward": 10.0, "dp": 1.0, "total": 10.0},
     "time": {"step_s": 0.1, "compute_s": 0.08, "compress_s": 0.01, "comm_s": 0.01,
              "total_train_s": 12.0, "total_eval_s": 1.0},
     "wall_s": 14.0,
     "modeled": {"1Gbps": {"step_s": 0.2, "total_s": 40.0, "time_to_target_s": 24.0, "comm_s_per_step": 0.1}},
     "run": {"steps": 200, "n_stages": 4, "dp": 1, "microbatches": 4, "schedule": "1f1b",
             "mode": "single", "device": "cpu"},
     "config": {...CellConfig.to_dict()...},
     "provenance": {"git_commit": "abc123", "git_dirty": false, "mpcbench_version": "0.1.0",
                    "plugin_hashes": {"topk(ratio=0.1)": "0123456789abcdef"},
                    "machine": {"cpu": "...", "gpu": null, "torch": "2.14.1", "cuda": null,
                                "python": "3.11.7", "platform": "...", "hostname": "..."}}}

A failed cell has ``status`` "failed" (or "timeout"), a one-line ``error``, and null metrics.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["SCHEMA", "STATUSES", "REQUIRED", "RecordError", "validate_record", "is_ok"]

SCHEMA = "mpcbench.record/1"
STATUSES = ("ok", "failed", "timeout")

_NUM = (int, float)
REQUIRED: dict[str, tuple[type, ...]] = {
    "schema": (str,),
    "record_id": (str,),
    "cell_key": (str,),
    "cell_id": (str,),
    "created": (str,),
    "task": (str,),
    "tier": (str,),
    "seed": (int,),
    "compressor": (str,),
    "specs": (dict,),
    "status": (str,),
    "config": (dict,),
    "provenance": (dict,),
}
# Required when status == "ok"
REQUIRED_OK: dict[str, tuple[type, ...]] = {
    "metric_name": (str,),
    "higher_is_better": (bool,),
    "final_metric": _NUM,
    "curve": (list,),
    "bytes": (dict,),
    "bytes_per_step": (dict,),
    "time": (dict,),
    "modeled": (dict,),
    "run": (dict,),
}
MAX_STR = 2000  # no field of a record needs more; longer text is hostile or broken
MAX_CURVE = 100_000
MAX_ABS = 1e18


class RecordError(ValueError):
    """A record does not match the schema; the message says which field and why."""


def is_ok(record: dict[str, Any]) -> bool:
    return record.get("status") == "ok"


def _check_scalars(obj: Any, path: str, depth: int = 0) -> None:
    """Bound nesting, string length and number magnitude everywhere in the record."""
    if depth > 8:
        raise RecordError(f"{path}: nested too deeply")
    if isinstance(obj, dict):
        if len(obj) > 10_000:
            raise RecordError(f"{path}: too many keys ({len(obj)})")
        for k, v in obj.items():
            if not isinstance(k, str):
                raise RecordError(f"{path}: key {k!r} is not a string")
            if len(k) > MAX_STR:
                raise RecordError(f"{path}: key longer than {MAX_STR} characters")
            _check_scalars(v, f"{path}.{k}", depth + 1)
    elif isinstance(obj, list):
        if len(obj) > MAX_CURVE:
            raise RecordError(f"{path}: list longer than {MAX_CURVE}")
        for i, v in enumerate(obj):
            _check_scalars(v, f"{path}[{i}]", depth + 1)
    elif isinstance(obj, str):
        if len(obj) > MAX_STR:
            raise RecordError(f"{path}: string longer than {MAX_STR} characters")
    elif isinstance(obj, bool) or obj is None:
        return
    elif isinstance(obj, (int, float)):
        if isinstance(obj, float) and math.isnan(obj):
            return  # NaN is a legitimate "not measured" in curves; final metrics are checked below
        if not math.isfinite(obj) or abs(obj) > MAX_ABS:
            raise RecordError(f"{path}: number {obj!r} out of range")
    else:
        raise RecordError(f"{path}: unsupported value type {type(obj).__name__}")


def validate_record(record: Any) -> dict[str, Any]:
    """Return ``record`` if it is a valid ``mpcbench.record/1``; raise :class:`RecordError` naming the problem."""
    if not isinstance(record, dict):
        raise RecordError(f"record must be a JSON object, got {type(record).__name__}")
    _check_scalars(record, "record")
    if record.get("schema") != SCHEMA:
        raise RecordError(f"schema must be {SCHEMA!r}, got {record.get('schema')!r}")
    for key, types in REQUIRED.items():
        if key not in record:
            raise RecordError(f"missing field {key!r}")
        v = record[key]
        if not isinstance(v, types) or (isinstance(v, bool) and bool not in types):
            raise RecordError(f"field {key!r} must be {'/'.join(t.__name__ for t in types)}, got {type(v).__name__}")
    if record["status"] not in STATUSES:
        raise RecordError(f"status must be one of {', '.join(STATUSES)}, got {record['status']!r}")
    if record["seed"] < 0:
        raise RecordError("seed must be >= 0")
    if not is_ok(record):
        err = record.get("error")
        if not isinstance(err, str) or not err:
            raise RecordError("a failed record needs a non-empty one-line 'error'")
        if "\n" in err:
            raise RecordError("'error' must be one line")
        return record
    for key, types in REQUIRED_OK.items():
        if key not in record:
            raise RecordError(f"missing field {key!r} (required when status is ok)")
        v = record[key]
        if not isinstance(v, types) or (isinstance(v, bool) and bool not in types):
            raise RecordError(f"field {key!r} must be {'/'.join(t.__name__ for t in types)}, got {type(v).__name__}")
    if not math.isfinite(float(record["final_metric"])):
        raise RecordError("final_metric must be finite")
    for direction, counts in record["bytes"].items():
        if not isinstance(counts, dict):
            raise RecordError(f"bytes.{direction} must be an object")
        for k in ("raw", "wire"):
            v = counts.get(k)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise RecordError(f"bytes.{direction}.{k} must be a non-negative integer, got {v!r}")
    for i, p in enumerate(record["curve"]):
        if not isinstance(p, dict) or not isinstance(p.get("step"), int) or not isinstance(p.get("metric"), _NUM):
            raise RecordError(f"curve[{i}] must have integer 'step' and numeric 'metric'")
    for prof, m in record["modeled"].items():
        if not isinstance(m, dict):
            raise RecordError(f"modeled.{prof} must be an object")
    return record
