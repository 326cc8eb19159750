"""Hardware profiles: the accelerators a run's time is projected onto (``hardware_profiles.json``).

One versioned data file holds every profile with a source for each number; this module reads and
validates it (one-line errors naming the profile, the field and the fix) into frozen
:class:`HardwareProfile` objects. Torch-free: the leaderboard imports it.

Two kinds of profile:

* ``datasheet`` (h100-sxm, a100-80gb, rtx-4090): the vendor's peak dense bf16 FLOP/s, memory
  bandwidth and the intra-node link tensor parallelism uses, with a default model FLOPs
  utilization (MFU, an assumption with its source). The H100 also carries the copy-floor and
  codec times the issue measured on one H100 (:class:`CopyReference`), the reference points a
  codec's cost is scaled from until the gpu tier measures them.
* ``calibrated`` (``this-machine``): numbers measured on this machine by the time model; the file
  holds a placeholder with nulls and :func:`calibrate` fills it. Its MFU is 1 (a measured rate is
  already what the machine achieves).

The projection arithmetic that uses these profiles is ``suite.results.projection``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping

from .network.profiles import IntraHostLink

__all__ = [
    "HARDWARE_FILE",
    "KINDS",
    "HardwareError",
    "CodecPoint",
    "CopyReference",
    "HardwareProfile",
    "load_hardware",
    "get_hardware",
    "calibrate",
]

HARDWARE_FILE = Path(__file__).with_name("hardware_profiles.json")
SCHEMA = "mpcbench.hardware/1"
KINDS = ("datasheet", "calibrated")
_NUMBERS = ("peak_bf16_flops", "memory_bandwidth_bytes_s")  # positive, finite; null only while uncalibrated
_SOURCED = (*_NUMBERS, "tp_link", "default_mfu", "kernel_launch_s")  # each names its source in ``sources``


class HardwareError(ValueError):
    """The hardware file or a profile is invalid, or a profile lacks a number it was asked for."""


@dataclass(frozen=True)
class CodecPoint:
    """One codec's measured time on a reference tensor: ``seconds_low`` .. ``seconds_high``
    (equal when one figure was measured)."""

    kernel: str
    seconds_low: float
    seconds_high: float

    def copy_multiple(self, floor_s: float) -> tuple[float, float]:
        """The codec's time as a multiple of the copy floor of the same tensor (low, high)."""
        return self.seconds_low / floor_s, self.seconds_high / floor_s


@dataclass(frozen=True)
class CopyReference:
    """A tensor's copy floor and codec times measured on the profile's accelerator.

    ``floor_s`` counts the tensor's ``bytes`` once (67 MB in 22.6 us on an H100 is 2.97 TB/s,
    89% of the datasheet's 3.35; read plus write would exceed the peak), so
    ``bytes / floor_s`` is the effective copy bandwidth :func:`suite.results.projection.copy_s`
    uses."""

    tensor: str
    bytes: int
    floor_s: float
    codecs: tuple[CodecPoint, ...]

    @property
    def bandwidth_bytes_s(self) -> float:
        return self.bytes / self.floor_s


@dataclass(frozen=True)
class HardwareProfile:
    """One accelerator (units: FLOP/s, bytes/s, bits/s per direction for ``tp_link``, seconds).

    ``peak_bf16_flops`` and ``memory_bandwidth_bytes_s`` are None only on an uncalibrated
    ``calibrated`` profile (the file's placeholder); :meth:`require` turns that into a one-line
    error. ``tp_link`` is the link between the tensor-parallel ranks of a host, as the network
    model's :class:`~suite.results.network.profiles.IntraHostLink` (None: the network profile's own).
    ``kernel_launch_s``: the floor of one launched kernel (eager PyTorch issues one a dispatched op), so a
    stage's action costs at least its counted kernels x this (None on a calibrated profile, whose
    measured compute already holds its overheads). ``sources`` names where each number comes from."""

    name: str
    label: str
    kind: str
    peak_bf16_flops: float | None
    memory_bandwidth_bytes_s: float | None
    tp_link: IntraHostLink | None
    default_mfu: float
    sources: Mapping[str, str]
    copy_reference: tuple[CopyReference, ...] = ()
    copy_reference_source: str = ""
    kernel_launch_s: float | None = None  # the least time one kernel of a step costs (None: no floor)

    @property
    def measured(self) -> bool:
        """True for a profile measured on this machine, False for a vendor datasheet's."""
        return self.kind == "calibrated"

    def require(self, field: str) -> float:
        """The number ``field``; a one-line error when this profile does not have it yet."""
        value = getattr(self, field)
        if value is None:
            raise HardwareError(
                f"hardware profile {self.name!r} has no {field} yet: it is filled by calibration "
                "(suite.results.hardware.calibrate); pick a datasheet profile or calibrate first"
            )
        return float(value)


