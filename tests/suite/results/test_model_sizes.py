"""suite.results.model_sizes: the committed counts read without torch and follow the closed form
of the GPT family; a stage's projected compute is recomputed by hand."""

from __future__ import annotations

import pytest

from suite.results.hardware import get_hardware
from suite.results.model_sizes import ModelCost, ModelSizeError, get_model_cost, load_model_costs
from suite.results.projection import project_compute_s, project_stage_s, scale_boundary_bytes


def _layer_forward(B: int, T: int, d: int) -> int:
    """One block of tasks.gpt forward: 2 x tokens x 12 d^2 (qkv, out, MLP) + 4 B T^2 d (attention)."""
    return 2 * B * T * 12 * d * d + 4 * B * T * T * d


def test_the_committed_file_has_its_provenance_and_every_listed_size():
    costs, meta = load_model_costs()
    assert meta["torch"] and meta["commit"] and "FlopCounterMode" in meta["counted"]
    have = {(c.task, c.model_size) for c in costs}
    for size in ("gpt2-124m", "gpt2-350m", "gpt-1.3b", "gpt-7b", "d64", "d256", None):
        assert ("shakespeare", size) in have and ("wikitext2", size) in have
    for size in ("w4", "w16", "resnet18", None):
        assert ("cifar10", size) in have
    assert ("sst2", None) in have


def test_gpt2_small_on_shakespeare_follows_the_closed_form():
    c = get_model_cost("shakespeare", "gpt2-124m")
    B, T, d, V = c.microbatch_samples, 1024, 768, 65  # quick: batch 32 / 4 micro-batches = 8 windows
    assert (c.n_stages, B, c.sample_shape) == (4, 8, (1024,))
    layer = _layer_forward(B, T, d)
    head = 2 * B * T * d * V
    assert [s.forward_flops for s in c.stages] == [3 * layer, 3 * layer, 3 * layer, 3 * layer + head]
    assert all(s.backward_flops == 2 * s.forward_flops for s in c.stages)
    assert c.stages[0].boundary_shape == (8, 1024, 768) and c.stages[0].boundary_bytes == 8 * 1024 * 768 * 4
    assert c.stages[-1].boundary_shape == () and c.stages[-1].boundary_bytes == 0
    # 12 layers of 12 d^2 + 2 d, the embeddings (V + T) d, the final LayerNorm d and the untied head V d
    assert c.model_params == 12 * (12 * d * d + 2 * d) + (V + T) * d + d + V * d


def test_a_middle_stage_of_gpt_7b_on_an_h100_by_hand():
    c = get_model_cost("wikitext2", "gpt-7b")
    B, T, d = 8 // 2, 1024, 4096  # wikitext2 quick: batch 16 / 4 micro-batches
    assert c.microbatch_samples == B
    per_stage = 8 * 3 * _layer_forward(B, T, d)  # 32 layers / 4 stages = 8 layers; forward + backward = 3x forward
    assert c.stage_flops(1) == per_stage
    h100 = get_hardware("h100-sxm")
    assert project_compute_s(c.stage_flops(1), h100) == pytest.approx(per_stage / (989.4e12 * 0.4))
    fwd, bwd = project_stage_s(c, h100, mfu=0.5)[1]  # the F and B actions of stage 1
    assert fwd == pytest.approx(8 * _layer_forward(B, T, d) / 494.7e12) and bwd == pytest.approx(2 * fwd)


def test_boundary_bytes_scale_from_the_quick_model_to_a_named_size():
    quick, big = get_model_cost("shakespeare"), get_model_cost("shakespeare", "gpt2-124m")
    raw_q, raw_b = quick.stages[0].boundary_bytes, big.stages[0].boundary_bytes
    assert (raw_q, raw_b) == (8 * 64 * 128 * 4, 8 * 1024 * 768 * 4)
    # a 4x compressor on the quick boundary stays 4x on GPT-2 small's
    assert scale_boundary_bytes(raw_q / 4, raw_q, raw_b) == pytest.approx(raw_b / 4)


def test_unknown_entries_and_bad_rows_are_one_line():
    with pytest.raises(
        ModelSizeError, match=r"no entry for task 'shakespeare'.*model size 'gpt-70b'.*listed: .*gpt-7b"
    ):
        get_model_cost("shakespeare", "gpt-70b")
    good = get_model_cost("cifar10").to_dict()
    bad = {**good, "n_stages": 3}
    with pytest.raises(ModelSizeError, match="4 stage rows for n_stages=3"):
        ModelCost.from_dict(bad)
    bad = {**good, "stages": [{**good["stages"][0], "forward_flops": -1}, *good["stages"][1:]]}
    with pytest.raises(ModelSizeError, match="-1 is not a non-negative integer"):
        ModelCost.from_dict(bad)
    assert ModelCost.from_dict(good) == get_model_cost("cifar10")
