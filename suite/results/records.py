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
     "model_version": 3,
     "run": {"steps": 200, "n_stages": 4, "dp": 1, "microbatches": 4, "schedule": "1f1b",
             "mode": "single", "device": "cpu", "model_params": 11173962},
     "config": {...CellConfig.to_dict()...},
     "provenance": {"git_commit": "abc123", "git_dirty": false, "mpcbench_version": "0.1.0",
                    "plugin_hashes": {"topk(ratio=0.1)": "0123456789abcdef"},
                    "machine": {"cpu": "...", "gpu": null, "torch": "2.14.1", "cuda": null,
                                "python": "3.11.7", "platform": "...", "hostname": "..."}}}

A failed cell has ``status`` "failed" (or "timeout"), a one-line ``error``, and null metrics.
"""

from __future__ import annotations

import datetime as _dt
import math
from typing import Any

from .task_catalog import catalog, describe

__all__ = [
    "SCHEMA",
    "STATUSES",
    "REQUIRED",
    "RecordError",
    "validate_record",
    "is_ok",
    "derived_bytes_per_step",
    "MAX_SEED",
    "MAX_BYTES",
    "MAX_STEPS",
    "task_metrics",
    "IDENTITY_KEYS",
    "QUALITY_KEYS",
    "METRIC_KEYS",
]

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
# The record's key lists, one home each (the record builder, the runner's summaries and the
# leaderboard's frame read them here):
# which cell and how it ended, one scalar each
IDENTITY_KEYS = ("record_id", "cell_key", "cell_id", "created", "task", "tier", "compressor", "seed", "status", "error")
# what its training reached, one scalar each
QUALITY_KEYS = (
    "metric_name",
    "higher_is_better",
    "final_metric",
    "final_metric_uncompressed",
    "target",
    "reached_target_step",
)
# everything measured: null in a failed record
METRIC_KEYS = (
    *QUALITY_KEYS,
    "curve",
    "bytes",
    "bytes_per_boundary",
    "bytes_per_step",
    "compression_ratio",
    "time",
    "modeled",
    "model_version",
    "run",
    "stage_times",
    "compressor_state_bytes",
    "compressor_stats",
    "eval_bytes",
    "wire_bytes_by_step",
    "timing_inputs",
    "warnings",
)
MAX_STR = 2000  # no field of a record needs more; longer text is hostile or broken
MAX_CURVE = 100_000
MAX_ABS = 1e18
# Plausibility bounds (a record outside them is forged or broken, whoever made it):
MAX_SEED = 2**31 - 1  # torch seeds are 64-bit, but no matrix needs more than this; bounded for the runner too
MAX_BYTES = 2**50  # 1.1e15 B = a 100 Gbps link saturated for a whole day: more than any cell can send
MAX_STEPS = 10_000_000
MAX_PLACEMENT = 4096  # stages, replicas, micro-batches
MAX_MODEL_PARAMS = 10**13  # run.model_params: far above any model trained today, a bound on untrusted text
MAX_SECONDS = 30 * 24 * 3600.0  # a measured or modeled time above 30 days is not a benchmark cell
MAX_METRIC = 1e6  # |metric| for metrics without a known range (a loss of 1e6 nats is already broken)
EARLIEST = _dt.datetime(2020, 1, 1, tzinfo=_dt.timezone.utc)
CLOCK_SKEW = _dt.timedelta(days=1)  # "created" may be this far ahead of the reader's clock, no further
DIRECTIONS = ("forward", "backward", "dp", "tp_forward", "tp_backward")  # tp_*: tensor-parallel runs only
# metric name -> (low, high) allowed for its values when the task has no description here; a
# described task's own ``metric_range`` wins; other lower-is-better metrics (losses, perplexities)
# must be >= 0, and every metric is bounded by MAX_METRIC
METRIC_RANGES: dict[str, tuple[float, float]] = {"accuracy": (0.0, 1.0), "f1": (0.0, 1.0)}


def task_metrics() -> dict[str, tuple[str, bool]]:
    """Every described task's (metric, higher_is_better), read from its module's DESCRIPTION
    (:mod:`suite.results.task_catalog`; this layer imports no task code): a record of a described
    task must use its metric and direction."""
    return {n: (d.metric, d.higher_is_better) for n, d in catalog().items()}


class RecordError(ValueError):
    """A record does not match the schema; the message says which field and why."""


def is_ok(record: dict[str, Any]) -> bool:
    return record.get("status") == "ok"


_NUMBER_TYPES = frozenset((int, float, bool))
_STR_TYPE = frozenset((str,))


def _scalars_ok(obj: Any) -> bool:
    """True if :func:`_explain_scalars` would find nothing wrong: the same checks without
    building a path per value (the board validates ~1,800 values per record on first sight).
    Anything it is unsure of (a type other than JSON's own) says False.

    Walked level by level (the depth is the level's), leaves checked inline, every object's keys
    checked together at the end (two C loops for all ~400 keys of a record, not two per object)."""
    level: list[Any] = [obj]
    keys: list[Any] = []
    depth = 0
    while level:
        below: list[Any] = []
        push = below.append
        for o in level:
            t = type(o)
            if t is list or t is dict:
                if depth >= 8 or len(o) > (MAX_CURVE if t is list else 10_000):
                    return False
                if t is dict:
                    keys.extend(o)
                    values = o.values()
                # a list of plain numbers (per-step byte counts: most of a record's values) in C loops: every
                # |v| is at most the sum of them all, which is NaN or inf where one is (those take the loop below)
                elif len(o) > 8 and _NUMBER_TYPES.issuperset(map(type, o)) and sum(map(abs, o)) <= MAX_ABS:
                    continue
                else:
                    values = o
                for v in values:  # leaves inline, containers to the next level
                    tv = type(v)
                    if tv is float:
                        if not -MAX_ABS <= v <= MAX_ABS and v == v:  # out of range or +-Inf; NaN passes
                            return False
                    elif tv is int:
                        if not -MAX_ABS <= v <= MAX_ABS:
                            return False
                    elif tv is str:
                        if len(v) > MAX_STR:
                            return False
                    elif v is not None and tv is not bool:
                        push(v)
            elif t is float:
                if not -MAX_ABS <= o <= MAX_ABS and o == o:
                    return False
            elif t is str:
                if len(o) > MAX_STR:
                    return False
            elif t is int:
                if not -MAX_ABS <= o <= MAX_ABS:
                    return False
            elif o is not None and t is not bool:
                return False
        level = below
        depth += 1
    # keys: str only, none too long
    return not keys or (_STR_TYPE.issuperset(map(type, keys)) and max(map(len, keys)) <= MAX_STR)


def _check_scalars(obj: Any, path: str, depth: int = 0) -> None:
    """Bound nesting, string length and number magnitude everywhere in the record."""
    if depth == 0 and _scalars_ok(obj):
        return
    _explain_scalars(obj, path, depth)


def _explain_scalars(obj: Any, path: str, depth: int = 0) -> None:
    """:func:`_check_scalars`, walking with the path of every value to name the offender."""
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
            # a hostile key must not break the one-line error: control characters are shown escaped
            _explain_scalars(v, f"{path}.{k if k.isprintable() else ascii(k)}", depth + 1)
    elif isinstance(obj, list):
        if len(obj) > MAX_CURVE:
            raise RecordError(f"{path}: list longer than {MAX_CURVE}")
        for i, v in enumerate(obj):
            _explain_scalars(v, f"{path}[{i}]", depth + 1)
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
    if not 0 <= record["seed"] <= MAX_SEED:
        raise RecordError(f"seed must be in [0, {MAX_SEED}], got {record['seed']}")
    _check_created(record["created"])
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
    _check_plausible(record)
    _check_timing_inputs(record.get("timing_inputs"))
    return record


# The network model's cost is (distinct step loads) x (scheduled actions) x (profiles): bounded before any
# simulation, so that one record cannot stall re-modeling (a 2 MB record once scaled to hours of CPU).
MAX_TIMING_RANKS = 256  # pipeline ranks in ``schedule``
MAX_TIMING_ACTIONS = 4096  # actions of one rank per step
MAX_TIMING_LOADS = 4096  # distinct step loads (run-length encoded ``steps``)
MAX_TIMING_LINKS = 256  # links or data-parallel entries of one step load
MAX_TIMING_WORK = 50_000  # loads x actions: ~4 s of simulation over every profile (a quick-tier cell: <= 8,192)


def _length(v: Any) -> int:
    """Items of a list or object (0 for anything else: its type is the model reader's to refuse)."""
    return len(v) if isinstance(v, (list, dict)) else 0


def _check_timing_inputs(ti: Any) -> None:
    """Sizes of ``timing_inputs`` within the caps above (its values are checked by the model's reader)."""
    if ti is None:
        return
    if not isinstance(ti, dict):
        raise RecordError(f"timing_inputs must be an object, got {type(ti).__name__}")
    schedule, steps = ti.get("schedule") or [], ti.get("steps") or []
    if not isinstance(schedule, list) or not isinstance(steps, list):
        raise RecordError("timing_inputs.schedule and .steps must be lists")
    if len(schedule) > MAX_TIMING_RANKS:
        raise RecordError(f"timing_inputs.schedule has {len(schedule)} ranks, over the limit of {MAX_TIMING_RANKS}")
    actions = 0
    for rank in schedule:
        n = len(rank) if isinstance(rank, list) else 0
        if n > MAX_TIMING_ACTIONS:
            raise RecordError(
                f"timing_inputs.schedule has a rank of {n} actions, over the limit of {MAX_TIMING_ACTIONS}"
            )
        actions += n
    if len(steps) > MAX_TIMING_LOADS:
        raise RecordError(f"timing_inputs.steps has {len(steps)} step loads, over the limit of {MAX_TIMING_LOADS}")
    for s in steps:
        if isinstance(s, dict) and any(_length(s.get(k)) > MAX_TIMING_LINKS for k in ("links", "dp")):
            raise RecordError(f"timing_inputs.steps has a step load with more than {MAX_TIMING_LINKS} links")
    for k in ("stages", "mean_stages"):
        if _length(ti.get(k)) > MAX_TIMING_RANKS * 4:
            raise RecordError(f"timing_inputs.{k} has more than {MAX_TIMING_RANKS * 4} stages")
    counts = ti.get("counts") or []
    if counts and (not isinstance(counts, list) or len(counts) != len(steps)):
        raise RecordError("timing_inputs.counts must have one count per step load")
    for k in ("microbatches", "replicas"):
        if k in ti:
            _int_in(ti[k], 1, MAX_PLACEMENT, f"timing_inputs.{k}")
    if len(steps) * actions > MAX_TIMING_WORK:
        raise RecordError(
            f"timing_inputs: {len(steps)} step loads x {actions} actions is over the simulation budget of "
            f"{MAX_TIMING_WORK}; re-model fewer distinct loads"
        )


def _check_created(created: str) -> None:
    """An ISO 8601 time that exists, after 2020 and not in the future (beyond a day of clock skew)."""
    try:
        t = _dt.datetime.fromisoformat(created)
    except ValueError:
        raise RecordError(f"created must be an ISO 8601 date-time, got {created!r}") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=_dt.timezone.utc)
    if not EARLIEST <= t <= _dt.datetime.now(_dt.timezone.utc) + CLOCK_SKEW:
        raise RecordError(f"created {created!r} is before 2020 or in the future")


def _int_in(v: Any, lo: int, hi: int, where: str) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
        what = f"a non-negative integer (at most {hi})" if lo == 0 else f"an integer in [{lo}, {hi}]"
        raise RecordError(f"{where} must be {what}, got {v!r}")
    return v


def _num_in(v: Any, lo: float, hi: float, where: str, *, optional: bool = False) -> None:
    if v is None and optional:
        return
    if not isinstance(v, _NUM) or isinstance(v, bool):
        raise RecordError(f"{where} must be a number, got {type(v).__name__}")
    if math.isnan(v) and optional:
        return
    if not lo <= v <= hi:
        raise RecordError(f"{where} = {v!r} is outside the plausible range [{lo:g}, {hi:g}]")


def _fine(v: Any, lo: float, hi: float) -> bool:
    """True where ``_num_in(v, lo, hi, ..., optional=True)`` passes for certain (None, NaN, a plain
    float or int in range); False sends the value to ``_num_in``, which decides and words the
    reason. Hot loops ask this first, so that a record's ~50 valid values build no message text."""
    t = type(v)
    return v is None or ((t is float or t is int) and (lo <= v <= hi or v != v))


def metric_range(name: str, higher_is_better: bool) -> tuple[float, float]:
    """The values a metric can take: [0, 1] for accuracies, >= 0 for losses, else |x| <= MAX_METRIC."""
    if name in METRIC_RANGES:
        return METRIC_RANGES[name]
    return (-MAX_METRIC if higher_is_better else 0.0), MAX_METRIC


def derived_bytes_per_step(record: dict[str, Any]) -> dict[str, float]:
    """Wire bytes per training step per direction, from ``bytes`` and ``run.steps`` (what the
    runtime records; the leaderboard uses this, never the record's own ``bytes_per_step``)."""
    steps = record["run"]["steps"]
    return {d: c["wire"] / steps for d, c in record["bytes"].items()}


_CURVE_BOUNDS = (("train_loss", 0.0, MAX_METRIC), ("wall_s", 0.0, MAX_SECONDS))


def _check_plausible(record: dict[str, Any]) -> None:
    """Ranges and cross-field consistency of an ``ok`` record (see the bounds above)."""
    task, name, hib = record["task"], record["metric_name"], record["higher_is_better"]
    described = describe(task)
    if described is not None and (described.metric, described.higher_is_better) != (name, hib):
        want, want_hib = described.metric, described.higher_is_better
        raise RecordError(
            f"task {task!r} is measured by {want!r} ({'higher' if want_hib else 'lower'} is better), "
            f"not {name!r} ({'higher' if hib else 'lower'} is better)"
        )
    lo, hi = described.metric_range if described and described.metric_range else metric_range(name, hib)
    _num_in(record["final_metric"], lo, hi, "final_metric")
    _num_in(record.get("final_metric_uncompressed"), lo, hi, "final_metric_uncompressed", optional=True)
    _num_in(record.get("target"), lo, hi, "target", optional=True)
    run = record["run"]
    steps = _int_in(run.get("steps"), 1, MAX_STEPS, "run.steps")
    for k in ("n_stages", "dp", "microbatches"):
        if k in run:
            _int_in(run[k], 1, MAX_PLACEMENT, f"run.{k}")
    if "model_params" in run:
        _int_in(run["model_params"], 1, MAX_MODEL_PARAMS, "run.model_params")
    if record.get("reached_target_step") is not None:
        _int_in(record["reached_target_step"], 0, steps, "reached_target_step")
    for i, p in enumerate(record["curve"]):
        if not isinstance(p, dict) or not isinstance(p.get("step"), int) or not isinstance(p.get("metric"), _NUM):
            raise RecordError(f"curve[{i}] must have integer 'step' and numeric 'metric'")
        step = p["step"]
        if not (type(step) is int and 0 <= step <= steps):
            _int_in(step, 0, steps, f"curve[{i}].step")
        for key, low, high in (("metric", lo, hi), ("metric_uncompressed", lo, hi)) + _CURVE_BOUNDS:
            if not _fine(p.get(key), low, high):
                _num_in(p.get(key), low, high, f"curve[{i}].{key}", optional=True)
    _check_bytes(record, steps)
    for k, v in record["time"].items():
        if not _fine(v, 0.0, MAX_SECONDS):
            _num_in(v, 0.0, MAX_SECONDS, f"time.{k}", optional=True)
    _num_in(record.get("wall_s"), 0.0, MAX_SECONDS, "wall_s", optional=True)
    mv = record.get("model_version")
    if mv is not None and (not isinstance(mv, int) or isinstance(mv, bool) or not 1 <= mv <= 1000):
        raise RecordError(f"model_version must be a positive integer (suite.results.network.MODEL_VERSION), got {mv!r}")
    for prof, m in record["modeled"].items():
        if not isinstance(m, dict):
            raise RecordError(f"modeled.{prof} must be an object")
        for k, v in m.items():
            if not _fine(v, 0.0, MAX_SECONDS):
                _num_in(v, 0.0, MAX_SECONDS, f"modeled.{prof}.{k}", optional=True)


def _check_bytes(record: dict[str, Any], steps: int) -> None:
    """Byte counts: non-negative integers below MAX_BYTES, consistent with each other and with
    ``bytes_per_step`` (which must equal wire bytes / steps: it is derived, not a claim)."""
    counts = record["bytes"]
    for direction, c in counts.items():
        if direction not in DIRECTIONS:
            raise RecordError(f"bytes.{direction}: unknown direction (valid: {', '.join(DIRECTIONS)})")
        if not isinstance(c, dict):
            raise RecordError(f"bytes.{direction} must be an object")
        raw, wire = (_int_in(c.get(k), 0, MAX_BYTES, f"bytes.{direction}.{k}") for k in ("raw", "wire"))
        messages = _int_in(c.get("messages", 0), 0, MAX_BYTES, f"bytes.{direction}.messages")
        if messages == 0 and (raw or wire):
            raise RecordError(f"bytes.{direction}: {raw} raw / {wire} wire bytes in 0 messages")
        if messages > wire:
            raise RecordError(f"bytes.{direction}: {messages} messages cannot fit in {wire} wire bytes")
    per_boundary = record.get("bytes_per_boundary") or {}
    if not isinstance(per_boundary, dict):
        raise RecordError("bytes_per_boundary must be an object")
    for direction in ("forward", "backward"):
        parts = [v for k, v in per_boundary.items() if k.endswith("." + direction)]
        if not parts or direction not in counts:
            continue
        for field in ("raw", "wire"):
            total = sum(p.get(field, 0) if isinstance(p, dict) and isinstance(p.get(field), int) else 0 for p in parts)
            if total != counts[direction][field]:
                raise RecordError(
                    f"bytes_per_boundary *.{direction} {field} bytes add up to {total}, "
                    f"but bytes.{direction}.{field} is {counts[direction][field]}"
                )
    bps = record["bytes_per_step"]
    derived = {d: c["wire"] / steps for d, c in counts.items()}
    for d, v in bps.items():
        if d not in derived:
            raise RecordError(f"bytes_per_step.{d} has no byte count in bytes.{d}")
        _num_in(v, 0.0, float(MAX_BYTES), f"bytes_per_step.{d}")
        if abs(v - derived[d]) > 1e-6 * max(1.0, derived[d]):
            raise RecordError(
                f"bytes_per_step.{d} = {v!r} but bytes.{d}.wire / run.steps = {derived[d]!r}: "
                "bytes per step are derived from the counted bytes, not claimed"
            )
