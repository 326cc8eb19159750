"""Character-level language modelling on Tiny Shakespeare: pretrain a GPT decoder from scratch.

Model: :mod:`tasks.gpt`, nanoGPT's ``shakespeare-char`` size in the full tier (6 layers, 6
heads, d=384, context 256, dropout 0.2), smaller in smoke / quick (``extra``). No weight
tying between the token embedding and the LM head (they live on different stages).

Stages: the blocks divided as evenly as possible, earlier stages taking the remainder; the
token + position embedding is in stage 0, the final LayerNorm + LM head in the last stage.
Every boundary carries the residual stream (B, T, d). 6 blocks in 4 stages: [emb + 2] |
[2] | [1] | [1 + head]; in 2 stages: [emb + 3] | [3 + head].

Model feature ``residual_subspace`` (for the ``subspace`` compressor): built with it
enabled, the model keeps its residual stream in ``token_term(ids) + span(basis)``, see
:mod:`tasks.gpt`; ``model_features`` returns the :class:`~tasks.gpt.ResidualSubspace`
(``.basis`` (d, k), ``.token_term(ids)``). The rank is ``extra["subspace_rank"]`` = d / 8.

Training: AdamW (betas 0.9 / 0.99, weight decay 0.1 on matrices only), linear warm-up then
cosine decay to lr / 10 (nanoGPT's shakespeare-char recipe). Metric: validation loss (mean
cross-entropy per character, nats; lower is better).

Data: ``tinyshakespeare/input.txt`` in the data dir (downloaded there from nanoGPT's source
when missing and online); the vocabulary is the sorted set of its
characters (65); the first 90% of the text trains, the last 10% validates. A training
sample is the window ``text[o : o + T + 1]`` (inputs = first T, targets = shifted by one),
and its sample id is the start offset ``o``, so AQ-SGD's per-sample buffers are per window.
The full tier draws from every offset; smoke / quick draw from a fixed pool of
``train_samples`` offsets (the same for every seed), so every window is seen several times.
Validation uses non-overlapping windows of the validation text (ids = their offsets in the
whole text, all >= the training text's length).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .api import Batch, Task, TaskError, TierBudget
from .data import SampleOrder, fetch, fixed_subset, require
from .gpt import GPT, GPT_SIZES, GPTConfig, split_gpt
from .schedules import warmup_cosine

__all__ = ["Shakespeare", "TASK", "load_text"]

URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"


def load_text(data_dir: Path) -> tuple[np.ndarray, list[str]]:
    """The corpus as int64 character ids (N,) and the vocabulary (sorted characters)."""
    path = data_dir / "tinyshakespeare" / "input.txt"
    require(path, f"download it from {URL} (nanoGPT's shakespeare_char data)", lambda: fetch(URL, path))
    text = path.read_text(encoding="utf-8")
    codepoints = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    vocab, ids = np.unique(codepoints, return_inverse=True)  # sorted characters, id per character
    return ids.astype(np.int64), [chr(c) for c in vocab]


DESCRIPTION = {
    "name": "shakespeare",
    "family": "language modelling (pretraining)",
    "metric": "val_loss",
    "higher_is_better": False,
    "unit": "nats/char",
    "chance": 4.17,
    "chance_note": "uniform over the 65 characters; the character frequencies alone score 3.35",
    "trivial": 3.35,
    "trivial_note": "the training split's character frequencies (a unigram model), the best predictor that ignores context",
    "targets": {"smoke": 3.5, "quick": 2.35, "plateau": 2.25, "full": 1.55, "gpu": 1.7},
    "page": "Tiny Shakespeare character-level language modelling: a GPT decoder (nanoGPT's shakespeare-char in the full tier) pretrained from scratch. Metric: validation loss in nats (lower is better).",
    "cpu_note": "at 10% sparsity every sparsifier ends near the loss of predicting character frequencies (3.35 nats), so this task ranks sparsifiers only as 'collapsed'.",
}


class Shakespeare(Task):
    """Language modelling: a character-level GPT decoder trained from scratch on Tiny Shakespeare.

    Boundaries carry the residual stream (B, T, d); smoke / quick use a smaller GPT. Metric:
    validation loss (cross-entropy per character in nats, lower is better; uniform over the
    65 characters is 4.17).
    """

    description = DESCRIPTION
    default_stages = 4
    stage_choices = (1, 2, 3, 4)
    features = frozenset({"residual_subspace"})
    # the GPT family's named sizes (tasks.gpt.GPT_SIZES), each with its residual subspace at d / 8
    model_sizes = {name: {**size, "subspace_rank": size["n_embd"] // 8} for name, size in GPT_SIZES.items()}
    tiers = {
        "smoke": TierBudget(
            steps=4,
            batch_size=8,
            microbatches=2,
            eval_every=2,
            lr=3e-3,
            eval_samples=16,
            train_samples=64,
            warmup_steps=0,
            extra={"n_layer": 4, "n_head": 2, "n_embd": 32, "block_size": 32, "dropout": 0.0, "subspace_rank": 4},
        ),
        # calibrated on the 2-core CPU (docs/tasks.md): nanoGPT's "baby GPT" for CPUs, 2048 windows
        # of 64 chars seen ~4.7 times, 256 validation windows; the loss still falls at 150 steps, so 300
        "quick": TierBudget(
            steps=300,
            batch_size=32,
            microbatches=4,
            eval_every=60,
            lr=3e-3,
            eval_samples=256,
            train_samples=2048,
            warmup_steps=20,
            extra={"n_layer": 4, "n_head": 4, "n_embd": 128, "block_size": 64, "dropout": 0.0, "subspace_rank": 16},
        ),
        # the quick tier's baby GPT trained until its validation loss flattens on the 2048-window
        # pool (~12.5 visits). Measured on seeds 0-1: at 600 steps the last quarter still gained
        # 0.032 nats; at 1200 the loss bottomed out near step 800 (1.96) and rose 0.12 by the end
        # (the pool is memorized); docs/reproductions.md, "The plateau tier"
        "plateau": TierBudget(
            steps=800,
            batch_size=32,
            microbatches=4,
            eval_every=80,
            lr=3e-3,
            eval_samples=256,
            train_samples=2048,
            warmup_steps=20,
            extra={"n_layer": 4, "n_head": 4, "n_embd": 128, "block_size": 64, "dropout": 0.0, "subspace_rank": 16},
        ),
        # nanoGPT's config/train_shakespeare_char.py: 5000 iters at batch 64 x 256 chars
        "full": TierBudget(
            steps=5_000,
            batch_size=64,
            microbatches=4,
            eval_every=250,
            lr=1e-3,
            eval_samples=None,
            train_samples=None,
            warmup_steps=100,
            extra={"n_layer": 6, "n_head": 6, "n_embd": 384, "block_size": 256, "dropout": 0.2, "subspace_rank": 48},
        ),
        # one GPU, fast: the full tier's model for 2000 steps, bf16 autocast. Target not yet
        # calibrated on a GPU (docs/performance.md).
        "gpu": TierBudget(
            steps=2_000,
            batch_size=64,
            microbatches=4,
            eval_every=250,
            lr=1e-3,
            eval_samples=None,
            train_samples=None,
            warmup_steps=100,
            precision="bf16",
            extra={"n_layer": 6, "n_head": 6, "n_embd": 384, "block_size": 256, "dropout": 0.2, "subspace_rank": 48},
        ),
    }

    def __init__(self, tier="smoke", seed=0, data_dir=None, features=frozenset(), model_size=None) -> None:
        super().__init__(tier, seed, data_dir, features, model_size)
        self._text: tuple[np.ndarray, list[str]] | None = None

    @property
    def text(self) -> np.ndarray:
        if self._text is None:
            self._text = load_text(self.data_dir)
        return self._text[0]

    @property
    def vocab(self) -> list[str]:
        self.text  # noqa: B018 (loads)
        return self._text[1]

    @property
    def n_train(self) -> int:
        return int(0.9 * len(self.text))

    @property
    def block_size(self) -> int:
        return int(self.budget.extra["block_size"])

    # model
    def config(self) -> GPTConfig:
        e = self.budget.extra
        return GPTConfig(
            vocab_size=len(self.vocab),
            block_size=self.block_size,
            n_layer=e["n_layer"],
            n_head=e["n_head"],
            n_embd=e["n_embd"],
            dropout=e["dropout"],
            subspace_rank=self.subspace_rank() if "residual_subspace" in self.enabled_features else None,
            subspace_seed=self.seed,
        )

    def subspace_rank(self) -> int:
        """k of the residual subspace: ``round(ratio * d)`` (at least 1) when the ``subspace``
        compressor gives a ratio (``subspace(ratio=0.01)``: ~100x), else the tier's d / 8."""
        ratio = self.feature_options.get("residual_subspace", {}).get("ratio")
        d = int(self.budget.extra["n_embd"])
        if ratio is None:
            return int(self.budget.extra["subspace_rank"])
        return max(1, min(d, int(ratio * d + 0.5)))

    def build_model(self) -> GPT:
        """The unsplit model (``build_stages`` cuts exactly this one)."""
        torch.manual_seed(self.seed)
        return GPT(self.config())

    def build_stages(self, n_stages: int) -> list[nn.Module]:
        if n_stages not in self.stage_choices:
            raise TaskError(
                f"task 'shakespeare' cannot be split into {n_stages} stages; valid: {', '.join(map(str, self.stage_choices))}"
            )
        return split_gpt(self.build_model(), n_stages)

    def model_features(self, stages: list[nn.Module]) -> dict:
        if "residual_subspace" not in self.enabled_features:
            return {}
        return {"residual_subspace": stages[0].subspace}

    def loss(self, output: Tensor, targets: Tensor) -> Tensor:
        return F.cross_entropy(output.flatten(0, 1), targets.flatten())

    def metric_sums(self, output: Tensor, targets: Tensor) -> tuple[float, float]:
        total = F.cross_entropy(output.flatten(0, 1).float(), targets.flatten(), reduction="sum")
        return float(total), float(targets.numel())

    # optimization
    def make_optimizer(self, params: list[nn.Parameter]) -> torch.optim.Optimizer:
        decay = [p for p in params if p.ndim >= 2]  # matrices and embeddings; not LayerNorm gains
        no_decay = [p for p in params if p.ndim < 2]
        groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
        return torch.optim.AdamW([g for g in groups if g["params"]], lr=self.budget.lr, betas=(0.9, 0.99))

    def make_scheduler(self, optimizer):
        return warmup_cosine(optimizer, self.budget.steps, self.budget.warmup_steps, final_frac=0.1)

    # data
    def _windows(self, offsets: Tensor) -> tuple[Tensor, Tensor]:
        """Offsets (B,) -> inputs (B, T) and next-character targets (B, T)."""
        idx = offsets[:, None].numpy() + np.arange(self.block_size + 1)  # (B, T+1)
        chunk = torch.from_numpy(self.text[idx])
        return chunk[:, :-1], chunk[:, 1:]

    def train_batches(self, dp_rank: int = 0, dp_size: int = 1) -> Iterator[Batch]:
        b = self.budget
        n_offsets = self.n_train - self.block_size  # windows (T+1 chars) inside the training text
        order = SampleOrder(fixed_subset(n_offsets, b.train_samples), b.batch_size, self.seed)
        for step in range(b.steps):
            offsets = order.indices(step, dp_rank, dp_size)
            inputs, targets = self._windows(offsets)
            yield Batch(inputs, targets, offsets)

    def eval_batches(self) -> Iterator[Batch]:
        b = self.budget
        T = self.block_size
        n_windows = (len(self.text) - self.n_train - 1) // T  # non-overlapping validation windows
        pick = fixed_subset(n_windows, b.eval_samples, salt=1)
        pick = pick[: len(pick) - len(pick) % b.microbatches]  # every eval batch splits into M
        offsets = self.n_train + pick * T
        size = int(b.extra.get("eval_batch_size", b.batch_size))
        for c in offsets.split(size):
            yield Batch(*self._windows(c), c)


TASK = Shakespeare

if __name__ == "__main__":
    from .standalone import main

    raise SystemExit(main(Shakespeare))
