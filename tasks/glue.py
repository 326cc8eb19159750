"""GLUE fine-tuning beyond SST-2: the shared machinery of the CoLA, MRPC, RTE and STS-B tasks.

Each GLUE task is its own module (``tasks/cola.py``, ``tasks/mrpc.py``, ``tasks/rte.py``,
``tasks/stsb.py``) holding a :class:`GlueTask` subclass: its files, its reader, its head size
and its official GLUE metric. Everything else is SST-2's pipeline (:mod:`tasks.sst2`): the same
pretrained MiniLM encoder (``$MPCBENCH_SST2_MODEL`` picks another), the same stage split and
mean-pool head, the same AdamW + linear schedule. Sentence pairs are encoded the way BERT
reads them: ``[CLS] a [SEP] b [SEP]`` with token type ids 0 / 1; the stages re-derive the
type ids from the ids (everything after the first ``[SEP]`` is segment 1), so only the one
hidden-state tensor crosses a boundary.

Official GLUE metrics (what the GLUE leaderboard reports for each task):

* CoLA: Matthews correlation of the binary predictions (chance 0);
* MRPC: F1 of the positive (paraphrase) class and accuracy;
* RTE: accuracy;
* STS-B: Pearson and Spearman correlation of the predicted similarity with the gold score
  (a one-output regression head trained with mean squared error on the 0-5 score).

Evaluation is on the GLUE dev set (the test labels are not public). The metrics are not
means, so ``metric_sums`` returns their sufficient statistics, which add over batches and
data-parallel replicas: the confusion matrix (TP, FP, FN, TN) for the classifiers; for STS-B
each dev pair's prediction and gold score at the pair's position in a vector of the dev-subset
size (Spearman needs all of them ranked together).

QNLI is not a task here: its train split (104,743 pairs) is not in the offline data copy and
the dev split alone cannot fine-tune and evaluate honestly.

Data: ``<glue_dir>/train.tsv`` and ``dev.tsv`` in the data dir, as GLUE's official
``download_glue_data.py`` writes them (downloaded there from the GLUE archives when missing and
online); tokenized once to ``extra["max_len"]`` tokens (pairs truncated longest-first) and cached.
Sample ids: train row index; dev rows get ``n_train + row``.
"""

from __future__ import annotations

import copy
import math
import os
from pathlib import Path
from typing import Callable, ClassVar, Iterator, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .api import Batch, DataMissingError, Task, TaskError
from .data import SampleOrder, cached_arrays, fetch, fixed_subset, require, source_key
from .schedules import warmup_linear
from .sst2 import BertStage, MeanPoolClassifier, _pretrained, _tokenizer, default_model, split_layers

__all__ = [
    "GlueTask",
    "GlueRows",
    "PairStage",
    "PairModel",
    "confusion",
    "matthews",
    "f1_accuracy",
    "pearson",
    "spearman",
    "read_tsv",
    "glue_zip_download",
]

GLUE_ZIP = "https://dl.fbaipublicfiles.com/glue/data/{}.zip"

GlueRows = tuple[list[str], list[str] | None, np.ndarray]
"""(first sentences, second sentences or None for single-sentence tasks, labels)."""


# --- metrics (torch-free, also used by the tests against scipy / sklearn formulas) -------------
def confusion(pred: Tensor, gold: Tensor) -> tuple[float, float, float, float]:
    """(TP, FP, FN, TN) of binary predictions, class 1 positive."""
    p, g = pred.bool(), gold.bool()
    return (float((p & g).sum()), float((p & ~g).sum()), float((~p & g).sum()), float((~p & ~g).sum()))


def matthews(tp: float, fp: float, fn: float, tn: float) -> float:
    """Matthews correlation coefficient; 0 when a marginal is empty (sklearn's convention)."""
    den = math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    return (tp * tn - fp * fn) / den if den > 0 else 0.0


def f1_accuracy(tp: float, fp: float, fn: float, tn: float) -> tuple[float, float]:
    """F1 of the positive class (0 when nothing is predicted or gold positive) and accuracy."""
    f1 = 2 * tp / (2 * tp + fp + fn) if tp > 0 else 0.0
    n = tp + fp + fn + tn
    return f1, ((tp + tn) / n if n else float("nan"))


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    x, y = x - x.mean(), y - y.mean()
    den = math.sqrt(float((x * x).sum() * (y * y).sum()))
    return float((x * y).sum()) / den if den > 0 else 0.0


