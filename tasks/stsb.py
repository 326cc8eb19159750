"""GLUE STS-B semantic similarity: fine-tune the pretrained MiniLM encoder as a regressor, split into stages.

Pairs ``[CLS] a [SEP] b [SEP]``; the head has one output, trained with mean squared error on the
gold 0-5 similarity score. Metrics: Pearson (ranked and targeted) and Spearman correlation of the
predictions with the gold scores on the dev set (1,500 pairs), GLUE's official STS-B pair; a
constant predictor scores 0. Pipeline as in :mod:`tasks.glue`.

Targets are (B, 2): the gold score and the pair's position (in the training pool, or in the
evaluation subset), because Spearman ranks all dev predictions together: ``metric_sums`` puts
each prediction and gold score at its position in a vector of twice the dev-subset size, which
adds over batches and replicas like any other statistic.

Data: ``stsb/train.tsv`` (5,749) and ``stsb/dev.tsv``, 10 columns with header, the score last.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from .api import DataMissingError, TierBudget
from .glue import GlueRows, GlueTask, pearson, read_tsv, spearman

__all__ = ["Stsb", "TASK"]


DESCRIPTION = {
    "name": "stsb",
    "family": "GLUE fine-tuning",
    "metric": "pearson",
    "higher_is_better": True,
    "metrics": ["pearson", "spearman"],
    "metric_range": [-1.0, 1.0],
    "chance": 0.0,
    "chance_note": "any constant predictor",
    "trivial": 0.0,
    "trivial_note": "any constant predictor (Pearson correlation undefined, counted as 0)",
    "targets": {"smoke": 0.1, "quick": 0.22, "plateau": 0.22, "full": 0.85, "gpu": 0.84},
    # quick was 0.5, never met by the uncompressed run; 0.22 is met by each committed seed (at
    # step 16: 0.287 / 0.224 / 0.278) and beats a constant predictor by the tier's MDD (0.216).
    # plateau was 0.3, set from seed 0 alone (0.306); seed 1 ends at 0.249 (peak 0.255). 0.22 is
    # met by seeds 0-2 by step 48 (0.280 / 0.236 / 0.261), leaves room below the lowest seed, and
    # beats a constant predictor by more than the tier's MDD (0.081 at sd 0.036)
    "superseded_targets": {"quick": [0.5], "plateau": [0.3]},
    "page": "GLUE STS-B semantic similarity: the pretrained MiniLM encoder fine-tuned as a regressor on sentence pairs (mean squared error on the 0-5 score), split into stages as for sst2. Metrics: Pearson and Spearman correlation on the dev set (GLUE's official STS-B pair; Pearson is ranked).",
    "cpu_note": "not in the quick tier. At 64 steps of 16 pairs the uncompressed run peaks at step 16 (Pearson 0.22-0.29), then falls and ends at 0.182 / 0.023 / 0.193 on seeds 0-2 (sd 0.095; measured 2026-11-25): a minimal detectable difference of about 0.2 for 3 vs 3 seeds, larger than the effects to resolve (topk 0.126 and fp8 0.181 at seed 0 are inside it). Rank compressors on STS-B in the gpu or full tier.",
}


class Stsb(GlueTask):
    """GLUE STS-B: similarity regression on pairs, Pearson and Spearman correlation (constant: 0)."""

    description = DESCRIPTION
    glue_dir = "stsb"
    glue_archive = "STS-B"
    n_outputs = 1
    tiers = {
        "smoke": TierBudget(
            steps=3, batch_size=8, microbatches=2, eval_every=3, lr=1e-4,
            eval_samples=32, train_samples=64, extra={"max_len": 64, "n_layers": 3},
        ),
        "quick": TierBudget(
            steps=64, batch_size=16, microbatches=4, eval_every=16, lr=1e-4,
            eval_samples=750, train_samples=1024, warmup_steps=6, extra={"max_len": 64, "n_layers": 3},
        ),
        # plateau (docs/reproductions.md): the quick tier's 3 layers at a third of its peak rate
        # (quick's 1e-4 peaks at step 16 and falls), the 1024-pair pool seen 1.5 times
        "plateau": TierBudget(
            steps=96, batch_size=16, microbatches=4, eval_every=24, lr=3e-5,
            eval_samples=750, train_samples=1024, warmup_steps=10, extra={"max_len": 64, "n_layers": 3},
        ),
        "full": TierBudget(
            steps=540, batch_size=32, microbatches=4, eval_every=60, lr=5e-5,
            warmup_steps=54, extra={"max_len": 128},
        ),
        "gpu": TierBudget(
            steps=450, batch_size=64, microbatches=4, eval_every=90, lr=1e-4,
            warmup_steps=45, precision="bf16", extra={"max_len": 128, "eval_batch_size": 512},
        ),
    }  # fmt: skip

    @classmethod
    def read(cls, path: Path) -> GlueRows:
        rows = read_tsv(path)
        try:
            y = np.asarray([float(r[9]) for r in rows], dtype=np.float32)
        except (IndexError, ValueError):
            raise DataMissingError(f"{path}: expected STS-B's 10 tab-separated columns with the score last") from None
        return [r[7] for r in rows], [r[8] for r in rows], y

    def targets(self, y: np.ndarray, rows: np.ndarray, positions: np.ndarray) -> Tensor:
        return torch.from_numpy(np.stack([np.asarray(y[rows], np.float32), positions.astype(np.float32)], 1))

    def loss(self, output: Tensor, targets: Tensor) -> Tensor:
        return F.mse_loss(output.squeeze(-1).float(), targets[:, 0])

    def metric_stats_size(self) -> int:
        return 3 * len(self.eval_rows())  # predictions, gold scores, and which positions were seen

    def metric_sums(self, output: Tensor, targets: Tensor) -> tuple[float, ...]:
        n = len(self.eval_rows())
        out = np.zeros(3 * n)
        pos = targets[:, 1].long().cpu().numpy()
        out[pos] = output.squeeze(-1).float().cpu().numpy()
        out[n + pos] = targets[:, 0].cpu().numpy()
        out[2 * n + pos] = 1.0
        return tuple(out.tolist())

    def metric_values(self, sums):
        n = len(sums) // 3
        s = np.asarray(sums, dtype=np.float64)
        seen = s[2 * n :] > 0
        pred, gold = s[:n][seen], s[n : 2 * n][seen]
        return {self.metric.name: pearson(pred, gold), "spearman": spearman(pred, gold)}


TASK = Stsb

if __name__ == "__main__":
    from .standalone import main

    raise SystemExit(main(Stsb))
