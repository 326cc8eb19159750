"""leaderboard.projected and ``mpcbench report --hardware``: a committed row projected onto an H100
at GPT-2 124M, recomputed by hand from the profile, the FLOP count and the calibration."""

from __future__ import annotations

import csv
import io
import json
import statistics
from contextlib import redirect_stdout
from dataclasses import replace
from pathlib import Path

import pytest

from suite.bench.cli import main
from suite.results import network as net
from suite.results.calibration import compute_key, load_calibration
from suite.results.hardware import get_hardware
from suite.results.model_sizes import get_model_cost
from suite.results.time_model import NotProjectable, Projection, coarsen_steps, priced_timing

ROOT = Path(__file__).resolve().parents[2]
RECORDS = ROOT / "records" / "mpcbench-baselines" / "quick-cpu-2core-v2.jsonl"


def _record(task: str, compressor: str, seed: int) -> dict:
    for line in RECORDS.read_text().splitlines():
        r = json.loads(line)
        if (r["task"], r["compressor"], r["seed"], r["status"]) == (task, compressor, seed, "ok"):
            return r
    raise AssertionError(f"no {task}/{compressor}/seed {seed} in {RECORDS.name}")


def _by_hand(r: dict, size: str, mfu: float) -> net.TimingInputs:
    """The row's inputs on the H100 at ``size``, from the datasheet, the counts and the calibration."""
    hw = get_hardware("h100-sxm")
    rate = 9.894e14 * mfu  # the datasheet's dense bf16 peak x MFU
    copy_bw = (67108864 / 2.26e-5 + 33554432 / 1.13e-5) / 2  # the two measured copy floors' mean rate
    assert hw.require("peak_bf16_flops") == 9.894e14 and hw.kernel_launch_s == 5e-6
    base = get_model_cost(r["task"], None, "quick", 4)
    big = get_model_cost(r["task"], size, "quick", 4)
    cal = load_calibration()
    sites = cal.row(compute_key(r), r["compressor"]).sites
    harness = cal.row(compute_key(r), "none").sites  # none's multiple: the benchmark's checks, not codec work
    M = r["timing_inputs"]["microbatches"]

    def ratio(s: int) -> float:
        i = s if base.stages[s].boundary_bytes else s - 1
        return big.stages[i].boundary_bytes / base.stages[i].boundary_bytes

    def codec(prefix: str, s: int) -> float:
        return sum(
            max(0.0, c.multiple - harness[name].multiple) * c.nbytes * ratio(s) / copy_bw * c.calls_per_step / M
            for name, c in sites.items()
            if name.startswith(prefix)
        )

    stages = []
    for s in range(4):
        st = big.stages[s]
        F = net.ActionCost(
            codec(f"b{s - 1}.forward.decompress", s - 1) if s else 0.0,
            max(st.forward_flops / rate, st.forward_kernels * 5e-6),  # the FLOPs, or 5 us a kernel
            codec(f"b{s}.forward.compress", s),
        )
        B = net.ActionCost(
            codec(f"b{s}.backward.decompress", s),
            max(st.backward_flops / rate, st.backward_kernels * 5e-6),
            codec(f"b{s - 1}.backward.compress", s - 1) if s else 0.0,
        )
        stages.append(net.StageCost({"B": B, "F": F}, st.params * 14 / copy_bw, 0.0))
    t = r["timing_inputs"]
    steps, counts = coarsen_steps(t["steps"], t["counts"], t["warmup_steps"])
    scaled = [
        {
            **load,
            "links": [
                {**l, "fwd_bytes": l["fwd_bytes"] * ratio(i), "bwd_bytes": l["bwd_bytes"] * ratio(i)}
                for i, l in enumerate(load["links"])
            ],
        }
        for load in steps
    ]
    inputs = net.TimingInputs.from_dict({**t, "stages": [], "mean_stages": [], "steps": scaled, "counts": counts})
    inputs.stages = stages
    return inputs


