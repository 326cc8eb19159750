"""GLUE CoLA, MRPC, RTE, STS-B: loaders on tiny made-up copies of the official files and on the
real ones (marked ``data``), the official metrics against scipy, the pair encoding, and the split
model equal to the unsplit Hugging Face forward."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from _taskdata import require_data

from tasks import build_task
from tasks.glue import confusion, f1_accuracy, matthews, pearson, segment_ids, spearman

# Tiny copies in each official layout (CoLA: no header; MRPC: BOM + header; RTE / STS-B: header)
TINY = {
    "cola": (
        "",
        lambda i: f"gj04\t{i % 2}\t{'' if i % 2 else '*'}\tThe cat number {i} sat on the mat .",
    ),
    "mrpc": (
        "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n",
        lambda i: f"{i % 2}\t{100 + i}\t{200 + i}\tThe firm said {i} shares rose .\tShares rose {i} , the firm said .",
    ),
    "rte": (
        "index\tsentence1\tsentence2\tlabel\n",
        lambda i: f"{i}\tA dog runs in park {i} .\tAn animal moves .\t{'entailment' if i % 2 else 'not_entailment'}",
    ),
    "stsb": (
        "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n",
        lambda i: (
            f"{i}\tmain-captions\tMSRvid\t2012test\t{i:04d}\tnone\tnone\tA man plays {i} .\tA man plays a flute .\t{i % 6}.000"
        ),
    ),
}
GLUE = sorted(TINY)
REAL_ROWS = {"cola": (8551, 1043), "mrpc": (3668, 408), "rte": (2490, 277), "stsb": (5749, 1500)}


@pytest.fixture
def tiny_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("MPCBENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("MPCBENCH_OFFLINE", "1")
    for name, (header, row) in TINY.items():
        folder = tmp_path / "data" / name
        folder.mkdir(parents=True)
        for split, n in (("train", 12), ("dev", 6)):
            (folder / f"{split}.tsv").write_text(header + "\n".join(row(i) for i in range(n)) + "\n", encoding="utf-8")
    return tmp_path / "data"


@pytest.mark.parametrize("name", GLUE)
def test_tiny_copy_loads_and_trains_a_step(name, tiny_dir):
    require_data(name)  # the encoder
    task = build_task(name, tier="smoke", data_dir=tiny_dir)
    d = task.data
    assert d["train_ids"].shape[0] == 12 and d["dev_ids"].shape[0] == 6
    if name == "stsb":
        assert d["train_y"].dtype == np.float32 and d["train_y"][:6].tolist() == [0, 1, 2, 3, 4, 5]
    else:  # RTE numbers entailment 0
        want = [1 - i % 2 for i in range(12)] if name == "rte" else [i % 2 for i in range(12)]
        assert d["train_y"].tolist() == want
    ids = torch.from_numpy(d["train_ids"][:1].astype(np.int64))
    if task.pair:  # [CLS] a [SEP] b [SEP]
        assert int((ids == task.sep_id).sum()) == 2
    stages = task.build_stages(3)
    batch = next(iter(task.train_batches()))
    x = batch.inputs
    for s in stages:
        x = s(x, batch.inputs)
    loss = task.loss(x, batch.targets)
    loss.backward()
    assert torch.isfinite(loss)
    stats = [0.0] * task.metric_stats_size()
    with torch.no_grad():
        for b in task.eval_batches():
            y = b.inputs
            for s in stages:
                y = s(y, b.inputs)
            stats = [a + v for a, v in zip(stats, task.metric_sums(y, b.targets), strict=True)]
    values = task.metric_values(stats)
    assert next(iter(values)) == task.metric.name and all(math.isfinite(v) for v in values.values())


@pytest.mark.parametrize("name", GLUE)
def test_split_equals_unsplit_model(name, tiny_dir):
    require_data(name)
    task = build_task(name, tier="full", data_dir=tiny_dir)  # all six layers
    model = task.build_model().eval()
    ids = torch.from_numpy(task.data["dev_ids"][:3, :40].astype(np.int64))
    for n in task.stage_choices:
        stages = task.build_stages(n)
        x = ids
        with torch.no_grad():
            for s in stages:
                x = s.eval()(x, ids)
            torch.testing.assert_close(x, model(ids), rtol=0, atol=1e-5)
    assert x.shape == (3, task.n_outputs)


def test_segment_ids_follow_the_first_separator():
    ids = torch.tensor([[101, 7, 8, 102, 9, 102, 0, 0]])
    assert segment_ids(ids, 102).tolist() == [[0, 0, 0, 0, 1, 1, 1, 1]]


def test_official_metrics_match_scipy():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(0)
    gold = rng.integers(0, 2, 200)
    pred = np.where(rng.random(200) < 0.7, gold, 1 - gold)
    tp, fp, fn, tn = confusion(torch.from_numpy(pred), torch.from_numpy(gold))
    f1, acc = f1_accuracy(tp, fp, fn, tn)
    # Matthews correlation of binary labels is their Pearson correlation (phi coefficient)
    assert matthews(tp, fp, fn, tn) == pytest.approx(stats.pearsonr(pred, gold)[0], abs=1e-12)
    p, r = tp / (tp + fp), tp / (tp + fn)
    assert f1 == pytest.approx(2 * p * r / (p + r)) and acc == pytest.approx((pred == gold).mean())
    assert matthews(*confusion(torch.ones(10), torch.from_numpy(gold[:10]))) == 0.0  # a constant predictor
    x, y = rng.normal(size=300), rng.integers(0, 6, 300).astype(float)  # ties in y, as STS-B's scores have
    assert pearson(x, y) == pytest.approx(stats.pearsonr(x, y)[0], abs=1e-12)
    assert spearman(x, y) == pytest.approx(stats.spearmanr(x, y)[0], abs=1e-12)


def test_stsb_statistics_add_over_batches_and_replicas(tiny_dir):
    """Spearman from per-batch vectors summed in any grouping equals it on all predictions at once."""
    require_data("stsb")
    task = build_task("stsb", tier="smoke", data_dir=tiny_dir)
    batches = list(task.eval_batches())
    outs = [torch.linspace(0, 1, len(b)).unsqueeze(-1) + b.targets[:, :1] * 0.1 for b in batches]
    total = np.sum([task.metric_sums(o, b.targets) for o, b in zip(outs, batches)], axis=0)
    pred = torch.cat(outs).squeeze(-1).numpy()
    gold = torch.cat([b.targets[:, 0] for b in batches]).numpy()
    values = task.metric_values(total.tolist())
    assert values == pytest.approx({"pearson": pearson(pred, gold), "spearman": spearman(pred, gold)})


@pytest.mark.data
@pytest.mark.parametrize("name", GLUE)
def test_real_files(name):
    require_data(name)
    task = build_task(name, tier="quick")
    d = task.data
    n_train, n_dev = REAL_ROWS[name]
    assert d["train_ids"].shape[0] == n_train and d["dev_ids"].shape[0] == n_dev
    if name == "stsb":
        assert 0.0 <= d["dev_y"].min() and d["dev_y"].max() <= 5.0
    else:
        assert set(d["dev_y"].tolist()) == {0, 1}
    width = d["train_ids"].shape[1]
    assert ((d["train_ids"] != task.pad_id).sum(1) == width).mean() < 0.15  # few pairs truncated
