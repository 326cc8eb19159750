"""suite.results.hardware: the committed profiles load, every number has a source, and a bad
field is refused with one line naming the profile and the field."""

from __future__ import annotations

import copy
import json

import pytest

from suite.results.hardware import HARDWARE_FILE, HardwareError, calibrate, get_hardware, load_hardware


def _raw() -> dict:
    return json.loads(HARDWARE_FILE.read_text())


def _write(tmp_path, data) -> str:
    p = tmp_path / "hw.json"
    p.write_text(json.dumps(data))
    return str(p)


def test_the_committed_profiles_load_with_the_issues_accelerators():
    hw = load_hardware()
    assert {"h100-sxm", "a100-80gb", "rtx-4090", "this-machine"} <= set(hw)
    h100 = hw["h100-sxm"]
    assert h100.peak_bf16_flops == pytest.approx(989.4e12)  # dense, not the sparse 1979
    assert h100.memory_bandwidth_bytes_s == pytest.approx(3.35e12)
    assert h100.tp_link is not None and h100.tp_link.bandwidth_bps == pytest.approx(450e9 * 8)
    assert not h100.measured and hw["this-machine"].measured
    for p in hw.values():
        assert set(p.sources) >= {"peak_bf16_flops", "memory_bandwidth_bytes_s", "tp_link", "default_mfu"}


def test_the_h100_reference_points_are_the_issues_measurements():
    h100 = get_hardware("h100-sxm")
    lm, resnet = h100.copy_reference
    assert (lm.bytes, lm.floor_s) == (8 * 2048 * 2048 * 2, 22.6e-6)
    assert (resnet.bytes, resnet.floor_s) == (256 * 128 * 16 * 16 * 4, 11.3e-6)
    # both floors count the tensor's bytes once at the same rate, ~89% of the datasheet
    assert lm.bandwidth_bytes_s == pytest.approx(resnet.bandwidth_bytes_s, rel=0.01)
    assert lm.bandwidth_bytes_s / h100.memory_bandwidth_bytes_s == pytest.approx(0.886, abs=0.005)
    topk = next(c for c in lm.codecs if c.kernel == "top-k 10% (torch.topk)")
    assert topk.copy_multiple(lm.floor_s) == pytest.approx((925 / 22.6, 925 / 22.6))
    int8 = next(c for c in resnet.codecs if c.kernel == "int8 per-row absmax")
    assert int8.copy_multiple(resnet.floor_s) == pytest.approx((109 / 11.3, 117 / 11.3))


def test_the_placeholder_is_filled_by_calibration_only():
    me = get_hardware("this-machine")
    with pytest.raises(HardwareError, match="'this-machine' has no peak_bf16_flops yet"):
        me.require("peak_bf16_flops")
    filled = calibrate(me, achieved_flops=2.0e10, copy_bandwidth_bytes_s=5.0e9, source="test")
    assert (filled.require("peak_bf16_flops"), filled.require("memory_bandwidth_bytes_s")) == (2.0e10, 5.0e9)
    assert filled.default_mfu == 1.0 and filled.measured and "test" in filled.sources["peak_bf16_flops"]
    with pytest.raises(HardwareError, match="datasheet profile"):
        calibrate(get_hardware("h100-sxm"), achieved_flops=1.0, copy_bandwidth_bytes_s=1.0, source="x")
    with pytest.raises(HardwareError, match="achieved_flops=-1"):
        calibrate(me, achieved_flops=-1, copy_bandwidth_bytes_s=1.0, source="x")


def test_unknown_profile_names_the_valid_ones():
    with pytest.raises(HardwareError, match="unknown hardware profile 'h200'.*h100-sxm"):
        get_hardware("h200")


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda p: p.update(peak_bf16_flops=-5), r"profiles\[0\] \(h100-sxm\)\.peak_bf16_flops: -5 must be"),
        (lambda p: p.update(peak_bf16_flops=None), r"\(h100-sxm\)\.peak_bf16_flops: None must be"),
        (lambda p: p.update(default_mfu=1.5), r"default_mfu: 1.5 must be a finite number > 0 and <= 1"),
        (lambda p: p.update(kind="guess"), r"kind: 'guess' must be one of datasheet, calibrated"),
        (lambda p: p["sources"].pop("default_mfu"), r"sources: no source for default_mfu"),
        (lambda p: p.update(colour="green"), r"unknown field\(s\) \['colour'\]"),
        (lambda p: p["tp_link"].update(latency_s=3), r"tp_link.latency_s: 3 must be"),
        (lambda p: p["copy_reference"]["tensors"][0].update(bytes=0), r"tensors\[0\].bytes: 0 must be"),
        (
            lambda p: p["copy_reference"]["tensors"][1]["codecs"][1].update(seconds=[2e-4, 1e-4]),
            r"codecs\[1\].seconds: .* low <= high",
        ),
    ],
)
def test_a_bad_field_is_one_line_naming_profile_and_field(tmp_path, mutate, message):
    data = _raw()
    mutate(data["profiles"][0])
    with pytest.raises(HardwareError, match=message) as e:
        load_hardware(_write(tmp_path, data))
    assert "\n" not in str(e.value)


def test_file_level_errors(tmp_path):
    data = _raw()
    twice = copy.deepcopy(data)
    twice["profiles"].append(twice["profiles"][0])
    with pytest.raises(HardwareError, match="'h100-sxm' is listed twice"):
        load_hardware(_write(tmp_path, twice))
    data["schema"] = "mpcbench.hardware/0"
    with pytest.raises(HardwareError, match="expected 'mpcbench.hardware/1'"):
        load_hardware(_write(tmp_path, data))
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(HardwareError, match="cannot read"):
        load_hardware(tmp_path / "bad.json")