def _ranks(x: np.ndarray) -> np.ndarray:
    """Average ranks (ties share the mean of their positions), as scipy.stats.rankdata."""
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(len(x), dtype=np.float64)
    sx = x[order]
    i = 0
    while i < len(x):
        j = i
        while j + 1 < len(x) and sx[j + 1] == sx[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return ranks


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    return pearson(_ranks(x), _ranks(y))


# --- data ---------------------------------------------------------------------------------------
def read_tsv(path: Path, *, header: bool = True) -> list[list[str]]:
    """Rows of a GLUE TSV as lists of fields (no quoting: GLUE's files use bare quotes)."""
    lines = path.read_text(encoding="utf-8-sig").splitlines()
    rows = [line.split("\t") for line in lines if line.strip()]
    return rows[1:] if header else rows


def glue_zip_download(archive_name: str, folder: Path) -> Callable[[], None]:
    """GLUE's ``<archive_name>.zip`` -> ``folder/{train,dev}.tsv`` (the official download script's files)."""

    def download() -> None:
        import zipfile

        archive = fetch(GLUE_ZIP.format(archive_name), folder / f"{archive_name}.zip")
        with zipfile.ZipFile(archive) as z:
            for split in ("train", "dev"):
                (folder / f"{split}.tsv").write_bytes(z.read(f"{archive_name}/{split}.tsv"))
        archive.unlink()

    return download


# --- model --------------------------------------------------------------------------------------
def segment_ids(ids: Tensor, sep_id: int) -> Tensor:
    """BERT token type ids from the ids alone: 0 up to and including the first [SEP], then 1
    (padding after the second [SEP] is masked anyway)."""
    is_sep = (ids == sep_id).long()
    before_or_at_first = is_sep.cumsum(1) - is_sep == 0
    return (~before_or_at_first).long()


class PairStage(BertStage):
    """A BERT stage whose first stage also feeds the sentence-pair token type ids."""

    def __init__(self, encoder: nn.Module, layers: range, head, pad_id: int, first: bool, sep_id: int | None) -> None:
        super().__init__(encoder, layers, head, pad_id, first)
        self.sep_id = sep_id

    def forward(self, x: Tensor, batch_input: Tensor) -> Tensor:
        from transformers.masking_utils import create_bidirectional_mask

        mask = (batch_input != self.pad_id).long()
        if self.embeddings is not None:
            types = None if self.sep_id is None else segment_ids(batch_input, self.sep_id)
            x = self.embeddings(input_ids=batch_input, token_type_ids=types)
        attn = create_bidirectional_mask(config=self.config, inputs_embeds=x, attention_mask=mask)
        for layer in self.layers:
            x = layer(x, attn)
        return self.head(x, mask) if self.head is not None else x


class PairModel(nn.Module):
    """The unsplit model: encoder + mean-pool head; ``forward(ids)`` -> (B, n_outputs)."""

    def __init__(self, encoder: nn.Module, pad_id: int, sep_id: int | None, n_outputs: int) -> None:
        super().__init__()
        self.encoder = encoder
        self.head = MeanPoolClassifier(encoder.config.hidden_size, n_outputs)
        self.pad_id, self.sep_id = pad_id, sep_id

    def forward(self, ids: Tensor) -> Tensor:
        mask = (ids != self.pad_id).long()
        types = None if self.sep_id is None else segment_ids(ids, self.sep_id)
        h = self.encoder(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state
        return self.head(h, mask)


# --- task ---------------------------------------------------------------------------------------
class GlueTask(Task):
    """A GLUE task on the pretrained MiniLM encoder, split like :class:`tasks.sst2.Sst2`.

    Subclasses set ``glue_dir`` (folder under the data dir), ``n_outputs`` (classes, or 1 for
    regression), ``pair`` (sentence pairs or single sentences), ``read`` (a TSV -> rows) and the
    metric methods; ``download`` fetches the official files.
    """

    glue_dir: ClassVar[str]
    n_outputs: ClassVar[int] = 2
    pair: ClassVar[bool] = True
    default_stages = 3
    stage_choices = (2, 3)

    def __init__(
        self, tier="smoke", seed=0, data_dir=None, features=frozenset(), model: str | None = None, model_size=None
    ) -> None:
        super().__init__(tier, seed, data_dir, features, model_size)
        self.model_name = model or default_model()
        explicit = model or os.environ.get("MPCBENCH_SST2_MODEL")
        self.model_label = explicit or "sentence-transformers/all-MiniLM-L6-v2"
        self._data: dict[str, np.ndarray] | None = None

    # data
    @classmethod
    def read(cls, path: Path) -> GlueRows:
        raise NotImplementedError

    def download(self, folder: Path) -> None:
        glue_zip_download(self.glue_archive, folder)()

    glue_archive: ClassVar[str] = ""
    how_to_get: ClassVar[str] = ""

    @property
    def data(self) -> dict[str, np.ndarray]:
        if self._data is None:
            self._data = self.load(self.data_dir, self.model_name, int(self.budget.extra["max_len"]))
        return self._data

    def load(self, data_dir: Path, model: str, max_len: int) -> dict[str, np.ndarray]:
        """``train_ids`` (N, max_len) int32 token ids (padded), ``train_y``, ``dev_ids``, ``dev_y``."""
        folder = data_dir / self.glue_dir
        how = self.how_to_get or (
            f"download GLUE {self.glue_archive} from {GLUE_ZIP.format(self.glue_archive)} and unzip "
            f"train.tsv and dev.tsv into {folder}"
        )
        files = [folder / "train.tsv", folder / "dev.tsv"]
        for f in files:
            require(f, how, lambda: self.download(folder))
        model_files = [
            Path(model) / f
            for f in ("tokenizer.json", "vocab.txt", "tokenizer_config.json")
            if (Path(model) / f).exists()
        ]

        def build() -> dict[str, np.ndarray]:
            tok = _tokenizer(model)
            out = {}
            for split, path in zip(("train", "dev"), files):
                a, b, labels = self.read(path)
                enc = tok(
                    a, b, padding="max_length", truncation=True, max_length=max_len, return_tensors="np"
                )  # pairs: longest-first truncation
                out[f"{split}_ids"] = enc["input_ids"].astype(np.int32)
                out[f"{split}_y"] = labels
            return out

        return cached_arrays(self.name, source_key(*files, model, max_len, *model_files), build)

    @property
    def pad_id(self) -> int:
        return int(_tokenizer(self.model_name).pad_token_id)

    @property
    def sep_id(self) -> int | None:
        return int(_tokenizer(self.model_name).sep_token_id) if self.pair else None

    # model
    def build_model(self) -> PairModel:
        """The unsplit model (``build_stages`` cuts exactly this one): pretrained encoder + fresh head."""
        encoder = copy.deepcopy(_pretrained(self.model_name))
        n_layers = self.budget.extra.get("n_layers")
        if n_layers is not None:
            encoder.encoder.layer = encoder.encoder.layer[:n_layers]
            encoder.config.num_hidden_layers = n_layers
        torch.manual_seed(self.seed)  # the head's initialization
        return PairModel(encoder, self.pad_id, self.sep_id, self.n_outputs)

    def build_stages(self, n_stages: int) -> list[nn.Module]:
        if n_stages not in self.stage_choices:
            raise TaskError(
                f"task {self.name!r} cannot be split into {n_stages} stages; "
                f"valid: {', '.join(map(str, self.stage_choices))}"
            )
        model = self.build_model()
        ranges = split_layers(len(model.encoder.encoder.layer), n_stages)
        return [
            PairStage(model.encoder, r, model.head if i == n_stages - 1 else None, model.pad_id, i == 0, model.sep_id)
            for i, r in enumerate(ranges)
        ]

    def loss(self, output: Tensor, targets: Tensor) -> Tensor:
        return F.cross_entropy(output, targets)

    def metric_stats_size(self) -> int:
        return 4

    def metric_sums(self, output: Tensor, targets: Tensor) -> tuple[float, ...]:
        return confusion(output.argmax(-1), targets)

    # optimization
    def make_optimizer(self, params: list[nn.Parameter]) -> torch.optim.Optimizer:
        decay = [p for p in params if p.ndim >= 2]
        no_decay = [p for p in params if p.ndim < 2]
        groups = [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}]
        return torch.optim.AdamW([g for g in groups if g["params"]], lr=self.budget.lr)

    def make_scheduler(self, optimizer):
        return warmup_linear(optimizer, self.budget.steps, self.budget.warmup_steps)

    # batches
    def targets(self, y: np.ndarray, rows: np.ndarray, positions: np.ndarray) -> Tensor:
        """The targets of rows ``rows`` of a split whose labels are ``y``; ``positions``: the rows'
        places in the training pool or evaluation subset (STS-B's ranked metric needs them)."""
        return torch.from_numpy(np.asarray(y[rows]))

    def train_batches(self, dp_rank: int = 0, dp_size: int = 1) -> Iterator[Batch]:
        b = self.budget
        ids_all, y = self.data["train_ids"], self.data["train_y"]
        order = SampleOrder(fixed_subset(len(ids_all), b.train_samples), b.batch_size, self.seed)
        for step in range(b.steps):
            ids = order.indices(step, dp_rank, dp_size)
            rows = ids.numpy()
            yield Batch(torch.from_numpy(ids_all[rows].astype(np.int64)), self.targets(y, rows, rows), ids)

    def eval_rows(self) -> Tensor:
        """The dev rows evaluated (all, or the tier's fixed subset), in order."""
        return fixed_subset(len(self.data["dev_ids"]), self.budget.eval_samples, salt=1)

    def eval_batches(self) -> Iterator[Batch]:
        b = self.budget
        tokens, y = self.data["dev_ids"], self.data["dev_y"]
        n_train = len(self.data["train_ids"])
        size = int(b.extra.get("eval_batch_size", b.batch_size))
        for start, c in zip(range(0, len(self.eval_rows()), size), self.eval_rows().split(size)):
            rows = c.numpy()
            pos = np.arange(start, start + len(rows))
            yield Batch(torch.from_numpy(tokens[rows].astype(np.int64)), self.targets(y, rows, pos), c + n_train)

    def describe(self) -> dict:
        return {**super().describe(), "model": self.model_label}


def check_binary(labels: Sequence[int], path: Path) -> np.ndarray:
    y = np.asarray(labels, dtype=np.int64)
    if len(y) == 0 or not np.isin(y, (0, 1)).all():
        raise DataMissingError(f"{path}: expected 0/1 labels, got {sorted(set(y.tolist()))[:5]}")
    return y