@pytest.mark.parametrize("compressor", ["none", "fp16"])
def test_a_row_on_an_h100_at_gpt2_small_follows_from_the_profile(compressor):
    r = _record("shakespeare", compressor, 0)
    got, basis = priced_timing(r, load_calibration(), Projection("h100-sxm", "gpt2-124m"))
    hand = _by_hand(r, "gpt2-124m", 0.4)
    mine = net.TimingInputs.from_dict(got)
    for a, b in zip(mine.stages, hand.stages):
        assert a.optimizer_s == pytest.approx(b.optimizer_s, rel=1e-9)
        for kind in ("F", "B"):
            x, y = a.of(kind), b.of(kind)
            assert (x.pre_s, x.compute_s, x.post_s) == pytest.approx((y.pre_s, y.compute_s, y.post_s), rel=1e-9)
    link = net.PROFILES["10Gbps"]
    step = net.model_run(mine, {"l": link})["l"]["step_s"]
    assert step == pytest.approx(net.model_run(hand, {"l": link})["l"]["step_s"], rel=1e-9)
    assert basis.compute == "projected" and "MFU 0.40" in basis.projection
    if compressor == "none":  # no codec on the accelerator: none's multiple is the harness's
        assert all(a.of(k).pre_s == a.of(k).post_s == 0.0 for a in mine.stages for k in ("F", "B"))
    # half the utilization: every compute part doubles, nothing else moves
    half, _ = priced_timing(r, load_calibration(), Projection("h100-sxm", "gpt2-124m", mfu=0.2))
    for a, b in zip(net.TimingInputs.from_dict(half).stages, mine.stages):
        assert a.of("F").compute_s == pytest.approx(2 * b.of("F").compute_s, rel=1e-9)
        assert a.of("F").post_s == pytest.approx(b.of("F").post_s, rel=1e-12)


def _row_records(task: str, compressor: str, setup: str) -> list[dict]:
    """The latest ok records of one maintainers' row (every file of the entry; the latest-record rule)."""
    from suite.results.entries import rows_of

    recs = []
    for f in sorted(RECORDS.parent.glob("*.jsonl")):
        recs += [{**json.loads(line), "entry": "mpcbench-baselines"} for line in f.read_text().splitlines()]
    for key, idx in rows_of(recs, ok_only=True).items():
        if (key.task, key.tier, key.compressor, key.setup) == (task, "quick", compressor, setup):
            return [recs[i] for i in idx]
    raise AssertionError(f"no {task}/{compressor} row in {setup}")


def test_report_hardware_prints_the_hand_computed_step_and_bandwidth():
    setup = "4 stages, 1f1b, M=4, cpu"
    recs = _row_records("shakespeare", "fp16", setup)
    out = io.StringIO()
    with redirect_stdout(out):
        rc = main(
            ["report", "--records", str(ROOT / "records"), "--task", "shakespeare", "--tier", "quick",
             "--hardware", "h100-sxm", "--model-size", "gpt2-124m", "--network", "10Gbps", "--format", "csv"]
        )  # fmt: skip
    assert rc == 0
    rows = [x for x in csv.DictReader(io.StringIO(out.getvalue())) if x["compressor"] == "fp16" and x["setup"] == setup]
    assert len(rows) == 1 and rows[0]["seeds"] == str(len(recs)), rows
    from suite.results.network.utilization import bandwidths_for_utilization

    steps, links = [], []
    for r in recs:  # the report's step and link are the medians over the row's seeds
        hand = _by_hand(r, "gpt2-124m", 0.4)
        steps.append(net.model_run(hand, {"l": net.PROFILES["10Gbps"]})["l"]["total_s"] / hand.n_steps)
        bw = bandwidths_for_utilization(hand.to_dict())["inter"]
        links.append(bw[min(bw)])
    assert float(rows[0]["step_s"]) == pytest.approx(statistics.median(steps), rel=1e-9)
    assert float(rows[0]["link_50"]) == pytest.approx(statistics.median(links), rel=1e-6)


def test_a_row_without_a_flop_count_says_so_and_bad_options_are_one_line(capsys):
    r = _record("cifar10", "fp16", 0)
    with pytest.raises(NotProjectable, match="no FLOP count for cifar10/quick with 4 stage"):
        priced_timing(r, load_calibration(), Projection("h100-sxm", "gpt2-124m"))
    for argv, msg in (
        (["--hardware", "h200"], "unknown hardware profile 'h200'; valid: h100-sxm"),
        (["--model-size", "gpt2-124m"], "add --hardware NAME"),
        (["--hardware", "h100-sxm", "--model-size", "gpt-70b"], "unknown model size 'gpt-70b'; valid:"),
        (["--hardware", "h100-sxm", "--mfu", "1.5"], "--mfu must be a fraction"),
    ):
        rc = main(["report", "--records", str(ROOT / "records"), "--task", "cifar10", *argv])
        err = capsys.readouterr().err.strip()
        assert rc != 0 and msg in err and len(err.splitlines()) == 1, err


