"""Fixture records for the leaderboard tests: VALID mpcbench.record/1 dicts with plausible numbers.

``make_record`` builds one record (any field overridable); ``make_records`` the default
fixture set: 2 tasks (cifar10: accuracy, higher is better; shakespeare: val_loss, lower is
better) x 4 compressors x 3 seeds. The numbers follow a small model of the real thing so the
rules disagree in a known way: topk sends the fewest bytes but loses quality and is slow to
reach the target, so it wins time-to-target only on a slow network.
"""

from __future__ import annotations

import hashlib
import json
import types
from pathlib import Path
from typing import Any

import pytest
import yaml

from suite.pipeline.config import CellConfig, CompressionPlan
from suite.results.network import MODEL_VERSION
from suite.results.records import SCHEMA, validate_record
from suite.schedules import build_schedule

TASKS = {
    # task: (metric, higher_is_better, target, base quality, steps)
    "cifar10": ("accuracy", True, 0.5, 0.62, 200),
    "shakespeare": ("val_loss", False, 6.0, 5.0, 200),  # metric and direction as tasks/shakespeare.py
}
# compressor: (wire fraction of raw bytes, quality change (in "better" units), steps to target, compress s/step)
COMPRESSORS = {
    "none": (1.0, 0.0, 100, 0.0),
    "fp16": (0.5, 0.0, 100, 0.002),
    "quant(bits=4)": (0.135, -0.01, 110, 0.006),
    "topk(ratio=0.1)": (0.2, -0.04, 140, 0.01),
}
PROFILES = {"100Gbps": (100e9, 5e-6), "1Gbps": (1e9, 5e-5), "80Mbps": (80e6, 1e-3)}
RAW_PER_STEP = 4_000_000  # activation bytes per step per direction (both boundaries together)
COMPUTE_S = 0.1


def _hex(*parts: Any, n: int = 16) -> str:
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:n]


