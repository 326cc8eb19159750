"""The pipeline runtime in one process: equivalence to plain training, byte accounting,
warm-up, evaluation modes, learned compressors, result fields, errors."""

from __future__ import annotations

import json

import pytest
import torch

from compressors import Compressor, CompressorError, available, build, register
from compressors.api import TensorInfo, TensorRole
from suite.pipeline import boundary as boundary_mod
from suite.pipeline.config import ConfigError
from suite.pipeline.errors import RunTimeout
from suite.pipeline.reference import train_unsplit
from suite.pipeline.result import RunResult
from suite.pipeline.runtime import run
from suite.pipeline.transport import PREFIX_NBYTES, LocalTransport, frame
from suite.results.network import PROFILES, TimingInputs, model_run

# tiny task: micro-batch activations are (4, 32) fp32 = 512 bytes; a message adds an 8-byte
# length prefix and a 36-byte header (int32: dtype, ndim, 2 dims, n, dtype, ndim, 2 dims)
ACT_BYTES, NONE_MSG = 512, 512 + 8 + 36


@pytest.mark.parametrize(
    "task,stages,schedule,tier",
    [
        ("tiny", 2, "gpipe", "quick"),
        ("tiny", 4, "1f1b", "smoke"),
        ("tiny_adamw", 3, "gpipe", "smoke"),
        ("tiny_adamw", 2, "1f1b", "smoke"),
        ("tiny", 4, "interleaved_1f1b", "quick"),
        ("tiny_adamw", 4, "interleaved_1f1b", "smoke"),
    ],
)
def test_none_pipeline_equals_unsplit_training(tiny_cell, task, stages, schedule, tier):
    cfg = tiny_cell(task=task, stages=stages, schedule=schedule, tier=tier)
    piped, plain = run(cfg), train_unsplit(cfg)
    assert len(piped.losses) == len(plain.losses) == {"smoke": 6, "quick": 20}[tier]
    assert max(abs(a - b) for a, b in zip(piped.losses, plain.losses)) <= 1e-6
    assert plain.losses[-1] < plain.losses[0] - 0.01  # it trained


def test_the_standalone_run_is_the_reference_loop_plus_evaluation(tiny_cell):
    """``python -m tasks.<name>`` and the unsplit reference share one loop: evaluating in between
    changes nothing about training."""
    from tasks import build_task
    from tasks.standalone import run_unsplit

    cfg = tiny_cell(stages=3)
    ref = train_unsplit(cfg)
    task = build_task("tiny", "smoke", seed=cfg.seed)
    torch.manual_seed(cfg.seed)
    alone = run_unsplit(task, 3)
    assert alone.losses == ref.losses and len(ref.step_walls) == 6 and alone.step_walls == []
    assert [step for step, _ in alone.curve] == [3, 6]
    piped = run(cfg)  # the none pipeline evaluates the same model at the same steps
    assert [m for _, m in alone.curve] == pytest.approx([p.metric for p in piped.curve], abs=1e-6)


