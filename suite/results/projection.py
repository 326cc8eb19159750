"""Projection of a stage's compute and a compressor's codec work onto a hardware profile.

The inputs of the time model's hardware and model-size axis (docs/ARCHITECTURE.md, "Hardware
and model size"); the time model (``suite.results.network``) calls these and simulates the
schedule. Units: FLOPs, bytes, seconds. Torch-free.

* compute: ``flops / (peak x MFU)`` (:func:`project_compute_s`), the FLOPs counted per stage and
  micro-batch by ``suite.pipeline.flops`` (``suite.results.model_sizes`` reads them);
* codec: the compressor's time as a measured multiple of a copy of the same bytes, times the
  copy's time on the profile (:func:`project_codec_s`, :func:`copy_s`);
* wire bytes at another model size: the measured bytes scaled by the boundary's raw size
  (:func:`scale_boundary_bytes`: the compression ratio is taken to hold).

What is projected is time only: the quality and the steps to a target stay the measured tier's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .hardware import HardwareError, HardwareProfile, get_hardware
from .model_sizes import ModelCost

__all__ = [
    "REFERENCE_PROFILE",
    "OPTIMIZER_COPY_BYTES_PER_PARAM",
    "Projection",
    "NotProjectable",
    "project_compute_s",
    "project_stage_s",
    "copy_bandwidth",
    "copy_s",
    "project_codec_s",
    "codec_copy_multiple",
    "scale_boundary_bytes",
]

REFERENCE_PROFILE = "h100-sxm"  # the profile whose copy floor was measured (its datasheet ratio transfers)

# The optimizer step as memory traffic: AdamW on fp32 master weights reads the parameter, its
# gradient and both moments (16 bytes) and writes the parameter and the moments (12 bytes), 28
# bytes a parameter; a copy of n bytes moves 2n, so the step costs a copy of 14 bytes a parameter.
# An assumption (fused kernels, other optimizers and mixed precision move less or more), stated
# wherever a projected time is shown.
OPTIMIZER_COPY_BYTES_PER_PARAM = 14


class NotProjectable(ValueError):
    """A record's time cannot be projected (no FLOP count for its setup, no codec multiples)."""


@dataclass(frozen=True)
class Projection:
    """Where a row's time is projected: a hardware profile (``hardware_profiles.json``), a model
    size (None: the size the row was measured at) and a model FLOPs utilization (None: the
    profile's default). What is projected is time only: quality, bytes ratio and the steps to a
    target stay the measured run's."""

    hardware: str
    model_size: str | None = None
    mfu: float | None = None

    def profile(self) -> HardwareProfile:
        return get_hardware(self.hardware)

    def effective_mfu(self) -> float:
        hw = self.profile()
        return hw.default_mfu if self.mfu is None or hw.measured else float(self.mfu)

    def describe(self) -> str:
        """One line: the profile, the size and every assumption the projected time rests on."""
        hw = self.profile()
        size = self.model_size or "the measured size"
        if hw.measured:  # this machine: its own calibration, grown with the counted FLOPs
            return (
                f"projected on {hw.label} ({hw.name}) at {size}: compute = the setup's calibrated compute x the "
                "counted FLOPs at that size / at the measured size (the rate the setup achieved here is taken to "
                "hold); codec = none's measured seconds a call (the benchmark's checks, fixed) + the row's multiple "
                "beyond none's x this machine's calibrated copy of the grown bytes; "
                f"optimizer = a copy of {OPTIMIZER_COPY_BYTES_PER_PARAM} bytes a parameter; wire bytes scaled with "
                "the boundary or the parameters; quality and steps to target as measured. Checked here: right "
                "within 7 % across stage splits, 37 % high for twice the width; codec multiples carried from a "
                "1 MiB tensor are 1.5-4.7x high at 4-16 MiB (docs/performance.md)"
            )
        return (
            f"projected onto {hw.label} ({hw.name}) at {size}: compute = counted FLOPs / (peak "
            f"{hw.require('peak_bf16_flops') / 1e12:.0f} TFLOP/s x MFU {self.effective_mfu():.2f}), "
            f"{_launch_text(hw)}; codec = the row's measured multiple of a copy x the profile's copy time "
            f"({copy_bandwidth(hw)[1]}); optimizer = a copy of {OPTIMIZER_COPY_BYTES_PER_PARAM} bytes a parameter; "
            "codec beyond none's (none's multiple is the benchmark's own checks); "
            "wire bytes scaled with the boundary (pipeline, tensor parallel) or the parameters (data parallel), "
            f"tensor-parallel collectives over {_tp_link_text(hw)}, "
            "in the measured run's dtype (fp32: a bf16 run sends half, as the fp16/bf16 rows do); "
            "quality and steps to target as measured. The codec multiples are this CPU's at the measured size "
            "(on this CPU they overstate 4-16 MiB tensors 1.5-4.7x: docs/performance.md)"
        )


def _launch_text(hw: HardwareProfile) -> str:
    if not hw.kernel_launch_s:
        return "no kernel-launch floor"
    return (
        f"but at least {hw.kernel_launch_s * 1e6:.3g} us a kernel (the ops counted per stage and action; "
        "assumed, not measured: a small model is launch-bound)"
    )


def _tp_link_text(hw: HardwareProfile) -> str:
    link = hw.tp_link
    if link is None:
        return "the network model's intra-host link"
    return f"the profile's {link.name} ({link.bandwidth_bps / 1e9:.4g} Gbit/s each way, {link.latency_s * 1e6:.3g} us)"