def make_record(task: str = "cifar10", compressor: str = "none", seed: int = 0, **overrides: Any) -> dict[str, Any]:
    """One valid record; ``overrides`` replace top-level fields (``status="failed"`` makes a failed one)."""
    metric, hib, target, base, steps = TASKS.get(task, ("accuracy", True, 0.5, 0.6, 200))
    frac, dq, steps_to_target, compress_s = COMPRESSORS.get(compressor, (0.5, 0.0, 120, 0.005))
    noise = (int(_hex(compressor, seed)[:4], 16) % 9 - 4) / 1000  # deterministic, within +-0.004
    sign = 1 if hib else -10  # the loss moves ~10x more than accuracy
    quality = base + sign * (dq + noise)
    raw = RAW_PER_STEP * steps
    wire = int(raw * frac)
    step_s = COMPUTE_S + compress_s
    modeled = {}
    for name, (bw, lat) in PROFILES.items():
        comm = 2 * wire / steps * 8 / bw + 4 * lat
        m_step = step_s + comm
        modeled[name] = {
            "step_s": m_step,
            "total_s": m_step * steps,
            "time_to_target_s": m_step * steps_to_target,
            "comm_s_per_step": comm,
        }
    # the network model's stored inputs: 3 stages, 2 links, 4 micro-batches; wire bytes split
    # evenly over the links and micro-batches (what the slider re-models)
    # (version 2: the schedule, per-action costs; the time model prices these: the fixture tasks' setups
    # have no calibration, so their own costs stand, and a compressor's codec is its pre/post seconds)
    per_msg = wire / steps / 2 / 4
    mb_compute, mb_codec = COMPUTE_S / 3 / 4, compress_s / 3 / 4  # per stage and micro-batch
    action = lambda share: {"pre_s": mb_codec / 4, "compute_s": mb_compute * share, "post_s": mb_codec / 4}  # noqa: E731
    stage = {"actions": {"F": action(1 / 3), "B": action(2 / 3)}, "optimizer_s": 0.0}
    link = {"fwd_bytes": per_msg, "bwd_bytes": per_msg, "fwd_messages": 1.0, "bwd_messages": 1.0}
    timing_inputs = {
        "schedule": build_schedule("1f1b", 3, 4).to_lists(),
        "stages": [stage] * 3,
        "steps": [{"links": [link, link], "dp": []}],
        "microbatches": 4,
        "replicas": 1,
        "warmup_steps": 0,
        "counts": [steps],
        "target_step": float(steps_to_target),
        "extra": {},
    }
    plan = CompressionPlan.from_dict(compressor)
    cfg = CellConfig(task=task, tier="quick", seed=seed, plan=plan, stages=3)
    rec: dict[str, Any] = {
        "schema": SCHEMA,
        "record_id": _hex(task, compressor, seed, overrides.get("tier", "quick"), n=32),
        "cell_key": cfg.key(),
        "cell_id": cfg.cell_id,
        "created": f"2026-01-0{1 + seed % 9}T12:00:00+00:00",
        "task": task,
        "tier": "quick",
        "seed": seed,
        "compressor": compressor,
        "specs": {"forward": compressor, "backward": compressor, "dp": "none"},
        "status": "ok",
        "error": None,
        "metric_name": metric,
        "higher_is_better": hib,
        "final_metric": quality,
        "final_metric_uncompressed": quality + (0.002 if hib else -0.02),
        "target": target,
        "reached_target_step": steps_to_target,
        "curve": [
            {
                "step": s,
                "metric": quality * s / steps if hib else quality + 20 * (1 - s / steps),
                "metric_uncompressed": None,
                "train_loss": 2.0 - s / steps,
                "wall_s": s * step_s,
            }
            for s in range(40, steps + 1, 40)
        ],
        "bytes": {
            "forward": {"raw": raw, "wire": wire, "messages": 2 * steps},
            "backward": {"raw": raw, "wire": wire, "messages": 2 * steps},
            "dp": {"raw": 0, "wire": 0, "messages": 0},
        },
        "bytes_per_boundary": {},
        "bytes_per_step": {"forward": wire / steps, "backward": wire / steps, "dp": 0.0},
        "compression_ratio": {"forward": 1 / frac, "backward": 1 / frac, "dp": 1.0, "total": 1 / frac},
        "time": {
            "step_s": step_s,
            "compute_s": COMPUTE_S,
            "compress_s": compress_s,
            "comm_s": 0.0,
            "total_train_s": step_s * steps,
            "total_eval_s": 1.0,
        },
        "wall_s": step_s * steps + 1.0,
        "modeled": modeled,
        "model_version": MODEL_VERSION,  # the hand-made times above stand as the current model's
        "timing_inputs": timing_inputs,
        "run": {
            "steps": steps,
            "n_stages": 3,
            "dp": 1,
            "microbatches": 4,
            "schedule": "1f1b",
            "mode": "single",
            "device": "cpu",
        },
        "config": cfg.to_dict(),
        "provenance": {
            "git_commit": "0123abc",
            "git_dirty": False,
            "mpcbench_version": "0.1.0",
            "plugin_hashes": {compressor: _hex("src", compressor)},
            "machine": {
                "cpu": "test-cpu",
                "cpu_count": 2,
                "gpu": None,
                "torch": "2.14.1",
                "cuda": None,
                "python": "3.11.7",
                "platform": "linux",
                "hostname": "ci",
            },
            "load": {"load_avg": [1.5, 1.2, 1.0]},
        },
    }
    rec.update(overrides)
    if rec["status"] != "ok":
        for k in ("final_metric", "final_metric_uncompressed", "reached_target_step"):
            rec[k] = None
        rec["error"] = rec["error"] or "RuntimeError: boom"
    return validate_record(rec)


def never_reached(rec: dict[str, Any]) -> dict[str, Any]:
    """``rec`` as a run that never met its target: its quality curve stays short of it (the time
    model then gives no time-to-target on any link)."""
    rec["reached_target_step"] = None
    rec["timing_inputs"]["target_step"] = None
    rec["curve"] = [dict(p, metric=(0.0 if rec["higher_is_better"] else 99.0)) for p in rec["curve"]]
    for m in rec["modeled"].values():
        m["time_to_target_s"] = None
    return rec


