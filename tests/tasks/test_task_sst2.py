"""SST-2: the stage split computes exactly the unsplit Hugging Face forward."""

from __future__ import annotations

import pytest
import torch
from _taskdata import require_data

from tasks.sst2 import Sst2, _tokenizer, default_model

SENTENCES = [
    "a charming and often affecting journey .",
    "unflinchingly bleak",
    "it 's not a bad film , just a dull one .",
]


@pytest.fixture(scope="module")
def task():
    return Sst2(tier="full")  # all six layers (smoke and quick keep three)


@pytest.mark.parametrize("n_stages", [2, 3])
def test_split_equals_hf_forward(task, n_stages):
    ids = _tokenizer(task.model_name)(SENTENCES, padding="max_length", max_length=16, return_tensors="pt")["input_ids"]
    assert (ids == task.pad_id).any(), "the test needs padding to exercise the mask"
    model = task.build_model().eval()
    stages = task.build_stages(n_stages)
    for s in stages:
        s.eval()
    head, stages[-1].head = stages[-1].head, None  # compare hidden states first
    with torch.no_grad():
        x = ids
        boundaries = []
        for s in stages:
            x = s(x, ids)
            boundaries.append(x)
        ref = model.encoder(input_ids=ids, attention_mask=(ids != task.pad_id).long()).last_hidden_state
        torch.testing.assert_close(x, ref, rtol=0, atol=1e-5)
        assert all(b.shape == (3, 16, model.encoder.config.hidden_size) for b in boundaries)
        stages[-1].head = head
        torch.testing.assert_close(head(x, ids != task.pad_id), model(ids), rtol=0, atol=1e-5)


def test_padding_does_not_change_the_prediction(task):
    """The derived mask really masks: a sentence's logits do not depend on how much it is padded."""
    tok = _tokenizer(task.model_name)
    stages = task.build_stages(3)
    for s in stages:
        s.eval()
    outs = []
    with torch.no_grad():
        for length in (12, 24):
            ids = tok(SENTENCES[:1], padding="max_length", max_length=length, return_tensors="pt")["input_ids"]
            x = ids
            for s in stages:
                x = s(x, ids)
            outs.append(x)
    torch.testing.assert_close(outs[0], outs[1], rtol=0, atol=1e-5)


def test_layers_split_evenly(task):
    stages = task.build_stages(3)
    assert [len(s.layers) for s in stages] == [2, 2, 2]
    assert stages[0].embeddings is not None and stages[-1].head is not None
    assert [len(s.layers) for s in task.build_stages(2)] == [3, 3]
    assert [len(s.layers) for s in Sst2(tier="smoke").build_stages(3)] == [1, 1, 1]


@pytest.mark.data
def test_real_data_tokenized_once_to_fixed_length(task):
    require_data("sst2")
    d = task.data
    assert d["train_ids"].shape == (67_349, 64) and d["dev_ids"].shape == (872, 64)
    assert set(d["dev_y"].tolist()) == {0, 1}
    b = next(iter(task.train_batches()))
    assert b.inputs.dtype == torch.int64 and b.inputs.shape == (task.budget.batch_size, 64)
    assert default_model()
