"""GLUE RTE textual entailment: fine-tune the pretrained MiniLM encoder on sentence pairs, split into stages.

Pairs ``[CLS] premise [SEP] hypothesis [SEP]``, 2 classes (0 = entailment, 1 = not_entailment,
as GLUE's processors number them). Metric: accuracy on the GLUE dev set (277 pairs), GLUE's
official RTE metric; the majority class is 0.527 of dev. Pipeline as in :mod:`tasks.glue`.
Data: ``rte/train.tsv`` (2,490) and ``rte/dev.tsv``, header ``index sentence1 sentence2 label``.
"""

from __future__ import annotations

from pathlib import Path

from .api import DataMissingError, TierBudget
from .glue import GlueRows, GlueTask, read_tsv

__all__ = ["Rte", "TASK"]

LABELS = {"entailment": 0, "not_entailment": 1}


DESCRIPTION = {
    "name": "rte",
    "family": "GLUE fine-tuning",
    "metric": "accuracy",
    "higher_is_better": True,
    "metrics": ["accuracy"],
    "metric_range": [0.0, 1.0],
    "chance": 0.527,
    "chance_note": "the majority class of the dev set",
    "trivial": 0.527,
    "trivial_note": "predicting the majority class of the dev set",
    "targets": {"smoke": 0.55, "quick": 0.55, "full": 0.6, "gpu": 0.6},
    "page": "GLUE RTE textual entailment: the pretrained MiniLM encoder fine-tuned on sentence pairs, split into stages as for sst2. Metric: dev accuracy (GLUE's official RTE metric).",
    "cpu_note": "not in the quick tier: with the first 3 MiniLM layers and 64 steps the uncompressed run ends at 0.563 / 0.556 accuracy (seeds 0, 1; measured 2026-11-26), 3-4 points above the majority class (0.527) and inside the 3-point binomial sd of the 277 dev pairs, so no compressor can be told apart from it on this budget (each cell also costs twice sst2's CPU: its pairs need 128 tokens). Rank compressors on RTE in the gpu or full tier.",
}


class Rte(GlueTask):
    """GLUE RTE: entailment of sentence pairs, accuracy (majority class 0.53)."""

    description = DESCRIPTION
    glue_dir = "rte"
    glue_archive = "RTE"
    tiers = {
        "smoke": TierBudget(
            steps=3, batch_size=8, microbatches=2, eval_every=3, lr=1e-4,
            eval_samples=32, train_samples=64, extra={"max_len": 128, "n_layers": 3},
        ),
        "quick": TierBudget(
            steps=64, batch_size=16, microbatches=4, eval_every=16, lr=1e-4,
            eval_samples=None, train_samples=1024, warmup_steps=6, extra={"max_len": 128, "n_layers": 3},
        ),
        "full": TierBudget(
            steps=234, batch_size=32, microbatches=4, eval_every=26, lr=5e-5,
            warmup_steps=24, extra={"max_len": 128},
        ),
        "gpu": TierBudget(
            steps=195, batch_size=64, microbatches=4, eval_every=39, lr=1e-4,
            warmup_steps=20, precision="bf16", extra={"max_len": 128, "eval_batch_size": 512},
        ),
    }  # fmt: skip

    @classmethod
    def read(cls, path: Path) -> GlueRows:
        rows = read_tsv(path)
        try:
            y = [LABELS[r[3].strip()] for r in rows]
        except (KeyError, IndexError):
            raise DataMissingError(
                f"{path}: expected 'index sentence1 sentence2 label' rows with labels {list(LABELS)}"
            ) from None
        import numpy as np

        return [r[1] for r in rows], [r[2] for r in rows], np.asarray(y, dtype=np.int64)

    def metric_stats_size(self) -> int:
        return 2

    def metric_sums(self, output, targets):  # (correct, count): the default mean
        return float((output.argmax(-1) == targets).sum()), float(targets.numel())


TASK = Rte

if __name__ == "__main__":
    from .standalone import main

    raise SystemExit(main(Rte))