# --------------------------------------------------------------------------- reading
def _number(
    d: Mapping[str, Any], key: str, where: str, *, nullable: bool = False, upper: float = math.inf
) -> float | None:
    v = d.get(key)
    if v is None and nullable:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 < v <= upper) or not math.isfinite(v):
        bound = f" and <= {upper:g}" if upper != math.inf else ""
        raise HardwareError(f"{where}.{key}: {v!r} must be a finite number > 0{bound}; fix it in {HARDWARE_FILE.name}")
    return float(v)


def _text(d: Mapping[str, Any], key: str, where: str) -> str:
    v = d.get(key)
    if not isinstance(v, str) or not v.strip():
        raise HardwareError(f"{where}.{key}: {v!r} must be a non-empty string; fix it in {HARDWARE_FILE.name}")
    return v


def _mapping(v: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(v, dict):
        raise HardwareError(f"{where}: must be a JSON object, got {type(v).__name__}")
    return v


def _link(raw: Any, where: str, nullable: bool) -> IntraHostLink | None:
    if raw is None and nullable:
        return None
    d = _mapping(raw, where)
    latency = d.get("latency_s")
    if isinstance(latency, bool) or not isinstance(latency, (int, float)) or not 0 <= latency < 1:
        raise HardwareError(f"{where}.latency_s: {latency!r} must be a number of seconds in [0, 1)")
    return IntraHostLink(_text(d, "name", where), _number(d, "bandwidth_bps", where) or 0.0, float(latency))


def _codec(raw: Any, where: str) -> CodecPoint:
    d = _mapping(raw, where)
    s: Any = d.get("seconds")
    ok = isinstance(s, list) and len(s) == 2 and all(isinstance(x, (int, float)) and 0 < x < 1 for x in s)
    if not ok or s[0] > s[1]:
        raise HardwareError(f"{where}.seconds: {s!r} must be [low, high] seconds with 0 < low <= high < 1")
    return CodecPoint(_text(d, "kernel", where), float(s[0]), float(s[1]))


def _reference(raw: Any, where: str) -> tuple[tuple[CopyReference, ...], str]:
    if raw is None:
        return (), ""
    d = _mapping(raw, where)
    tensors = d.get("tensors")
    if not isinstance(tensors, list) or not tensors:
        raise HardwareError(f"{where}.tensors: must be a non-empty list of reference tensors")
    refs = []
    for i, t in enumerate(tensors):
        w = f"{where}.tensors[{i}]"
        t = _mapping(t, w)
        n = t.get("bytes")
        if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
            raise HardwareError(f"{w}.bytes: {n!r} must be a positive integer (the tensor's bytes)")
        codecs = t.get("codecs")
        if not isinstance(codecs, list) or not codecs:
            raise HardwareError(f"{w}.codecs: must be a non-empty list of {{kernel, seconds}}")
        refs.append(
            CopyReference(
                _text(t, "tensor", w),
                n,
                _number(t, "floor_s", w, upper=1.0) or 0.0,
                tuple(_codec(c, f"{w}.codecs[{j}]") for j, c in enumerate(codecs)),
            )
        )
    return tuple(refs), _text(d, "source", where)


def _profile(raw: Any, where: str) -> HardwareProfile:
    d = _mapping(raw, where)
    name = _text(d, "name", where)
    where = f"{where} ({name})"
    kind = d.get("kind")
    if kind not in KINDS:
        raise HardwareError(f"{where}.kind: {kind!r} must be one of {', '.join(KINDS)}")
    calibrated = kind == "calibrated"
    known = {"name", "label", "kind", *_SOURCED, "sources", "copy_reference"}
    unknown = sorted(set(d) - known)
    if unknown:
        raise HardwareError(f"{where}: unknown field(s) {unknown}; valid: {', '.join(sorted(known))}")
    numbers = {k: _number(d, k, where, nullable=calibrated) for k in _NUMBERS}
    sources = _mapping(d.get("sources"), f"{where}.sources")
    missing = [k for k in _SOURCED if not isinstance(sources.get(k), str) or not sources[k].strip()]
    if missing:
        raise HardwareError(
            f"{where}.sources: no source for {', '.join(missing)}; every number names where it comes from"
        )
    reference, ref_source = _reference(d.get("copy_reference"), f"{where}.copy_reference")
    return HardwareProfile(
        name=name,
        label=_text(d, "label", where),
        kind=kind,
        peak_bf16_flops=numbers["peak_bf16_flops"],
        memory_bandwidth_bytes_s=numbers["memory_bandwidth_bytes_s"],
        tp_link=_link(d.get("tp_link"), f"{where}.tp_link", nullable=calibrated),
        default_mfu=_number(d, "default_mfu", where, upper=1.0) or 0.0,
        sources=dict(sources),
        copy_reference=reference,
        copy_reference_source=ref_source,
        kernel_launch_s=_number(d, "kernel_launch_s", where, nullable=True, upper=1.0),
    )


def load_hardware(path: str | Path = HARDWARE_FILE) -> dict[str, HardwareProfile]:
    """Every profile of the file, by name (file order); :class:`HardwareError` (one line) on any
    invalid field."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise HardwareError(f"{p}: cannot read the hardware profiles ({e})") from None
    data = _mapping(data, str(p))
    if data.get("schema") != SCHEMA:
        raise HardwareError(f"{p}: schema {data.get('schema')!r}, expected {SCHEMA!r}")
    profiles = data.get("profiles")
    if not isinstance(profiles, list) or not profiles:
        raise HardwareError(f"{p}: 'profiles' must be a non-empty list")
    out: dict[str, HardwareProfile] = {}
    for i, raw in enumerate(profiles):
        hw = _profile(raw, f"{p.name}: profiles[{i}]")
        if hw.name in out:
            raise HardwareError(f"{p.name}: profile name {hw.name!r} is listed twice")
        out[hw.name] = hw
    return out


_CACHE: dict[str, HardwareProfile] | None = None


def get_hardware(name: str) -> HardwareProfile:
    """The committed profile called ``name``; unknown names list the valid ones."""
    global _CACHE
    if _CACHE is None:
        _CACHE = load_hardware()
    if name not in _CACHE:
        raise HardwareError(f"unknown hardware profile {name!r}; valid: {', '.join(_CACHE)}")
    return _CACHE[name]


def calibrate(
    profile: HardwareProfile,
    *,
    achieved_flops: float,
    copy_bandwidth_bytes_s: float,
    source: str,
    tp_link: IntraHostLink | None = None,
) -> HardwareProfile:
    """``profile`` (a ``calibrated`` one) with the rates measured on this machine: the compute
    rate its stages achieved (FLOP/s; the MFU stays 1) and the rate of a measured copy (bytes/s,
    counting the tensor's bytes once, as :class:`CopyReference` does). ``source`` says what
    measured them (it goes into ``sources``)."""
    if profile.kind != "calibrated":
        raise HardwareError(
            f"hardware profile {profile.name!r} is a {profile.kind} profile; only a calibrated one is filled by measurement"
        )
    for name, v in (("achieved_flops", achieved_flops), ("copy_bandwidth_bytes_s", copy_bandwidth_bytes_s)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 < v < math.inf):
            raise HardwareError(f"calibrate({profile.name!r}): {name}={v!r} must be a finite number > 0")
    sources = {
        **profile.sources,
        "peak_bf16_flops": f"calibrated ({source}): achieved FLOP/s",
        "memory_bandwidth_bytes_s": f"calibrated ({source}): measured copy",
    }
    return replace(
        profile,
        peak_bf16_flops=float(achieved_flops),
        memory_bandwidth_bytes_s=float(copy_bandwidth_bytes_s),
        tp_link=tp_link if tp_link is not None else profile.tp_link,
        sources=sources,
    )
