"""suite.results.projection: each function recomputed by hand from the profile's numbers."""

from __future__ import annotations

import pytest

from suite.results.hardware import HardwareError, calibrate, get_hardware
from suite.results.projection import (
    codec_copy_multiple,
    copy_bandwidth,
    copy_s,
    project_codec_s,
    project_compute_s,
    scale_boundary_bytes,
)

LM = "LM boundary, 8x2048x2048 bf16"


def test_compute_is_flops_over_peak_times_mfu():
    h100 = get_hardware("h100-sxm")
    # 1 TFLOP at the default MFU 0.4 of 989.4 TFLOP/s: 1 / 395.76 s
    assert project_compute_s(1e12, h100) == pytest.approx(1 / 395.76)
    assert project_compute_s(1e12, h100, mfu=0.5) == pytest.approx(1 / 494.7)
    assert project_compute_s(0.0, h100) == 0.0
    with pytest.raises(ValueError, match=r"mfu=0 must be in \(0, 1\]"):
        project_compute_s(1e12, h100, mfu=0)
    with pytest.raises(ValueError, match="flops=-1"):
        project_compute_s(-1, h100)


def test_the_h100_copy_is_its_measured_floor_and_a_codec_its_multiple_of_it():
    h100 = get_hardware("h100-sxm")
    rate, basis = copy_bandwidth(h100)
    assert basis == "measured copy floor"
    assert rate == pytest.approx(67108864 / 22.6e-6)
    assert copy_s(67108864, h100) == pytest.approx(22.6e-6)
    lo, hi = codec_copy_multiple(h100, LM, "top-k 10% (torch.topk)")
    assert lo == hi == pytest.approx(925 / 22.6)
    # the multiple times the floor gives back the measured time; at half the bytes, half of it
    assert project_codec_s(67108864, lo, h100) == pytest.approx(925e-6)
    assert project_codec_s(67108864 / 2, lo, h100) == pytest.approx(462.5e-6)


def test_another_datasheet_profile_borrows_the_h100s_floor_ratio():
    a100 = get_hardware("a100-80gb")
    rate, basis = copy_bandwidth(a100)
    ratio = (67108864 / 22.6e-6) / 3.35e12  # 0.886: the H100's measured floor / its datasheet
    assert rate == pytest.approx(2.039e12 * ratio)
    assert "assumed" in basis
    # fp16 cast of the LM boundary: 97 / 22.6 x (67108864 B / 1.807e12 B/s) = 159.4 us by hand
    assert project_codec_s(67108864, 97 / 22.6, a100) == pytest.approx(159.4e-6, rel=1e-3)


def test_a_calibrated_profile_uses_its_own_rates():
    me = calibrate(get_hardware("this-machine"), achieved_flops=4e10, copy_bandwidth_bytes_s=8e9, source="test")
    assert project_compute_s(2e10, me) == pytest.approx(0.5)  # MFU 1: the rate was achieved
    assert copy_bandwidth(me) == (8e9, "calibrated copy")
    assert project_codec_s(8e6, 3.0, me) == pytest.approx(3e-3)
    with pytest.raises(HardwareError, match="no peak_bf16_flops yet"):
        project_compute_s(1.0, get_hardware("this-machine"))


def test_reference_lookups_name_the_valid_choices():
    h100 = get_hardware("h100-sxm")
    with pytest.raises(HardwareError, match="no reference codec 'zstd'.*fp16 cast"):
        codec_copy_multiple(h100, LM, "zstd")
    with pytest.raises(HardwareError, match="no reference tensor 'x'.*LM boundary"):
        codec_copy_multiple(h100, "x", "fp16 cast")


def test_wire_bytes_scale_with_the_boundary_at_the_measured_ratio():
    # 1000 wire bytes for a 4000-byte boundary (4x); a 40000-byte boundary at 4x: 10000
    assert scale_boundary_bytes(1000, 4000, 40000) == pytest.approx(10000)
    with pytest.raises(ValueError, match="measured_raw_bytes=0"):
        scale_boundary_bytes(1000, 0, 40000)
