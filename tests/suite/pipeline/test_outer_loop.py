"""The DiLoCo-style outer loop (``sync: outer(h=H)``): config, role opt-in, equivalences, bytes."""

from __future__ import annotations

from dataclasses import replace
from typing import ClassVar

import pytest

from compressors import register
from compressors.api import Compressor, TensorRole
from compressors.builtins.baseline import NoCompression
from suite.pipeline.config import CellConfig, ConfigError
from suite.pipeline.runtime import run
from suite.pipeline.sync import DPSync, parse_sync


def test_sync_strings_round_trip_and_bad_ones_fail_in_one_line():
    assert parse_sync("step") == DPSync()
    s = parse_sync("outer(h=8)")
    assert (s.mode, s.h, s.lr, s.momentum, s.nesterov) == ("outer", 8, 0.7, 0.9, True)
    assert str(s) == "outer(h=8)" and parse_sync(str(s)) == s
    t = parse_sync("outer(h=1, lr=1.0, momentum=0.0, nesterov=false)")
    assert parse_sync(str(t)) == t and not t.nesterov
    for bad, words in (
        ("outer", "needs h"),
        ("outer(h=0)", "h=0"),
        ("outer(h=2, lr=-1)", "lr=-1"),
        ("outer(h=2, mom=0.5)", "unknown parameter 'mom'"),
        ("every", "unknown"),
        ("outer(h=2, momentum=0.0)", "nesterov=true needs momentum > 0"),
    ):
        with pytest.raises(ConfigError, match=words) as e:
            parse_sync(bad)
        assert "\n" not in str(e.value)


def test_due_every_h_steps_and_after_the_last():
    s = parse_sync("outer(h=3)")
    assert [i for i in range(8) if s.due(i, 8)] == [2, 5, 7]
    assert not any(DPSync().due(i, 8) for i in range(8))


def test_the_cell_key_is_unchanged_for_per_step_sync_and_differs_for_the_outer_loop():
    a = CellConfig(task="shakespeare")
    assert "sync" not in a.identity()  # older records keep their keys
    b = CellConfig(task="shakespeare", sync="outer(h=4)")  # type: ignore[arg-type]  # strings are parsed
    assert b.sync == parse_sync("outer(h=4)") and b.key() != a.key()
    assert CellConfig.from_dict(b.to_dict()) == b


@register("fixture_weight_grad_only")
class _WeightGradOnly(NoCompression):
    """A plugin that declares its roles without the pseudo-gradient."""

    roles: ClassVar[frozenset[TensorRole]] = frozenset({TensorRole.WEIGHT_GRAD})


def test_a_compressor_must_opt_into_the_pseudo_gradient_role(tiny_cell):
    ok = tiny_cell(plan={"dp": "fixture_weight_grad_only"}, stages=2, dp=2, mode="torchrun")
    ok.validate()  # per-step weight gradients: its declared role
    with pytest.raises(ConfigError) as e:
        replace(ok, sync=parse_sync("outer(h=2)")).validate()
    msg = str(e.value)
    assert "\n" not in msg and "pseudo_grad" in msg and "fixture_weight_grad_only" in msg and "--dp none" in msg
    assert TensorRole.PSEUDO_GRAD in Compressor.roles  # the default (every role) opts in


def test_outer_loop_with_h1_none_lr1_is_plain_sgd_with_one_replica(tiny_cell):
    plain = run(tiny_cell(stages=2))
    outer = run(tiny_cell(stages=2, sync=parse_sync("outer(h=1, lr=1.0, momentum=0.0, nesterov=false)")))
    assert outer.losses == pytest.approx(plain.losses, abs=1e-6)
    # one replica: the pseudo-gradient is counted as what it would send, every step
    assert outer.bytes["dp"].wire == outer.bytes["dp"].raw > 0
    assert len(set(outer.wire_bytes_by_step["dp"])) == 1


def test_outer_loop_bytes_only_on_sync_steps_and_the_model_sees_them(tiny_cell):
    r = run(tiny_cell(plan={"dp": "ef(topk(ratio=0.1))"}, stages=2, tier="quick", sync=parse_sync("outer(h=4)")))
    per_step = r.wire_bytes_by_step["dp"]
    assert [i for i, w in enumerate(per_step) if w] == [3, 7, 11, 15, 19]
    assert r.bytes["dp"].raw > 5 * r.bytes["dp"].wire  # compressed pseudo-gradients
    ti = r.timing_inputs
    assert any(st.get("sync_s", 0) > 0 for st in ti["stages"])  # the outer loop's local work is modeled
    loaded = [l for l, c in zip(ti["steps"], ti["counts"]) for _ in range(c)]
    assert [i for i, l in enumerate(loaded) if l["dp"][0]["allgather_bytes"]] == [3, 7, 11, 15, 19]


@pytest.mark.distributed
def test_outer_loop_under_torchrun_equals_one_process(tiny_cell):
    cfg = tiny_cell(
        plan={"forward": "quant(bits=4)", "backward": "none", "dp": "ef(topk(ratio=0.1))"},
        stages=2,
        tier="quick",
        sync=parse_sync("outer(h=3)"),
    )
    single = run(cfg)
    multi = run(replace(cfg, mode="torchrun"))
    assert multi.losses == pytest.approx(single.losses, abs=1e-6)
    assert multi.bytes == single.bytes and multi.wire_bytes_by_step == single.wire_bytes_by_step


@pytest.mark.distributed
def test_outer_loop_h1_without_compression_is_plain_data_parallelism(tiny_cell):
    """Two replicas, SGD with momentum inside: the mean of the replicas' steps is the step on the
    mean gradient (linear), so H = 1, lr = 1, no outer momentum gives DDP's run."""
    ddp = tiny_cell(stages=2, dp=2, mode="torchrun", tier="quick")
    outer = replace(ddp, sync=parse_sync("outer(h=1, lr=1.0, momentum=0.0, nesterov=false)"))
    a, b = run(ddp), run(outer)
    assert b.losses == pytest.approx(a.losses, abs=1e-5)
    assert [p.metric for p in b.curve] == pytest.approx([p.metric for p in a.curve], abs=1e-5)
    # the same gradient volume crosses the wire: one all-reduce of every parameter per step
    assert b.bytes["dp"].wire == a.bytes["dp"].wire


@pytest.mark.distributed
def test_outer_loop_two_replicas_with_compression_trains_and_counts_per_traffic_kind(tiny_cell):
    r = run(
        tiny_cell(
            plan={"forward": "quant(bits=4)", "backward": "quant(bits=4)", "dp": "ef(topk(ratio=0.05, bits=2))"},
            stages=2,
            dp=2,
            mode="torchrun",
            tier="quick",
            sync=parse_sync("outer(h=5)"),
        )
    )
    steps = r.wire_bytes_by_step["dp"]
    assert [i for i, w in enumerate(steps) if w] == [4, 9, 14, 19]
    assert r.bytes["forward"].wire > 0 and r.bytes["backward"].wire > 0  # pp x dp: every kind counted
    assert r.bytes["dp"].raw / r.bytes["dp"].wire > 10
    assert all(x == x for x in r.losses)