def test_wire_bytes_equal_the_sizes_of_the_messages_torchrun_would_send(tiny_cell, monkeypatch):
    sent: list[int] = []  # bytes of every torch.distributed send DistTransport would make
    framed, body = LocalTransport._deliver, LocalTransport._deliver_body

    def spy_framed(self, payload, dst, shape, dtype):
        sent.extend([PREFIX_NBYTES, frame(payload, shape, dtype, torch.device("cpu")).numel()])  # length, buffer
        return framed(self, payload, dst, shape, dtype)

    def spy_body(self, payload, dst):
        sent.append(sum(t.numel() * t.element_size() for t in payload))  # one message: the tensors' bytes
        return body(self, payload, dst)

    monkeypatch.setattr(LocalTransport, "_deliver", spy_framed)
    monkeypatch.setattr(LocalTransport, "_deliver_body", spy_body)
    r = run(tiny_cell(plan={"forward": "fp8", "backward": "fixture_varsize"}, stages=3))
    assert sum(sent) == r.bytes["forward"].wire + r.bytes["backward"].wire + r.eval_bytes.wire
    assert r.bytes["forward"].messages + r.bytes["backward"].messages + r.eval_bytes.messages == len(sent)
    per_step = r.wire_bytes_by_step["backward"]
    assert len(set(per_step)) > 1  # the variable-size payload really varied
    assert sum(per_step) == r.bytes["backward"].wire
    # fp8 is fixed-size: after each stream's first (framed) message, 512 codes + a 4-byte scale in one message
    assert r.bytes["forward"].messages < 2 * 6 * 4 * 2 and 516 in sent
    # fixture_varsize is not: every payload framed, two messages
    assert r.bytes["backward"].messages == 2 * 6 * 4 * 2

    sent.clear()
    r = run(tiny_cell(plan="none", stages=2, eval_uncompressed=False))
    payloads = 6 * 4  # steps x micro-batches, one boundary: the first framed, the rest one body each
    for d in ("forward", "backward"):
        got = (r.bytes[d].raw, r.bytes[d].wire, r.bytes[d].messages)
        assert got == (payloads * ACT_BYTES, NONE_MSG + (payloads - 1) * ACT_BYTES, 2 + (payloads - 1))
    assert sum(sent) == r.bytes["forward"].wire + r.bytes["backward"].wire + r.eval_bytes.wire


class _LyingFixed(Compressor):
    """Declares a fixed-size payload but sends 8 or 9 values (module level: single-process mode builds
    plugin compressors from a private copy of their module, which must be able to find the class)."""

    fixed_size = True

    def compress(self, x, info):
        return (x.reshape(-1)[: 8 + info.step % 2],)  # size varies with the step

    def decompress(self, payload, info):
        return torch.zeros(info.shape, dtype=info.dtype)


def test_a_fixed_size_compressor_whose_payload_changes_is_refused(tiny_cell, restore_registry):
    register("fixture_lying_fixed")(_LyingFixed)
    with pytest.raises(Exception, match=r"fixed-size stream .* changed from \[float32\[8\]\] to \[float32\[9\]\]"):
        run(tiny_cell(plan={"forward": "fixture_lying_fixed", "backward": "none"}, stages=2))


class _Float64(Compressor):
    """A plugin bug seen in the wild: the payload built in float64, twice the input's bytes."""

    def compress(self, x, info):
        return (x.detach().double(),)

    def decompress(self, payload, info):
        return payload[0].to(info.dtype)


def test_a_float64_payload_fails_the_cell_with_one_line_naming_the_dtype_and_the_fix(tiny_cell, restore_registry):
    register("fixture_float64")(_Float64)
    with pytest.raises(CompressorError) as e:
        run(tiny_cell(plan={"forward": "fixture_float64", "backward": "none"}, stages=2))
    msg = str(e.value)
    assert "\n" not in msg
    assert "payload tensor 0 is torch.float64, wider than the input's torch.float32" in msg
    assert "cast it to the input's dtype or smaller" in msg


def test_compress_warmup_steps_send_uncompressed(tiny_cell):
    r = run(tiny_cell(plan="fp8", stages=2, compress_warmup_steps=2))
    fwd = r.wire_bytes_by_step["forward"]
    assert fwd[:2] == [NONE_MSG + 3 * ACT_BYTES, 4 * ACT_BYTES]  # uncompressed: framed once, then bodies
    # fp8: 1 byte per value + scale; its stream's first message (step 2) carries the header
    assert len(set(fwd[3:])) == 1 and fwd[3] < fwd[2] < fwd[0] // 2
    assert r.timing_inputs["warmup_steps"] == 2


