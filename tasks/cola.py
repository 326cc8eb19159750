"""GLUE CoLA grammatical acceptability: fine-tune the pretrained MiniLM encoder, split into stages.

Single sentences, 2 classes (1 = acceptable). Metric: Matthews correlation on the GLUE dev set
(1,043 sentences), GLUE's official CoLA metric; chance (and any constant predictor) is 0.
Pipeline, head, optimizer and caching as in :mod:`tasks.glue` / :mod:`tasks.sst2`.
Data: ``cola/train.tsv`` (8,551) and ``cola/dev.tsv``, GLUE's files: no header, columns
``source<TAB>label<TAB>original mark<TAB>sentence``.
"""

from __future__ import annotations

from pathlib import Path

from .api import TierBudget
from .glue import GlueRows, GlueTask, check_binary, matthews, read_tsv

__all__ = ["Cola", "TASK"]


DESCRIPTION = {
    "name": "cola",
    "family": "GLUE fine-tuning",
    "metric": "matthews_corr",
    "higher_is_better": True,
    "metrics": ["matthews_corr"],
    "metric_range": [-1.0, 1.0],
    "chance": 0.0,
    "chance_note": "any constant predictor",
    "trivial": 0.0,
    "trivial_note": "any constant predictor (Matthews correlation 0)",
    "targets": {"smoke": 0.05, "quick": 0.1, "full": 0.35, "gpu": 0.3},
    "page": "GLUE CoLA grammatical acceptability: the pretrained MiniLM encoder fine-tuned on single sentences, split into stages as for sst2. Metric: Matthews correlation on the dev set (GLUE's official CoLA metric).",
    "cpu_note": "not in the quick tier. With the first 3 MiniLM layers and 128 steps of 16 sentences, the uncompressed run stays at the constant predictor (Matthews correlation -0.021 and 0.000 on seeds 0 and 1, at every evaluation from step 32 to 128; measured 2026-11-25), so no compressor can be told apart from it. Rank compressors on CoLA in the gpu or full tier.",
}


class Cola(GlueTask):
    """GLUE CoLA: acceptability of single sentences, Matthews correlation (chance 0)."""

    description = DESCRIPTION
    glue_dir = "cola"
    glue_archive = "CoLA"
    pair = False
    tiers = {
        "smoke": TierBudget(
            steps=3, batch_size=8, microbatches=2, eval_every=3, lr=1e-4,
            eval_samples=32, train_samples=64, extra={"max_len": 32, "n_layers": 3},
        ),
        "quick": TierBudget(
            steps=128, batch_size=16, microbatches=4, eval_every=32, lr=1e-4,
            eval_samples=None, train_samples=2048, warmup_steps=12, extra={"max_len": 32, "n_layers": 3},
        ),
        # BERT's GLUE recipe: 3 epochs at batch 32
        "full": TierBudget(
            steps=802, batch_size=32, microbatches=4, eval_every=100, lr=5e-5,
            warmup_steps=80, extra={"max_len": 64},
        ),
        "gpu": TierBudget(
            steps=402, batch_size=64, microbatches=4, eval_every=134, lr=1e-4,
            warmup_steps=40, precision="bf16", extra={"max_len": 64, "eval_batch_size": 512},
        ),
    }  # fmt: skip

    @classmethod
    def read(cls, path: Path) -> GlueRows:
        rows = read_tsv(path, header=False)
        return [r[3].strip() for r in rows], None, check_binary([int(r[1]) for r in rows], path)

    def metric_values(self, sums):
        return {self.metric.name: matthews(*sums)}


TASK = Cola

if __name__ == "__main__":
    from .standalone import main

    raise SystemExit(main(Cola))
