"""The task contract: what a task hands the pipeline runtime.

A task is a model split into an ordered list of stage modules, its data (with per-sample
ids), its optimizer and schedule, its metric, and a budget per tier. The runtime owns the
training loop; the task owns everything that makes the numbers comparable.

Stage calling convention (one tensor crosses every boundary)::

    x = batch.inputs
    for stage in stages:
        x = stage(x, batch.inputs)     # every stage also sees the micro-batch's input
    loss = task.loss(x, batch.targets)

Every stage gets the micro-batch's model input as a second argument because every rank
runs the same data loader (as Megatron's first and last stages do): BERT stages derive
the attention mask from the token ids, and the subspace-constrained GPT adds its fixed
token-embedding term. Nothing but the one activation tensor crosses a boundary.
"""

from __future__ import annotations

import abc
import contextlib
import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar, ContextManager, Iterable, Iterator, Mapping, Sequence

import torch
from torch import Tensor, nn

__all__ = [
    "did_you_mean",
    "TIERS",
    "PRECISIONS",
    "autocast",
    "Batch",
    "Metric",
    "TierBudget",
    "Task",
    "TaskError",
    "DataMissingError",
    "default_data_dir",
]

TIERS = ("smoke", "quick", "plateau", "gpu", "full")
"""Tier names in order of cost. ``plateau`` trains the quick tier's narrow CPU models until the
uncompressed curve flattens (the tier the "close to uncompressed" claims are judged on,
docs/reproductions.md); ``gpu`` is the efficient single-GPU tier: real widths and data, bf16
autocast, data resident on the device (see docs/performance.md)."""

PRECISIONS = ("fp32", "bf16")


def autocast(device: torch.device, dtype: torch.dtype | None) -> ContextManager[object]:
    """The context a tier's forward (and loss, and evaluation) runs in: ``torch.autocast``
    with ``dtype`` (``TierBudget.autocast_dtype``), or a no-op for fp32 tiers.

    Parameters, gradients and optimizer state stay fp32 (bf16 needs no loss scaling); what
    crosses a stage boundary is whatever autocast produced (bf16 activations, and from
    autograd bf16 activation gradients), so compressors see and the meter counts what a bf16
    pipeline really sends. The pipeline stages, the unsplit reference and ``tasks.standalone``
    all use this one context, so they stay comparable.
    """
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


class TaskError(ValueError):
    """A task was misconfigured (unknown tier, unsupported stage count or feature)."""


class DataMissingError(FileNotFoundError):
    """The task's data is not where it was looked for; the message says where to put it."""


def default_data_dir() -> Path:
    """``$MPCBENCH_DATA_DIR``, else ``../shared/data`` next to the checkout if present, else ``~/.cache/mpcbench/data``."""
    env = os.environ.get("MPCBENCH_DATA_DIR")
    if env:
        return Path(env).expanduser()
    shared = Path(__file__).resolve().parents[2] / "shared" / "data"
    if shared.is_dir():
        return shared
    return Path.home() / ".cache" / "mpcbench" / "data"


@dataclass(frozen=True)
class Batch:
    """One (micro-)batch. ``inputs``: stage 0's input, e.g. images (B, 3, 32, 32) or token
    ids (B, T); ``targets``: labels (B,) or next tokens (B, T); ``sample_ids``: (B,) int64
    data-set indices (AQ-SGD keys on them)."""

    inputs: Tensor
    targets: Tensor
    sample_ids: Tensor

    def __len__(self) -> int:
        return int(self.sample_ids.shape[0])

    def split(self, n: int) -> list[Batch]:
        """Split into ``n`` equal micro-batches along dim 0 (batch size must divide)."""
        if len(self) % n:
            raise TaskError(f"batch of {len(self)} does not split into {n} equal micro-batches")
        return [
            Batch(i, t, s) for i, t, s in zip(self.inputs.chunk(n), self.targets.chunk(n), self.sample_ids.chunk(n))
        ]

    def to(self, device: torch.device | str) -> Batch:
        return Batch(self.inputs.to(device), self.targets.to(device), self.sample_ids)


@dataclass(frozen=True)
class Metric:
    """The task's quality metric: e.g. ``Metric("accuracy", higher_is_better=True)``."""

    name: str
    higher_is_better: bool
    unit: str = ""