def test_evaluation_with_and_without_compression(tiny_cell):
    lossy = run(tiny_cell(plan={"forward": "fixture_varsize", "backward": "none"}))
    assert 0 <= lossy.final_metric <= 1 and 0 <= lossy.final_metric_uncompressed <= 1
    assert [p.step for p in lossy.curve] == [3, 6]
    assert all(p.metric_uncompressed is not None for p in lossy.curve)
    plain = run(tiny_cell(plan="none"))
    assert plain.final_metric_uncompressed == plain.final_metric
    off = run(tiny_cell(plan="fp8", eval_uncompressed=False))
    assert off.final_metric_uncompressed is None and off.curve[-1].metric_uncompressed is None


def _ends(monkeypatch):
    ends = {}
    for cls in (boundary_mod.SenderEnd, boundary_mod.ReceiverEnd):
        orig = cls.__init__

        def init(self, *a, _orig=orig, **k):
            _orig(self, *a, **k)
            ends[(type(self).__name__, self.boundary)] = self

        monkeypatch.setattr(cls, "__init__", init)
    return ends


@pytest.mark.parametrize("spec", ["ae(dim=8)", "fixture_learned"])
def test_trainable_compressor_gets_gradients_and_learns(tiny_cell, monkeypatch, spec):
    if spec.startswith("ae") and "ae" not in available():
        pytest.skip("ae compressor not registered")
    ends = _ends(monkeypatch)
    r = run(tiny_cell(plan={"forward": spec, "backward": "none"}, stages=2))
    sender, receiver = ends[("SenderEnd", 0)].fwd, ends[("ReceiverEnd", 0)].fwd
    assert sender is not receiver
    fresh = build(spec)
    info = TensorInfo(TensorRole.ACTIVATION, 0, 0, 0, torch.Size([4, 32]), torch.float32, torch.device("cpu"))
    fresh.decompress(fresh.compress(torch.randn(4, 32), info), info)  # materialize lazily sized parameters
    init = [p.detach().clone() for p in fresh.parameters()]
    s_params, r_params = list(sender.parameters()), list(receiver.parameters())
    assert len(s_params) == len(init) >= 2
    # the sender trains its encoding half, the receiver its decoding half (and not the other)
    s_changed = [not torch.equal(p, q) for p, q in zip(s_params, init)]
    r_changed = [not torch.equal(p, q) for p, q in zip(r_params, init)]
    assert any(s_changed) and any(r_changed) and s_changed != r_changed
    # backward carries the gradient of the code, counted against the activation gradient's size
    assert r.bytes["backward"].raw == 24 * ACT_BYTES
    if spec.startswith("ae"):
        assert r.bytes["backward"].wire < r.bytes["backward"].raw / 3


class _WrongShape(Compressor):
    """Decompresses to the wrong shape (a broken plugin)."""

    def compress(self, x, info):
        return (x.reshape(-1)[:3].contiguous(),)

    def decompress(self, payload, info):
        return payload[0]


def test_bad_configs_and_plugins_fail_with_one_line_errors(tiny_cell, restore_registry):
    register("test_wrong_shape")(_WrongShape)  # a broken plugin, registered for this test only
    with pytest.raises(ConfigError, match="dp=2 needs mode=torchrun"):
        run(tiny_cell(dp=2))
    if "ae" in available():
        with pytest.raises(ConfigError, match="backward compressor 'ae.*does not support role activation_grad"):
            run(tiny_cell(plan="ae(dim=8)"))
    with pytest.raises(ConfigError, match="unknown compressor 'nope'.*; valid names: .*none"):
        run(tiny_cell(plan="nope"))
    with pytest.raises(ConfigError, match="cannot be split into 5 stages"):
        run(tiny_cell(stages=5))
    with pytest.raises(CompressorError, match=r"test_wrong_shape: decompress returned \(3,\).*expected \(4, 32\)"):
        run(tiny_cell(plan="test_wrong_shape"))
    with pytest.raises(RunTimeout, match="time_limit_s"):
        run(tiny_cell(time_limit_s=1e-9))


