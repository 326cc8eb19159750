"""Turn one cell's outcome (config + RunResult or error) into a ``mpcbench.record/1`` dict.

The record is flat where people filter (task, tier, seed, compressor, status, final
metric) and nested where they drill down (bytes per boundary, curve, provenance). A failed
or timed-out cell keeps the same keys with null metrics, so a store is one rectangular
pandas frame.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import asdict
from datetime import datetime, timezone
from typing import Any

from suite.pipeline.config import CellConfig
from suite.pipeline.result import RunResult
from suite.results.network.model import MODEL_VERSION
from suite.results.records import DIRECTIONS, METRIC_KEYS, SCHEMA, validate_record

__all__ = ["build_record", "failed_record", "compression_ratios", "expansion_warnings", "check_result", "ResultError"]


class ResultError(ValueError):
    """A RunResult is unusable (non-finite metric, negative bytes...)."""


def _asdict_or_none(obj: Any) -> dict[str, Any] | None:
    return asdict(obj) if obj is not None and hasattr(obj, "__dataclass_fields__") else None


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def compression_ratios(result: RunResult) -> dict[str, float | None]:
    """raw / wire bytes per direction and in total. None for a direction that sent nothing."""
    out: dict[str, float | None] = {}
    raw_total = wire_total = 0
    for direction in DIRECTIONS:
        c = result.bytes.get(direction)
        if c is None and direction.startswith("tp_"):  # tensor-parallel kinds: only in TP runs' records
            continue
        if c is None or c.wire == 0:
            out[direction] = None
            continue
        out[direction] = c.raw / c.wire
        raw_total += c.raw
        wire_total += c.wire
    out["total"] = raw_total / wire_total if wire_total else None
    return out


def expansion_warnings(config: CellConfig, result: RunResult) -> list[str]:
    """One line per direction whose compressor sent MORE bytes than the uncompressed tensors.

    Allowed (the bytes are measured, so the numbers stay honest and such a compressor simply
    ranks low) but flagged: it is almost always a plugin bug or a useless setting. The
    uncompressed ``none`` path is exempt: its wire bytes are raw plus message headers.
    """
    out = []
    for direction in DIRECTIONS:
        c = result.bytes.get(direction)
        specs = {config.plan.spec_for(direction, b) for b in range(max(1, result.n_stages - 1))}
        specs |= {s for _, d, s in config.plan.per_boundary if d == direction}
        if c is None or c.wire <= c.raw or specs <= {"none"}:
            continue
        out.append(
            f"{direction}: compressed payloads are larger than the raw tensors (wire {c.wire} B > raw {c.raw} B, "
            f"ratio {c.raw / c.wire:.2f}x)"
        )
    return out


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def check_result(result: RunResult) -> None:
    """Raise :class:`ResultError` (one line) unless every metric, byte count and time is sane."""
    if not isinstance(result, RunResult):
        raise ResultError(f"the runtime returned {type(result).__name__}, not a RunResult")
    if not _finite(result.final_metric):
        raise ResultError(f"final_metric is not finite ({result.final_metric!r})")
    if result.final_metric_uncompressed is not None and not _finite(result.final_metric_uncompressed):
        raise ResultError(f"final_metric_uncompressed is not finite ({result.final_metric_uncompressed!r})")
    for p in result.curve:
        if not _finite(p.metric):
            raise ResultError(f"curve metric at step {p.step} is not finite ({p.metric!r})")
        if not _finite(p.train_loss):
            raise ResultError(f"training loss at step {p.step} is not finite ({p.train_loss!r})")
    for group in (result.bytes, result.bytes_per_boundary):
        for d, c in group.items():
            for k in ("raw", "wire", "messages"):
                v = getattr(c, k)
                if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                    raise ResultError(f"bytes {d}.{k} must be a non-negative integer, got {v!r}")
    for k in ("step_s", "compute_s", "compress_s", "comm_s", "total_train_s", "total_eval_s"):
        v = getattr(result.time, k)
        if not _finite(v) or v < 0:
            raise ResultError(f"time.{k} is not a finite non-negative number ({v!r})")


def resolved_spec(spec: str) -> str:
    """``spec`` with every parameter that has a default spelled out, nested specs included:
    ``quant`` -> ``quant(bits=8, scale=row, ...)``, so a record says what ran even after a
    default changes, and the leaderboard can show it (``specs_resolved``). Unparsable: as given."""
    from compressors.registry import Spec, describe, parse_spec

    def fill(s: Spec) -> Spec:
        params = list(describe(s.name)["params"].items())
        given = {name for name, _ in params[: len(s.args)]} | {k for k, _ in s.kwargs}
        args = tuple(fill(a) if isinstance(a, Spec) else a for a in s.args)
        kwargs = [(k, fill(v) if isinstance(v, Spec) else v) for k, v in s.kwargs]
        kwargs += [(k, v) for k, v in params if k not in given and v is not None]
        return Spec(s.name, args, tuple(kwargs))

    try:
        return str(fill(parse_spec(spec)))
    except Exception:  # noqa: BLE001 - a spec the cell will reject anyway; the record keeps what was asked
        return spec


def display_label(compressor: str, specs: list[str]) -> str:
    """The short display name of a plan (``leaderboard.names.display_name``) with the labels the plugins
    among its compressors declare (``Compressor.label``); "" when no plugin declares one."""
    from compressors.registry import compressor_names, get_class
    from leaderboard.names import display_name

    labels = {}
    for spec in specs:
        try:
            names = compressor_names(spec)
        except Exception:  # noqa: BLE001 - a spec the cell rejects anyway
            continue
        for name in names:
            try:
                cls = get_class(name)
            except Exception:  # noqa: BLE001 - an unknown name: no label
                continue
            if cls.label and not cls.__module__.startswith("compressors."):
                labels[name] = " ".join(str(cls.label).split())[:40]
    return display_name(compressor, labels) if labels else ""


def _base(config: CellConfig, provenance: dict[str, Any], status: str, error: str | None) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "record_id": uuid.uuid4().hex,
        "cell_key": config.key(),
        "cell_id": config.cell_id,
        "created": _now(),
        "task": config.task,
        "tier": config.tier,
        "seed": config.seed,
        "compressor": config.plan.label,
        "display": display_label(config.plan.label, config.plan.all_specs()),
        "specs": config.plan.to_dict(),
        "specs_resolved": {d: resolved_spec(v) if isinstance(v, str) else v for d, v in config.plan.to_dict().items()},
        "status": status,
        "error": error,
    }


def build_record(
    config: CellConfig,
    result: RunResult,
    provenance: dict[str, Any],
    *,
    wall_s: float,
    log: str | None = None,
) -> dict[str, Any]:
    """The record of a successful cell (call :func:`check_result` first)."""
    r = result
    record = _base(config, provenance, "ok", None)
    record.update(
        {
            "metric_name": r.metric_name,
            "higher_is_better": bool(r.higher_is_better),
            "final_metric": float(r.final_metric),
            "final_metric_uncompressed": None
            if r.final_metric_uncompressed is None
            else float(r.final_metric_uncompressed),
            "target": float(r.target),
            "reached_target_step": r.reached_target_step,
            # secondary metrics only where a task has them (other tasks' records keep their keys)
            "curve": [{k: v for k, v in asdict(p).items() if k != "metrics" or v is not None} for p in r.curve],
            "bytes": {d: asdict(c) for d, c in r.bytes.items()},
            "bytes_per_boundary": {b: asdict(c) for b, c in r.bytes_per_boundary.items()},
            "bytes_per_step": {d: float(v) for d, v in r.bytes_per_step.items()},
            "compression_ratio": compression_ratios(r),
            "time": asdict(r.time),
            "wall_s": float(wall_s),
            "modeled": {p: dict(m) for p, m in r.modeled.items()},
            "model_version": MODEL_VERSION,  # which network model computed "modeled"
            "run": {
                "steps": r.steps,
                "n_stages": r.n_stages,
                "dp": r.dp,
                "microbatches": r.microbatches,
                "schedule": r.schedule,
                "mode": r.mode,
                "device": r.device,
                # the model's size, so a record of the scale ladder says what it trained (None: an old result)
                **({"model_params": int(params)} if (params := getattr(r, "model_params", None)) else {}),
            },
            "stage_times": [dict(s) for s in r.stage_times],
            "compressor_state_bytes": int(r.compressor_state_bytes),
            # counters compressors report (aqsgd: rows sent as deltas / in full / quantized directly)
            "compressor_stats": dict(getattr(r, "compressor_stats", {}) or {}),
            # evaluation traffic is not benchmark traffic, but is kept for inspection
            "eval_bytes": _asdict_or_none(getattr(r, "eval_bytes", None)),
            "wire_bytes_by_step": dict(getattr(r, "wire_bytes_by_step", {}) or {}),
            # what the network model used: a stored run can be re-modeled under other profiles
            "timing_inputs": dict(getattr(r, "timing_inputs", {}) or {}),
            "warnings": expansion_warnings(config, r),
            # multi-host / emulated-link runs: hosts, link, kernel byte counters, measured next to modeled
            **({"network": dict(r.network)} if getattr(r, "network", None) else {}),
            "config": config.to_dict(),
            "provenance": provenance,
            "log": log,
        }
    )
    return validate_record(record)


def failed_record(
    config: CellConfig,
    error: str,
    provenance: dict[str, Any],
    *,
    status: str = "failed",
    wall_s: float | None = None,
    log: str | None = None,
) -> dict[str, Any]:
    """The record of a failed or timed-out cell: one-line ``error``, null metrics."""
    line = " ".join(str(error).split()) or "unknown error"
    if len(line) > 1000:
        line = line[:997] + "..."
    record = _base(config, provenance, status, line)
    record.update({k: None for k in METRIC_KEYS})
    record.update({"wall_s": wall_s, "config": config.to_dict(), "provenance": provenance, "log": log})
    return validate_record(record)
