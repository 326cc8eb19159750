"""The measured side of the time model: one calibration file per hardware class.

A calibration (``suite/results/calibration/<name>.json``, written by ``mpcbench calibrate``) holds
what a quiet, interleaved set of short runs on one machine class measured:

* ``copy``: the seconds of a copy of ``n`` bytes on one thread (``latency_s + n / bytes_per_s``,
  fitted over sizes from 4 KiB to 64 MiB): the reference every codec is priced against;
* ``compute``: per setup (:func:`compute_key`), each stage's per-action compute and per-step
  optimizer and outer-loop seconds of the ``none`` run, the median over repeated, interleaved runs,
  with their spread;
* ``rows``: per (setup, compressor), the codec multiples of each codec site (the site's thread CPU
  seconds over those of a copy of the same bytes, timed beside it) and, for a compressor that adds
  work to the model (a learned code), its extra compute as a ratio to ``none`` measured in the same
  rounds (``extra_work``; 1 otherwise).

Torch-free: the leaderboard reads it. The numbers are data with their provenance (machine, commit,
load, date), never derived from a submitter's records.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

from .entries import setup_label
from .network.timing_inputs import ActionCost, StageCost

__all__ = [
    "CALIBRATION_DIR",
    "DEFAULT_HARDWARE",
    "CopyCost",
    "SiteCost",
    "SetupCompute",
    "RowCalibration",
    "Calibration",
    "compute_key",
    "load_calibration",
    "calibrations",
]

CALIBRATION_DIR = Path(__file__).resolve().parent / "calibration"
DEFAULT_HARDWARE = "cpu-2core"  # the calibrated class the board's measured view shows by default
_STEPS = re.compile(r", \d+ steps(?=,|$)")


def compute_key(record: Mapping[str, Any]) -> str:
    """The setup whose compute a record's steps cost: ``task/tier/setup`` without the step count
    (a longer run of the same setup computes the same step)."""
    task, tier = record.get("task"), record.get("tier")
    return f"{task}/{tier}/{_STEPS.sub('', setup_label(record))}"


@dataclass(frozen=True)
class CopyCost:
    """Seconds of a one-thread copy of ``n`` bytes. With measured ``points`` ((bytes, seconds),
    ascending): interpolated on log-log scales between them, the smallest size's time below it (a
    copy that small costs its overhead), proportional to bytes beyond the largest; without points
    ``latency_s + n / bytes_per_s`` (a datasheet's memory bandwidth)."""

    latency_s: float
    bytes_per_s: float
    points: tuple[tuple[float, float], ...] = ()

    def seconds(self, nbytes: float) -> float:
        n = max(0.0, float(nbytes))
        pts = self.points
        if not pts:
            return self.latency_s + n / self.bytes_per_s
        if n <= pts[0][0]:
            return pts[0][1]
        for (n0, t0), (n1, t1) in zip(pts, pts[1:]):
            if n <= n1:
                f = math.log(n / n0) / math.log(n1 / n0)
                return math.exp(math.log(t0) + f * (math.log(t1) - math.log(t0)))
        return pts[-1][1] * n / pts[-1][0]


@dataclass(frozen=True)
class SiteCost:
    """One codec site of a row: the multiple of a copy, the raw bytes per call, calls per step of
    one replica (per TP rank for ``tp.`` sites)."""

    multiple: float
    nbytes: float
    calls_per_step: float


@dataclass(frozen=True)
class SetupCompute:
    """The compute of one setup: per stage, per-action compute seconds (``pre``/``post`` zero:
    the codec is priced per row), optimizer and outer-loop seconds; ``spread`` is the relative
    range of the repeats' step compute ((max - min) / median), ``repeats`` how many."""

    stages: tuple[StageCost, ...]
    spread: float
    repeats: int


@dataclass(frozen=True)
class RowCalibration:
    """A (setup, compressor) row's codec sites and extra work (1.0: the compressor adds none)."""

    sites: Mapping[str, SiteCost]
    extra_work: float = 1.0
    extra_work_rounds: tuple[float, ...] = ()


@dataclass(frozen=True)
class Calibration:
    """One hardware class's calibration file (see the module docstring)."""

    name: str
    machine: str
    copy: CopyCost
    compute: Mapping[str, SetupCompute]
    rows: Mapping[str, RowCalibration]  # "<compute key>|<compressor>"
    provenance: Mapping[str, Any] = field(default_factory=dict)
    digest: str = ""

    def row(self, key: str, compressor: str) -> RowCalibration | None:
        return self.rows.get(f"{key}|{compressor}")


def _num(v: Any, what: str, positive: bool = False) -> float:
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < 0 or (positive and v == 0):
        raise ValueError(
            f"calibration: {what} is {v!r}, expected a {'positive' if positive else 'non-negative'} number"
        )
    return float(v)


def _stage(d: Mapping[str, Any], what: str) -> StageCost:
    acts = {k: ActionCost(0.0, _num(a, f"{what}.{k}"), 0.0) for k, a in dict(d.get("actions", {})).items()}
    return StageCost(
        acts, _num(d.get("optimizer_s", 0.0), f"{what}.optimizer_s"), _num(d.get("sync_s", 0.0), f"{what}.sync_s")
    )


def parse_calibration(d: Mapping[str, Any], name: str, digest: str = "") -> Calibration:
    """A calibration from its JSON form; a malformed file is one line naming the field."""
    if d.get("schema") != "mpcbench.calibration/1":
        raise ValueError(f"calibration {name}: schema is {d.get('schema')!r}, expected 'mpcbench.calibration/1'")
    copy = dict(d.get("copy", {}))
    compute = {
        str(k): SetupCompute(
            tuple(_stage(s, f"compute[{k}].stages[{i}]") for i, s in enumerate(v["stages"])),
            _num(v.get("spread", 0.0), f"compute[{k}].spread"),
            int(v.get("repeats", 1)),
        )
        for k, v in dict(d.get("compute", {})).items()
    }
    rows = {
        str(k): RowCalibration(
            {
                str(site): SiteCost(
                    _num(c["multiple"], f"rows[{k}].{site}.multiple"),
                    _num(c["nbytes"], f"rows[{k}].{site}.nbytes"),
                    _num(c["calls_per_step"], f"rows[{k}].{site}.calls_per_step"),
                )
                for site, c in dict(v.get("sites", {})).items()
            },
            _num(v.get("extra_work", 1.0), f"rows[{k}].extra_work", positive=True),
            tuple(float(x) for x in v.get("extra_work_rounds", ())),
        )
        for k, v in dict(d.get("rows", {})).items()
    }
    return Calibration(
        name=name,
        machine=str(d.get("machine", "")),
        copy=CopyCost(
            _num(copy.get("latency_s"), "copy.latency_s"),
            _num(copy.get("bytes_per_s"), "copy.bytes_per_s", True),
            tuple(
                (_num(n, "copy.points", True), _num(t, "copy.points", True)) for n, t in sorted(copy.get("points", []))
            ),
        ),
        compute=compute,
        rows=rows,
        provenance=dict(d.get("provenance", {})),
        digest=digest,
    )


@lru_cache(maxsize=16)
def load_calibration(name: str = DEFAULT_HARDWARE, folder: str | None = None) -> Calibration | None:
    """The calibration called ``name`` (None when the file does not exist)."""
    import hashlib

    path = Path(folder or CALIBRATION_DIR) / f"{name}.json"
    if not path.is_file():
        return None
    data = path.read_bytes()
    return parse_calibration(json.loads(data), name, hashlib.sha256(data).hexdigest()[:16])


def calibrations(folder: str | None = None) -> list[str]:
    """Names of the calibration files present."""
    return sorted(p.stem for p in Path(folder or CALIBRATION_DIR).glob("*.json"))
