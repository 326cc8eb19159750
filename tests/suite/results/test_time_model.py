"""suite.results.time_model: a row's time = the setup's compute + the codec as a multiple of a copy + the wire."""

from __future__ import annotations

import math

import pytest

from suite.results import network as net
from suite.results.calibration import CopyCost, compute_key, parse_calibration
from suite.results.time_model import coarsen_steps, model_times, priced_timing, row_model
from suite.schedules import build_schedule

M = 4
RAW = 1 << 20  # bytes of one boundary tensor per micro-batch


def _record(compressor: str = "none", wire: float = RAW, codec_multiple: float | None = None) -> dict:
    """A 2-stage 1F1B record with 1 MiB activations, 100 steps, target met at step 50."""
    link = {"fwd_bytes": wire, "bwd_bytes": wire, "fwd_messages": 1.0, "bwd_messages": 1.0}
    own = {"pre_s": 0.5, "compute_s": 9.0, "post_s": 0.5}  # the cell's own (loaded) seconds: never used
    timing = {
        "schedule": build_schedule("1f1b", 2, M).to_lists(),
        "stages": [{"actions": {"F": own, "B": own}, "optimizer_s": 1.0}] * 2,
        "steps": [{"links": [link], "dp": []}],
        "counts": [100],
        "microbatches": M,
        "replicas": 1,
        "target_step": 50.0,
    }
    if codec_multiple is not None:
        timing["codec"] = {
            f"b0.{d}.{op}": {"codec_s": codec_multiple, "copy_s": 1.0, "samples": 9, "nbytes": RAW, "calls_per_step": M}
            for d in ("forward", "backward")
            for op in ("compress", "decompress")
        }
    return {
        "task": "cifar10",
        "tier": "quick",
        "compressor": compressor,
        "run": {"n_stages": 2, "schedule": "1f1b", "microbatches": M, "device": "cpu"},
        "config": {"tp": 1},
        "timing_inputs": timing,
    }


KEY = compute_key(_record())


def _calibration(rows: dict | None = None) -> object:
    stage = {"actions": {"F": 0.010, "B": 0.020}, "optimizer_s": 0.003}
    return parse_calibration(
        {
            "schema": "mpcbench.calibration/1",
            "copy": {"latency_s": 0.0, "bytes_per_s": 1e9},  # 1 ms per MiB-ish: 1.048576 ms for RAW
            "compute": {KEY: {"stages": [stage, stage], "spread": 0.02, "repeats": 3}},
            "rows": rows or {},
        },
        "test-hw",
        "digest",
    )


def _sites(multiple: float) -> dict:
    return {
        f"b0.{d}.{op}": {"multiple": multiple, "nbytes": RAW, "calls_per_step": M}
        for d in ("forward", "backward")
        for op in ("compress", "decompress")
    }


def test_the_setup_key_leaves_out_the_step_count():
    a = _record()
    b = dict(a, config={"tp": 1, "steps": 600})
    assert compute_key(a) == compute_key(b) == "cifar10/quick/2 stages, 1f1b, M=4, cpu"


def test_compute_is_the_setups_reference_and_the_codec_a_multiple_of_a_copy():
    cal = _calibration({f"{KEY}|fp16": {"sites": _sites(3.0)}})
    rm = row_model(_record("fp16"), cal)
    copy_s = RAW / 1e9
    s0, s1 = rm.inputs.stages
    # compute: the calibration's, never the record's own 9 s
    assert s0.of("F").compute_s == s1.of("F").compute_s == 0.010 and s0.of("B").compute_s == 0.020
    assert s0.optimizer_s == 0.003
    # codec: stage 0 compresses activations after F and decompresses gradients before B; stage 1 the reverse
    assert s0.of("F").post_s == pytest.approx(3.0 * copy_s) and s0.of("F").pre_s == 0.0
    assert s0.of("B").pre_s == pytest.approx(3.0 * copy_s) and s0.of("B").post_s == 0.0
    assert s1.of("F").pre_s == pytest.approx(3.0 * copy_s) and s1.of("F").post_s == 0.0
    assert s1.of("B").post_s == pytest.approx(3.0 * copy_s) and s1.of("B").pre_s == 0.0
    assert rm.basis.compute == "calibrated" and rm.basis.codec == "calibrated" and rm.basis.calibrated


def test_a_records_own_codec_multiples_are_used_where_the_calibration_has_no_row():
    rm = row_model(_record("mine", codec_multiple=5.0), _calibration())
    assert rm.inputs.stages[0].of("F").post_s == pytest.approx(5.0 * RAW / 1e9)
    assert rm.basis.codec == "own multiples" and rm.basis.calibrated