@dataclass(frozen=True)
class TierBudget:
    """How much work one cell does in a tier.

    steps: optimizer steps; batch_size: samples per step (all micro-batches together, per
    data-parallel replica); microbatches: M for the schedule; eval_every: steps between
    evaluations (the curve); eval_samples: size of the evaluation subset (None = all);
    train_samples: size of the training subset (None = all); target: the quality target for
    time-to-target in this tier; lr: peak learning rate; precision: ``fp32``, or ``bf16`` for
    bf16 autocast of every stage's forward (weights, optimizer and loss scaling stay fp32;
    boundary activations and their gradients are then bf16, so raw bytes halve too).
    """

    steps: int
    batch_size: int
    microbatches: int
    eval_every: int
    lr: float
    target: float = math.nan  # filled from the task's DESCRIPTION["targets"] (its one home)
    eval_samples: int | None = None
    train_samples: int | None = None
    warmup_steps: int = 0
    precision: str = "fp32"
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise TaskError(f"unknown precision {self.precision!r}; valid: {', '.join(PRECISIONS)}")

    def resolve_microbatches(self, microbatches: int | None = None) -> int:
        """M of a run: ``microbatches`` when given, else this tier's; it must divide the batch.
        The one home of that default and that check (the cell config, the runtime and the
        unsplit loop all ask here)."""
        m = self.microbatches if microbatches is None else microbatches
        if not isinstance(m, int) or isinstance(m, bool) or m < 1:
            raise TaskError(f"microbatches={m!r} must be an integer >= 1")
        if self.batch_size % m:
            raise TaskError(
                f"microbatches={m} does not divide the batch size {self.batch_size}; pick a divisor of {self.batch_size}"
            )
        return m

    @property
    def autocast_dtype(self) -> torch.dtype | None:
        """The dtype stages run their forward in under ``torch.autocast``, or None (fp32)."""
        return torch.bfloat16 if self.precision == "bf16" else None