def _mean_copy_rate(hw: HardwareProfile) -> float:
    # (not statistics.fmean: the Streamlit app runs with leaderboard/ on sys.path, where
    # `statistics` is leaderboard/statistics.py)
    return sum(r.bandwidth_bytes_s for r in hw.copy_reference) / len(hw.copy_reference)


def _positive(name: str, v: float, *, zero: bool = True) -> float:
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and (v >= 0 if zero else v > 0)
    if not ok:
        raise ValueError(f"{name}={v!r} must be a finite number {'>= 0' if zero else '> 0'}")
    return float(v)


def project_compute_s(flops: float, hw: HardwareProfile, mfu: float | None = None) -> float:
    """Seconds to do ``flops`` on ``hw`` at model FLOPs utilization ``mfu`` (None: the profile's
    default): ``flops / (peak_bf16_flops x mfu)``. A calibrated profile's rate is already achieved
    (its default MFU is 1)."""
    _positive("flops", flops)
    u = hw.default_mfu if mfu is None else mfu
    if isinstance(u, bool) or not isinstance(u, (int, float)) or not 0 < u <= 1:
        raise ValueError(f"mfu={u!r} must be in (0, 1] (a fraction of the profile's peak)")
    return flops / (hw.require("peak_bf16_flops") * u)


def project_stage_s(cost: ModelCost, hw: HardwareProfile, mfu: float | None = None) -> tuple[tuple[float, float], ...]:
    """Per stage, the (forward, backward) seconds of one micro-batch of ``cost`` (a
    ``suite.results.model_sizes`` entry) on ``hw``: the schedule's F and B actions' compute."""
    return tuple(
        (project_compute_s(s.forward_flops, hw, mfu), project_compute_s(s.backward_flops, hw, mfu)) for s in cost.stages
    )


def copy_bandwidth(hw: HardwareProfile) -> tuple[float, str]:
    """The rate (bytes/s, a tensor's bytes counted once) at which ``hw`` copies a large tensor,
    and where the figure comes from:

    * a profile with measured copy floors (the H100's reference points): their mean rate;
    * a calibrated profile: its measured copy (``memory_bandwidth_bytes_s``);
    * another datasheet profile: its datasheet bandwidth x the reference profile's measured
      floor / datasheet ratio (0.89 on the H100; assumed to transfer, not measured there).
    """
    if hw.copy_reference:
        return _mean_copy_rate(hw), "measured copy floor"
    bw = hw.require("memory_bandwidth_bytes_s")
    if hw.measured:
        return bw, "calibrated copy"
    ref = get_hardware(REFERENCE_PROFILE)
    ratio = _mean_copy_rate(ref) / ref.require("memory_bandwidth_bytes_s")
    return bw * ratio, f"datasheet x {ratio:.3f} ({REFERENCE_PROFILE}'s measured floor / datasheet, assumed)"


def copy_s(nbytes: float, hw: HardwareProfile) -> float:
    """Seconds ``hw`` takes to copy a tensor of ``nbytes`` (its bytes counted once): the floor a
    codec's multiple is measured against."""
    return _positive("nbytes", nbytes) / copy_bandwidth(hw)[0]


def project_codec_s(nbytes: float, copy_multiple: float, hw: HardwareProfile) -> float:
    """Seconds a codec takes on ``hw`` for a tensor of ``nbytes`` raw bytes, given its time as
    ``copy_multiple`` x a copy of the same bytes (measured on this machine or taken from a
    profile's reference points): ``copy_multiple x copy_s(nbytes, hw)``."""
    return _positive("copy_multiple", copy_multiple) * copy_s(nbytes, hw)


def codec_copy_multiple(hw: HardwareProfile, tensor: str, kernel: str) -> tuple[float, float]:
    """A reference codec's time / the copy floor of the same tensor (low, high), e.g.
    ``codec_copy_multiple(h100, "LM boundary, 8x2048x2048 bf16", "fp16 cast")`` = (4.29, 4.29)."""
    for ref in hw.copy_reference:
        if ref.tensor == tensor:
            for point in ref.codecs:
                if point.kernel == kernel:
                    return point.copy_multiple(ref.floor_s)
            raise HardwareError(
                f"{hw.name}: no reference codec {kernel!r} on {tensor!r}; valid: {', '.join(p.kernel for p in ref.codecs)}"
            )
    raise HardwareError(
        f"{hw.name}: no reference tensor {tensor!r}; valid: {', '.join(r.tensor for r in hw.copy_reference) or 'none'}"
    )


def scale_boundary_bytes(measured_wire_bytes: float, measured_raw_bytes: float, target_raw_bytes: float) -> float:
    """Wire bytes at another model size: ``measured_wire_bytes x target_raw / measured_raw``.

    Assumes the compressor keeps its measured ratio (true of casts, quantizers and top-k at a
    fixed ratio; a fixed-rank or fixed-k code would shrink relative to a larger tensor, so this
    overstates its bytes). Raw bytes are the boundary tensor's (elements x element size) per
    micro-batch, as ``suite.results.model_sizes`` lists them."""
    _positive("measured_wire_bytes", measured_wire_bytes)
    _positive("target_raw_bytes", target_raw_bytes)
    return measured_wire_bytes * target_raw_bytes / _positive("measured_raw_bytes", measured_raw_bytes, zero=False)
