"""GLUE MRPC paraphrase detection: fine-tune the pretrained MiniLM encoder on sentence pairs, split into stages.

Pairs ``[CLS] a [SEP] b [SEP]``, 2 classes (1 = paraphrase). Metrics: F1 of the paraphrase class
(ranked and targeted) and accuracy, GLUE's official MRPC pair, on the dev set (408 pairs). Note
the floor: predicting "paraphrase" for every pair already scores F1 0.812 (accuracy 0.684), so
F1 above that is what learning shows. Pipeline as in :mod:`tasks.glue`.

Data: ``mrpc/train.tsv`` (3,668) and ``mrpc/dev.tsv``, header ``Quality #1 ID #2 ID #1 String
#2 String`` (with a UTF-8 BOM). Without them and online, they are built the way GLUE's
``download_glue_data.py`` builds them: Microsoft's ``msr_paraphrase_train.txt`` split by GLUE's
list of dev pair ids.
"""

from __future__ import annotations

from pathlib import Path

from .api import TierBudget
from .data import fetch
from .glue import GlueRows, GlueTask, check_binary, f1_accuracy, read_tsv

__all__ = ["Mrpc", "TASK"]

MSR_TRAIN = "https://dl.fbaipublicfiles.com/senteval/senteval_data/msr_paraphrase_train.txt"
DEV_IDS = (
    "https://firebasestorage.googleapis.com/v0/b/mtl-sentence-representations.appspot.com/o/"
    "data%2Fmrpc_dev_ids.tsv?alt=media&token=ec5c0836-31d5-48f4-b431-7480817f1adc"
)


DESCRIPTION = {
    "name": "mrpc",
    "family": "GLUE fine-tuning",
    "metric": "f1",
    "higher_is_better": True,
    "metrics": ["f1", "accuracy"],
    "metric_range": [0.0, 1.0],
    "chance": 0.812,
    "chance_note": "predicting 'paraphrase' for every pair (accuracy 0.684)",
    "trivial": 0.812,
    "trivial_note": "predicting 'paraphrase' for every dev pair (F1 of the majority class)",
    "targets": {"smoke": 0.7, "quick": 0.82, "full": 0.86, "gpu": 0.85},
    "page": "GLUE MRPC paraphrase detection: the pretrained MiniLM encoder fine-tuned on sentence pairs, split into stages as for sst2. Metrics: F1 of the paraphrase class and accuracy on the dev set (GLUE's official MRPC pair; F1 is ranked).",
    "cpu_note": "not in the quick tier. With the first 3 MiniLM layers and 64 steps of 16 pairs the uncompressed run stays at the all-paraphrase predictor (F1 0.815 / 0.818 / 0.816 at steps 32 / 48 / 64 on seed 0, against 0.812 for predicting paraphrase everywhere; measured 2026-11-25), so no compressor can be told apart from it. Rank compressors on MRPC in the gpu or full tier.",
}


class Mrpc(GlueTask):
    """GLUE MRPC: paraphrase pairs, F1 (the all-paraphrase predictor scores 0.81) and accuracy."""

    description = DESCRIPTION
    glue_dir = "mrpc"
    how_to_get = f"build it from {MSR_TRAIN} and GLUE's dev ids as GLUE's download_glue_data.py does"
    tiers = {
        "smoke": TierBudget(
            steps=3, batch_size=8, microbatches=2, eval_every=3, lr=1e-4,
            eval_samples=32, train_samples=64, extra={"max_len": 96, "n_layers": 3},
        ),
        "quick": TierBudget(
            steps=64, batch_size=16, microbatches=4, eval_every=16, lr=1e-4,
            eval_samples=None, train_samples=1024, warmup_steps=6, extra={"max_len": 96, "n_layers": 3},
        ),
        "full": TierBudget(
            steps=345, batch_size=32, microbatches=4, eval_every=46, lr=5e-5,
            warmup_steps=35, extra={"max_len": 128},
        ),
        "gpu": TierBudget(
            steps=288, batch_size=64, microbatches=4, eval_every=58, lr=1e-4,
            warmup_steps=28, precision="bf16", extra={"max_len": 128, "eval_batch_size": 512},
        ),
    }  # fmt: skip

    @classmethod
    def read(cls, path: Path) -> GlueRows:
        rows = read_tsv(path)
        return [r[3] for r in rows], [r[4] for r in rows], check_binary([int(r[0]) for r in rows], path)

    def download(self, folder: Path) -> None:
        src = fetch(MSR_TRAIN, folder / "msr_paraphrase_train.txt")
        ids = fetch(DEV_IDS, folder / "mrpc_dev_ids.tsv")
        dev_ids = {tuple(line.strip().split("\t")) for line in ids.read_text().splitlines() if line.strip()}
        lines = src.read_text(encoding="utf-8-sig").splitlines()
        header, rows = lines[0], [line for line in lines[1:] if line.strip()]
        dev = [r for r in rows if tuple(r.split("\t")[1:3]) in dev_ids]
        train = [r for r in rows if tuple(r.split("\t")[1:3]) not in dev_ids]
        for name, part in (("train", train), ("dev", dev)):
            (folder / f"{name}.tsv").write_text("\n".join([header, *part]) + "\n", encoding="utf-8")
        src.unlink()
        ids.unlink()

    def metric_values(self, sums):
        f1, acc = f1_accuracy(*sums)
        return {self.metric.name: f1, "accuracy": acc}


TASK = Mrpc

if __name__ == "__main__":
    from .standalone import main

    raise SystemExit(main(Mrpc))