def test_a_setup_the_calibration_lacks_uses_the_records_own_costs_and_says_so():
    rec = _record("fp16")
    rec["run"] = dict(rec["run"], schedule="gpipe")  # another setup
    rec["timing_inputs"]["schedule"] = build_schedule("gpipe", 2, M).to_lists()
    rm = row_model(rec, _calibration())
    assert rm.inputs.stages[0].of("F").compute_s == 9.0 and rm.inputs.stages[0].of("F").post_s == 0.5
    assert rm.basis.compute == "own run" and rm.basis.codec == "own run" and not rm.basis.calibrated
    assert "compute: own run" in rm.basis.describe()


def test_a_compressor_that_only_adds_work_is_never_faster_than_none_on_an_ideal_network():
    """Issue 44: fp16/fp8/quant ranked faster than none at 100 Gbit/s because each cell's compute was
    measured under another load. Same compute + a codec >= none's: never faster without a wire."""
    cal = _calibration({f"{KEY}|none": {"sites": _sites(0.2)}, f"{KEY}|fp16": {"sites": _sites(3.0)}})
    none = model_times(_record("none"), {"ideal": net.IDEAL, **net.PROFILES}, cal)[0]
    fp16 = model_times(_record("fp16", wire=RAW / 2), {"ideal": net.IDEAL, **net.PROFILES}, cal)[0]
    assert fp16["ideal"]["step_s"] > none["ideal"]["step_s"]
    assert fp16["100Gbps"]["step_s"] > none["100Gbps"]["step_s"]  # 1 MiB saves 42 us of wire, costs 6 ms of codec
    assert fp16["100Mbps"]["step_s"] < none["100Mbps"]["step_s"]  # where the wire costs more, the cast pays


def test_learned_extra_work_multiplies_the_compute():
    cal = _calibration({f"{KEY}|ae": {"sites": _sites(1.0), "extra_work": 1.25}})
    rm = row_model(_record("ae"), cal)
    assert rm.inputs.stages[0].of("F").compute_s == pytest.approx(0.0125)
    assert rm.basis.extra_work == 1.25 and "extra work x1.25" in rm.basis.describe()


def test_priced_inputs_keep_the_records_bytes_schedule_and_target():
    rec = _record("fp16", wire=RAW / 2)
    priced, _ = priced_timing(rec, _calibration())
    for k in ("schedule", "microbatches", "replicas", "target_step"):
        assert priced[k] == rec["timing_inputs"][k]
    assert priced["steps"] == rec["timing_inputs"]["steps"] and priced["counts"] == [100]


def test_copy_cost_interpolates_measured_points_on_log_scales():
    c = CopyCost(0.0, 1.0, ((1e3, 1e-6), (1e6, 1e-4)))
    assert c.seconds(10) == 1e-6  # below the smallest: its overhead
    assert c.seconds(1e3) == pytest.approx(1e-6) and c.seconds(1e6) == pytest.approx(1e-4)
    assert c.seconds(math.sqrt(1e9)) == pytest.approx(1e-5)  # the geometric middle
    assert c.seconds(2e6) == pytest.approx(2e-4)  # beyond the largest: proportional
    assert CopyCost(1e-6, 1e9).seconds(1e9) == pytest.approx(1.0 + 1e-6)


def test_coarsened_steps_keep_every_phases_bytes_and_steps():
    steps = [{"links": [{"fwd_bytes": float(i), "bwd_bytes": 2.0 * i}], "dp": []} for i in range(300)]
    counts = [1 if i < 10 else 1 + i % 3 for i in range(300)]  # runs never straddle the warm-up (encode_steps)
    out, c = coarsen_steps(steps, counts, warmup=10, most=16)
    assert len(out) <= 2 * 16 and sum(c) == sum(counts)
    assert 10 in [sum(c[:k]) for k in range(len(c) + 1)]  # the warm-up phase stays apart

    def total(ss, cc, f):
        return sum(s["links"][0][f] * n for s, n in zip(ss, cc))

    for f in ("fwd_bytes", "bwd_bytes"):
        assert total(out, c, f) == pytest.approx(total(steps, counts, f))
    few, fc = coarsen_steps(steps[:5], counts[:5], 0)
    assert few == steps[:5] and fc == counts[:5]


def test_a_bad_calibration_is_one_line_naming_the_field():
    with pytest.raises(ValueError, match=r"calibration: copy.bytes_per_s is 0, expected a positive number"):
        parse_calibration({"schema": "mpcbench.calibration/1", "copy": {"latency_s": 0, "bytes_per_s": 0}}, "x")
    with pytest.raises(ValueError, match="schema"):
        parse_calibration({}, "x")