def modeled_at(rec: dict[str, Any], profile: str, field: str = "time_to_target_s") -> float | None:
    """The board's modeled time of a record at a named profile (the time model's, not the record's own)."""
    from leaderboard.frame import board_times

    got = board_times(rec)
    assert got is not None
    return got[1][profile][field]


def with_time_to_target(rec: dict[str, Any], seconds: float, target_step: float = 100.0) -> dict[str, Any]:
    """``rec`` with timing inputs that the time model turns into ``seconds`` to its target on every
    link: one rank, no messages, ``seconds / target_step`` of compute a step (for tests that need
    hand-set times; the record's setup has no calibration, so its own costs stand)."""
    per_step = seconds / target_step
    rec["timing_inputs"] = {
        "schedule": [["0F0", "0B0"]],
        "stages": [{"actions": {"F": {"compute_s": per_step / 3}, "B": {"compute_s": 2 * per_step / 3}}}],
        "steps": [{"links": [], "dp": []}],
        "counts": [int(2 * target_step)],
        "microbatches": 1,
        "replicas": 1,
        "target_step": target_step,
    }
    return rec


def make_records(tasks=tuple(TASKS), compressors=tuple(COMPRESSORS), seeds=(0, 1, 2)) -> list[dict[str, Any]]:
    return [make_record(t, c, s) for t in tasks for c in compressors for s in seeds]


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def write_entry(root: Path, entry: str, records: list[dict[str, Any]], **info: Any) -> Path:
    """A submission folder ``root/entry`` with entry.yaml (defaults filled) and results.jsonl."""
    d = root / entry
    d.mkdir(parents=True, exist_ok=True)
    meta = {"name": entry, "submitter": "tester", "date": "2026-01-15", "description": "fixture entry"}
    meta.update(info)
    (d / "entry.yaml").write_text(yaml.safe_dump(meta))
    write_jsonl(d / "results.jsonl", records)
    return d


# if this ever became markup, the page would set window.__mpcbench_pwned (the browser test checks)
HOSTILE_NAME = '<img src=x onerror="window.__mpcbench_pwned=1"><script>window.__mpcbench_pwned=2</script>'


def make_records_dir(root: Path) -> Path:
    """A records/ folder: a good baseline entry, a hostile-but-valid entry, and broken ones."""
    write_entry(root, "fixture-baselines", make_records(), name="Fixture baselines")
    # valid record, hostile text: must show up, as inert text
    hostile = make_record("cifar10", HOSTILE_NAME, 0, record_id="hostile-0")
    write_entry(root, "hostile-entry", [hostile], name=HOSTILE_NAME, description="**bold** [x](javascript:alert(1))")
    # broken: YAML that tries to construct an object; malformed JSON
    bad = root / "yaml-bomb"
    bad.mkdir(parents=True)
    (bad / "entry.yaml").write_text(f'name: !!python/object/apply:os.system ["touch {root / "PWNED"}"]\n')
    write_jsonl(bad / "results.jsonl", [make_record("cifar10", "fp16", 5, record_id="bomb-5")])
    broken = root / "broken-json"
    write_entry(root, "broken-json", [])
    (broken / "results.jsonl").write_text('{"schema": "mpcbench.record/1", "task": \n')
    return root


@pytest.fixture
def records() -> list[dict[str, Any]]:
    return make_records()


@pytest.fixture
def records_dir(tmp_path: Path) -> Path:
    return make_records_dir(tmp_path / "records")


@pytest.fixture
def lb() -> types.SimpleNamespace:
    """The helpers above for test modules (importing conftest directly is fragile)."""
    return types.SimpleNamespace(
        make_record=make_record,
        make_records=make_records,
        write_jsonl=write_jsonl,
        write_entry=write_entry,
        make_records_dir=make_records_dir,
        never_reached=never_reached,
        with_time_to_target=with_time_to_target,
        modeled_at=modeled_at,
        HOSTILE_NAME=HOSTILE_NAME,
        TASKS=TASKS,
        COMPRESSORS=COMPRESSORS,
        PROFILES=PROFILES,
    )