@pytest.mark.parametrize("compressor", ["none", "fp16", "topk", "fwd=ae,bwd=none"])
def test_this_machine_at_the_measured_size_is_the_measured_board(compressor):
    """The calibrated profile at the size a row was measured at prices it as the board does: the
    projection is the time model's own pricing with the sizes grown, not a second model."""
    r = _record("shakespeare", compressor, 0)
    cal = load_calibration()
    measured = net.TimingInputs.from_dict(priced_timing(r, cal)[0])
    same = net.TimingInputs.from_dict(priced_timing(r, cal, Projection("this-machine"))[0])
    for a, b in zip(same.stages, measured.stages):
        assert a.optimizer_s == pytest.approx(b.optimizer_s, rel=1e-9)
        for kind in ("F", "B"):
            x, y = a.of(kind), b.of(kind)
            assert (x.pre_s, x.compute_s, x.post_s) == pytest.approx((y.pre_s, y.compute_s, y.post_s), rel=1e-9)
    bigger = net.TimingInputs.from_dict(priced_timing(r, cal, Projection("this-machine", "d256"))[0])
    grow = (
        get_model_cost("shakespeare", "d256").stages[1].forward_flops
        / get_model_cost("shakespeare").stages[1].forward_flops
    )
    assert bigger.stages[1].of("F").compute_s > measured.stages[1].of("F").compute_s * grow * 0.99


def test_tensor_parallel_traffic_crosses_the_profiles_own_tp_link():
    """A tp=2 row projected onto a consumer card: its collectives cross the card's PCIe link (the
    profile's ``tp_link``), not the network model's NVLink class; the report's step is the hand model's."""
    tp_file = RECORDS.with_name("quick-cpu-2core-tp.jsonl")
    recs = [
        r
        for r in map(json.loads, tp_file.read_text().splitlines())
        if (r["task"], r["compressor"], r["config"].get("tp"), r["status"]) == ("shakespeare", "none", 2, "ok")
    ]
    assert len(recs) >= 2
    pcie = get_hardware("rtx-4090").tp_link
    assert pcie is not None and pcie.bandwidth_bps < net.PROFILES["10Gbps"].intra.bandwidth_bps
    own, default = [], []
    for r in recs:
        got, _ = priced_timing(r, load_calibration(), Projection("rtx-4090"))
        inputs = net.TimingInputs.from_dict(got)
        assert any(t.fwd_bytes for step in inputs.steps for t in step.tp)  # the row sends tp traffic
        for out_, link in ((own, replace(net.PROFILES["10Gbps"], intra=pcie)), (default, net.PROFILES["10Gbps"])):
            out_.append(net.model_run(inputs, {"l": link})["l"]["total_s"] / inputs.n_steps)
    assert statistics.median(own) > statistics.median(default)  # the slower link shows
    out = io.StringIO()
    with redirect_stdout(out):
        rc = main(
            ["report", "--records", str(ROOT / "records"), "--task", "shakespeare", "--tier", "quick",
             "--hardware", "rtx-4090", "--network", "10Gbps", "--format", "csv"]
        )  # fmt: skip
    assert rc == 0
    rows = [
        x
        for x in csv.DictReader(io.StringIO(out.getvalue()))
        if x["compressor"] == "none" and "tp=2" in x["setup"] and x["seeds"] == str(len(recs))
    ]
    assert len(rows) == 1, out.getvalue()[:2000]
    assert float(rows[0]["step_s"]) == pytest.approx(statistics.median(own), rel=1e-9)


def test_a_quick_size_model_on_an_h100_is_launch_bound():
    """At the measured (quick) size a stage's few hundred MFLOPs take under a microsecond at peak x MFU;
    its counted kernels at the profile's launch floor decide its compute instead, and a GPT-2-sized
    model's FLOPs decide its own (the floor is below them)."""
    r = _record("shakespeare", "none", 0)
    hw = get_hardware("h100-sxm")
    quick = get_model_cost("shakespeare", None, "quick", 4)
    got, basis = priced_timing(r, load_calibration(), Projection("h100-sxm"))
    for stage, cost in zip(net.TimingInputs.from_dict(got).stages, quick.stages):
        assert cost.forward_kernels > 0 and cost.forward_flops / (hw.require("peak_bf16_flops") * 0.4) < 1e-6
        assert stage.of("F").compute_s == pytest.approx(cost.forward_kernels * hw.kernel_launch_s, rel=1e-12)
        assert stage.of("B").compute_s == pytest.approx(cost.backward_kernels * hw.kernel_launch_s, rel=1e-12)
    assert "at least 5 us a kernel" in basis.projection
    big = get_model_cost("shakespeare", "gpt2-124m", "quick", 4)
    got, _ = priced_timing(r, load_calibration(), Projection("h100-sxm", "gpt2-124m"))
    for stage, cost in zip(net.TimingInputs.from_dict(got).stages, big.stages):
        flops_s = cost.forward_flops / (hw.require("peak_bf16_flops") * 0.4)
        assert flops_s > cost.forward_kernels * hw.kernel_launch_s
        assert stage.of("F").compute_s == pytest.approx(flops_s, rel=1e-12)
