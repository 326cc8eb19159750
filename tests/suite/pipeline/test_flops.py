"""suite.pipeline.flops: FlopCounterMode's count of a GPT layer is the closed form, and the
committed model_sizes.json is what a recount of the quick models gives."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from suite.pipeline.flops import ENTRIES, count
from suite.results.model_sizes import load_model_costs
from tasks import build_task, default_data_dir
from tasks.gpt import Block, GPTConfig

# tolerance of "6 x params x tokens + attention" against the count: the closed form's parameters
# include the two LayerNorm gains (2d of 12d^2 + 2d), whose work FlopCounterMode does not count
CLOSED_FORM_TOLERANCE = 1e-3


def test_one_gpt_layer_is_six_params_tokens_plus_attention():
    B, T, d = 2, 1024, 768  # GPT-2 small's layer at its context
    with torch.device("meta"):
        block = Block(GPTConfig(vocab_size=65, block_size=T, n_layer=12, n_head=12, n_embd=d, dropout=0.0), None)
        x = torch.empty(B, T, d, requires_grad=True)
        with FlopCounterMode(display=False) as fwd:
            y = block(x)
        with FlopCounterMode(display=False) as bwd:
            y.backward(torch.ones_like(y))
    tokens = B * T
    params = sum(p.numel() for p in block.parameters())
    assert params == 12 * d * d + 2 * d
    # forward: 2 FLOPs per weight per token (qkv 3d^2, out d^2, MLP 8d^2) + QK^T and AV, 2 x 2 B T^2 d
    assert fwd.get_total_flops() == 2 * tokens * 12 * d * d + 4 * B * T * T * d
    assert bwd.get_total_flops() == 2 * fwd.get_total_flops()  # input and weight gradients
    closed = 6 * params * tokens + 12 * B * T * T * d
    total = fwd.get_total_flops() + bwd.get_total_flops()
    assert abs(total - closed) / closed < CLOSED_FORM_TOLERANCE


def _have(task: str) -> bool:
    files = {"cifar10": "cifar10-jpg.tar.gz", "sst2": "sst2/train.tsv", "shakespeare": "tinyshakespeare/input.txt"}
    files["wikitext2"] = "wikitext2/train.txt"
    return (default_data_dir() / files[task]).exists()


QUICK = [e for e in ENTRIES if e[0] in ("cifar10", "sst2", "shakespeare", "wikitext2") and e[2] in (None, "d64", "w4")]


@pytest.mark.data
@pytest.mark.parametrize("task, tier, size, n_stages", QUICK, ids=lambda v: str(v))
def test_the_committed_file_is_a_recount_of_the_small_models(task, tier, size, n_stages):
    if not _have(task):
        pytest.skip(f"{task}: data not in {default_data_dir()} (set MPCBENCH_DATA_DIR)")
    if task == "sst2":
        from tasks import DataMissingError
        from tasks.sst2 import default_model

        try:
            default_model()
        except DataMissingError as e:
            pytest.skip(str(e))
    committed = {(c.task, c.tier, c.model_size, c.n_stages): c for c in load_model_costs()[0]}
    fresh = count(build_task(task, tier, model_size=size), n_stages)
    key = (task, tier, size, fresh.n_stages)
    assert key in committed, "regenerate: python -m suite.pipeline.flops --write"
    assert fresh.to_dict() == committed[key].to_dict(), (
        "model_sizes.json is out of date: python -m suite.pipeline.flops --write"
    )
