"""WikiText-2 GPT-2 pretraining: the GPT-2 BPE tokenizer on the real files, the loader on a tiny
made-up corpus and on the real splits (marked ``data``), and the split model equal to the unsplit
Hugging Face ``GPT2LMHeadModel``."""

from __future__ import annotations

import math
import shutil

import numpy as np
import pytest
import torch

from tasks import TaskError, build_task, default_data_dir

GPT2_FILES = ("vocab.json", "merges.txt")


def _need_tokenizer():
    folder = default_data_dir() / "gpt2"
    if not all((folder / f).exists() for f in GPT2_FILES):
        pytest.skip(f"GPT-2 tokenizer files not in {folder}")
    return folder


@pytest.fixture
def tiny_dir(tmp_path, monkeypatch):
    src = _need_tokenizer()
    monkeypatch.setenv("MPCBENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("MPCBENCH_OFFLINE", "1")
    data = tmp_path / "data"
    (data / "gpt2").mkdir(parents=True)
    for f in GPT2_FILES:
        shutil.copy(src / f, data / "gpt2" / f)
    (data / "wikitext2").mkdir()
    for split, n in (("train", 200), ("valid", 40), ("test", 40)):
        lines = [f" = Heading {split} = \n"] + [f" The {split} river number {i} flows @-@ north . \n" for i in range(n)]
        (data / "wikitext2" / f"{split}.txt").write_text("".join(lines), encoding="utf-8")
    return data


def test_tiny_corpus_tokenized_and_windowed(tiny_dir):
    task = build_task("wikitext2", tier="smoke", data_dir=tiny_dir)
    toks = task.tokens
    assert {"train", "valid", "test"} == set(toks) and all(t.dtype == np.int32 for t in toks.values())
    assert toks["train"].max() < 50_257 and len(toks["train"]) > len(toks["valid"])
    T = task.block_size
    b = next(iter(task.train_batches()))
    assert b.inputs.shape == (task.budget.batch_size, T)
    off = int(b.sample_ids[0])
    assert b.inputs[0].tolist() == toks["train"][off : off + T].tolist()
    assert b.targets[0].tolist() == toks["train"][off + 1 : off + T + 1].tolist()  # shifted by one
    evals = list(task.eval_batches())
    assert all(int(e.sample_ids.min()) >= len(toks["train"]) for e in evals)  # never a training offset


@pytest.mark.parametrize("n_stages", [2, 3, 4])
def test_split_equals_hf_gpt2(tiny_dir, n_stages):
    task = build_task("wikitext2", tier="smoke", data_dir=tiny_dir)
    model = task.build_model().eval()
    assert model.hf.lm_head.weight is not model.hf.transformer.wte.weight  # untied (docstring)
    stages = [s.eval() for s in task.build_stages(n_stages)]
    assert sum(len(s.h) for s in stages) == task.budget.extra["n_layer"]
    batch = next(iter(task.eval_batches()))
    with torch.no_grad():
        x = batch.inputs
        for s in stages:
            x = s(x, batch.inputs)
        torch.testing.assert_close(x, model(batch.inputs), rtol=0, atol=1e-5)
    stats = task.metric_sums(x, batch.targets)
    values = task.metric_values(stats)
    assert values["perplexity"] == pytest.approx(math.exp(values["val_loss"]))
    assert 9.0 < values["val_loss"] < 12.0  # untrained: near uniform over 50,257 tokens (10.82)


def test_stage_count_above_the_blocks_is_refused(tiny_dir):
    task = build_task("wikitext2", tier="smoke", data_dir=tiny_dir)
    with pytest.raises(TaskError, match="5"):
        task.build_stages(5)


def test_gpu_and_full_tiers_are_gpt2_small():
    task = build_task("wikitext2", tier="full")
    cfg = task.config()
    assert (cfg.n_layer, cfg.n_head, cfg.n_embd, cfg.n_positions, cfg.vocab_size) == (12, 12, 768, 1024, 50_257)
    assert build_task("wikitext2", tier="gpu").config().n_embd == 768
    assert task.budget.extra["eval_split"] == "test"  # the test split only in the full tier


@pytest.mark.data
def test_real_splits():
    _need_tokenizer()
    if not (default_data_dir() / "wikitext2" / "train.txt").exists():
        pytest.skip("WikiText-2 not in the data dir")
    from tasks.wikitext2 import gpt2_tokenizer, load_tokens

    assert gpt2_tokenizer(default_data_dir())("Hello world")["input_ids"] == [15496, 995]
    toks = load_tokens(default_data_dir())
    assert [len(toks[s]) for s in ("train", "valid", "test")] == [2_448_382, 258_659, 295_877]
    assert toks["train"][:4].tolist() == [220, 198, 796, 569]  # " \n = Valkyria"