class Task(abc.ABC):
    """Base class of a task. Subclasses set the class attributes and implement the methods.

    Constructed once per process (every rank builds the same task with the same seed).

    ``description``: the task's one description, the module's top-level ``DESCRIPTION`` dict
    literal (name, family, metric, direction, chance level, target per tier, page text; read
    without importing the module by ``suite.results.task_catalog``). A subclass that sets it
    gets ``name``, ``metric`` and every tier's ``target`` from it.
    """

    name: ClassVar[str]
    metric: ClassVar[Metric]
    tiers: ClassVar[Mapping[str, TierBudget]]
    description: ClassVar[Mapping[str, Any]] = MappingProxyType({})
    default_stages: ClassVar[int]
    stage_choices: ClassVar[tuple[int, ...]]
    features: ClassVar[frozenset[str]] = frozenset()  # model features a compressor may require
    # feature -> options the requiring compressor asked for (e.g. {"residual_subspace": {"ratio": 0.01}});
    # set by ``set_feature_options`` before the model is built
    feature_options: Mapping[str, Mapping[str, Any]] = MappingProxyType({})
    # named model sizes: name -> the tier's ``extra`` entries it overrides (widths, depths); a cell
    # with ``model_size`` trains the tier's budget on that model (docs/ARCHITECTURE.md, "Hardware and
    # model size"). Empty: the task has one model per tier.
    model_sizes: ClassVar[Mapping[str, Mapping[str, Any]]] = MappingProxyType({})

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        d = cls.__dict__.get("description")
        if not d:
            return
        cls.name = str(d["name"])
        cls.metric = Metric(str(d["metric"]), bool(d["higher_is_better"]), str(d.get("unit", "")))
        targets = d["targets"]
        missing = sorted(set(cls.tiers) - set(targets))
        if missing:
            raise TaskError(f"task {cls.name!r}: DESCRIPTION['targets'] has no target for tier(s) {missing}")
        cls.tiers = {t: replace(b, target=float(targets[t])) for t, b in cls.tiers.items()}

    def __init__(
        self,
        tier: str = "smoke",
        seed: int = 0,
        data_dir: str | Path | None = None,
        features: frozenset[str] = frozenset(),
        model_size: str | None = None,
    ) -> None:
        if tier not in self.tiers:
            raise TaskError(
                f"task {self.name!r}: unknown tier {tier!r}{did_you_mean(tier, self.tiers)}; "
                f"valid tiers: {', '.join(self.tiers)}"
            )
        missing = set(features) - set(self.features)
        if missing:
            raise TaskError(
                f"task {self.name!r} cannot provide model feature(s) {sorted(missing)} "
                f"(it provides: {sorted(self.features) or 'none'}); choose another compressor or task"
            )
        if model_size is not None and model_size not in self.model_sizes:
            raise TaskError(
                f"task {self.name!r}: unknown model size {model_size!r}{did_you_mean(model_size, self.model_sizes)}; "
                f"valid: {', '.join(self.model_sizes) or 'none (this task has one model per tier)'}"
            )
        self.tier = tier
        self.model_size = model_size
        self.budget = self.tiers[tier]
        if model_size is not None:  # the tier's budget on a model of another size
            self.budget = replace(self.budget, extra={**self.budget.extra, **self.model_sizes[model_size]})
        self.seed = seed
        self.data_dir = Path(data_dir).expanduser() if data_dir else default_data_dir()
        self.enabled_features = frozenset(features)

    def set_feature_options(self, options: Mapping[str, Mapping[str, Any]]) -> None:
        """Options for enabled features, from the compressor that requires them (its
        ``feature_options``), e.g. the subspace rank as ``{"residual_subspace": {"ratio": 0.01}}``."""
        unknown = set(options) - set(self.enabled_features)
        if unknown:
            raise TaskError(f"task {self.name!r}: options for feature(s) {sorted(unknown)} that are not enabled")
        self.feature_options = MappingProxyType({k: dict(v) for k, v in options.items()})

    # --- model ------------------------------------------------------------------
    @abc.abstractmethod
    def build_stages(self, n_stages: int) -> list[nn.Module]:
        """The model as ``n_stages`` modules, each ``forward(x, batch_input) -> Tensor``.

        Deterministic given ``self.seed`` (parameters identical on every rank), on CPU.
        """

    def model_features(self, stages: list[nn.Module]) -> Mapping[str, Any]:
        """Objects a compressor's ``bind`` receives for the features it ``requires``."""
        return {}

    @abc.abstractmethod
    def loss(self, output: Tensor, targets: Tensor) -> Tensor:
        """Mean loss of one micro-batch (a scalar); the runtime divides by M."""

    @abc.abstractmethod
    def metric_sums(self, output: Tensor, targets: Tensor) -> tuple[float, ...]:
        """The metric's additive statistics over one evaluation micro-batch, e.g. (sum, count).

        The runtime adds them over batches and data-parallel replicas and hands the totals to
        :meth:`metric_values`; the default reads them as (sum, count), metric = sum / count.
        Metrics that are not a mean (Matthews correlation, F1, Pearson) return their sufficient
        statistics (a confusion matrix, moments) and override :meth:`metric_values`.
        """

    def metric_stats_size(self) -> int:
        """How many numbers :meth:`metric_sums` returns (a replica with no evaluation batch
        contributes that many zeros)."""
        return 2

    def metric_values(self, sums: Sequence[float]) -> dict[str, float]:
        """The metric(s) from the summed statistics: ``{metric.name: value, secondary: value...}``,
        the primary metric (ranked, targeted) first. Default: ``{metric.name: sum / count}``."""
        return {self.metric.name: float(sums[0]) / float(sums[1]) if sums[1] > 0 else float("nan")}

    # --- optimization ---------------------------------------------------------------
    @abc.abstractmethod
    def make_optimizer(self, params: list[nn.Parameter]) -> torch.optim.Optimizer:
        """The optimizer for one stage's parameters (each stage optimizes its own)."""

    def make_scheduler(self, optimizer: torch.optim.Optimizer) -> torch.optim.lr_scheduler.LRScheduler | None:
        """Learning-rate schedule over ``self.budget.steps`` (stepped once per step)."""
        return None

    # --- data ---------------------------------------------------------------------------
    def to_device(self, device: torch.device) -> None:  # noqa: B027 (an optional hook: most tasks need nothing)
        """Produce batches on ``device`` from now on (called once by the runtime before training).

        The default does nothing: batches are built on the CPU and the runtime moves each
        one. A task whose data fits on the accelerator keeps it there and builds batches
        (augmentation included) on the device, with the same values as on the CPU.
        """

    @abc.abstractmethod
    def train_batches(self, dp_rank: int = 0, dp_size: int = 1) -> Iterator[Batch]:
        """Exactly ``budget.steps`` training batches of ``budget.batch_size``, in a fixed
        order from ``self.seed``; replica ``dp_rank`` of ``dp_size`` gets its own shard."""

    @abc.abstractmethod
    def eval_batches(self) -> Iterator[Batch]:
        """The evaluation set (or ``budget.eval_samples`` of it), fixed order."""

    def describe(self) -> dict[str, Any]:
        """A JSON-able summary (stored in every result's config)."""
        b = self.budget
        return {
            "task": self.name,
            "tier": self.tier,
            "metric": self.metric.name,
            "higher_is_better": self.metric.higher_is_better,
            "steps": b.steps,
            "batch_size": b.batch_size,
            "microbatches": b.microbatches,
            "eval_every": b.eval_every,
            "target": b.target,
            "lr": b.lr,
            "precision": b.precision,
            "train_samples": b.train_samples,
            "eval_samples": b.eval_samples,
            "features": sorted(self.enabled_features),
            **(
                {"feature_options": {k: dict(v) for k, v in self.feature_options.items()}}
                if self.feature_options
                else {}
            ),
            **({"model_size": self.model_size} if self.model_size is not None else {}),
            **{f"extra.{k}": v for k, v in b.extra.items()},
        }


def did_you_mean(name: object, valid: Iterable[str]) -> str:
    """(tasks imports nothing of ours, so compressors.api has its own copy)
    `` (did you mean 'topk'?)`` for the closest valid name (difflib), or ``""`` when none is close."""
    import difflib

    close = difflib.get_close_matches(str(name), list(valid), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""