class _NaNAtBoundary0(Compressor):
    """Sends the tensor as is; the decoder of boundary 0 writes one NaN (a broken plugin)."""

    def compress(self, x, info):
        return (x.detach().contiguous(),)

    def decompress(self, payload, info):
        y = payload[0].clone()
        if info.boundary == 0:
            y.view(-1)[0] = float("nan")
        return y


def test_a_nan_from_decompress_is_named_at_its_boundary(tiny_cell, restore_registry):
    """It was reported as the next stage's diverged input activation at boundary 1."""
    register("test_nan_b0")(_NaNAtBoundary0)
    with pytest.raises(
        CompressorError,
        match=r"test_nan_b0: decompress returned 1 non-finite value\(s\) \(NaN/Inf\) of 128 from a finite payload "
        r"\(at activation boundary 0 step 0\)",
    ):
        run(tiny_cell(plan="test_nan_b0", stages=3))


def test_non_finite_values_a_payload_carried_are_not_the_decoders():
    """A diverged input passed through exactly (``none``) is not blamed on the decoder."""
    x = torch.ones(4, 32)
    x[0, 0] = float("nan")
    comp = build("none")
    info = TensorInfo(TensorRole.ACTIVATION, 0, 0, 0, x.shape, x.dtype, x.device)
    assert boundary_mod._check_output(comp.decompress((x,), info), comp, info, payload=(x,)) is not None
    with pytest.raises(CompressorError, match="from a finite payload"):
        boundary_mod._check_output(x, comp, info, payload=(torch.ones(4, 32),))


def test_run_result_is_complete_and_consistent(tiny_cell):
    r = run(tiny_cell(plan="fp8", stages=3, tier="quick", schedule="gpipe"))
    assert (r.steps, r.n_stages, r.dp, r.microbatches, r.schedule, r.mode, r.device) == (
        20,
        3,
        1,
        4,
        "gpipe",
        "single",
        "cpu",
    )
    assert r.metric_name == "accuracy" and r.higher_is_better and r.target == 0.4
    assert [p.step for p in r.curve] == [5, 10, 15, 20] and r.final_metric == r.curve[-1].metric
    hit = [p.step for p in r.curve if p.metric >= r.target]
    assert r.reached_target_step == (hit[0] if hit else None)
    assert all(p.wall_s > 0 for p in r.curve) and r.curve[-1].wall_s == pytest.approx(r.time.total_train_s)
    assert len(r.losses) == 20 and all(l > 0 for l in r.losses)
    assert r.curve[0].train_loss == pytest.approx(sum(r.losses[:5]) / 5)
    t = r.time
    assert 0 < t.compute_s < t.step_s and t.compress_s > 0 and t.comm_s > 0 and t.total_eval_s > 0
    assert len(r.stage_times) == 3 and all(s["compute_s"] > 0 for s in r.stage_times)
    assert set(r.bytes) == {"forward", "backward", "dp"} and r.bytes["dp"].wire == 0
    assert set(r.bytes_per_boundary) == {"b0.forward", "b0.backward", "b1.forward", "b1.backward"}
    assert r.bytes_per_step["forward"] == pytest.approx(r.bytes["forward"].wire / 20)
    assert sum(r.bytes_per_boundary[k].wire for k in ("b0.forward", "b1.forward")) == r.bytes["forward"].wire
    assert r.bytes["forward"].ratio > 2.5  # fp8: ~4x on values, headers included
    assert set(r.modeled) == set(PROFILES)
    assert r.modeled["80Mbps"]["step_s"] > r.modeled["100Gbps"]["step_s"] > 0
    assert model_run(TimingInputs.from_dict(r.timing_inputs)) == r.modeled
    # one torch thread on the CPU: the model's robust costs are thread CPU seconds (issue 13)
    expected_clock = "thread_cpu" if torch.get_num_threads() == 1 else "wall"
    assert r.timing_inputs["measurement"]["robust_clock"] == expected_clock
    again = RunResult.from_dict(json.loads(json.dumps(r.to_dict())))
    assert again == r
