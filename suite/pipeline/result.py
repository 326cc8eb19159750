"""What one training run returns: the runtime fills it, the runner stores it with provenance.

Byte counts are measured by the transport (``suite.pipeline.accounting``), never reported by a
compressor. Times are seconds. All fields are JSON-able via ``to_dict``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["ByteCounts", "EvalPoint", "TimeSplit", "RunResult"]


@dataclass
class ByteCounts:
    """Raw (uncompressed tensor) and wire (payload tensors + headers) bytes, summed over a run.

    ``messages`` counts transport sends (for latency in the network model).
    """

    raw: int = 0
    wire: int = 0
    messages: int = 0

    def add(self, raw: int, wire: int, messages: int = 1) -> None:
        self.raw += raw
        self.wire += wire
        self.messages += messages

    @property
    def ratio(self) -> float:
        """Compression ratio raw / wire (1.0 when nothing was sent)."""
        return self.raw / self.wire if self.wire else 1.0


@dataclass
class EvalPoint:
    """One point of the training curve."""

    step: int  # optimizer steps done when evaluated
    metric: float  # evaluated with compression at every boundary
    metric_uncompressed: float | None  # same model, boundaries uncompressed (None if disabled)
    train_loss: float  # mean training loss over the steps since the previous point
    wall_s: float  # measured training wall-clock up to this point (evaluation excluded)
    metrics: dict[str, float] | None = None  # the task's secondary metrics (MRPC accuracy, STS-B Spearman)


@dataclass
class TimeSplit:
    """Measured wall-clock per training step, split by what the time was spent on.

    Per step means averaged over measured steps (the first step is excluded as warm-up
    when there are more than two). ``compute`` is stage forward/backward/optimizer,
    ``compress`` is compress + decompress, ``comm`` is time in (or waiting on) the
    transport. On one process they add up to about ``step``; across processes they are
    the critical-path stage's (the maximum over stages of each).
    """

    step_s: float = 0.0
    compute_s: float = 0.0
    compress_s: float = 0.0
    comm_s: float = 0.0
    total_train_s: float = 0.0  # all training steps, evaluation excluded
    total_eval_s: float = 0.0


@dataclass
class RunResult:
    """Everything measured in one cell run.

    bytes: direction ("forward" / "backward" / "dp") -> totals over the run.
    bytes_per_boundary: "b{i}.forward" / "b{i}.backward" -> totals.
    bytes_per_step: direction -> mean wire bytes per training step (the rate the network model uses).
    modeled: network profile name -> {"step_s", "total_s", "time_to_target_s" (None if the
        target was not reached), "comm_s_per_step"}.
    stage_times: per stage TimeSplit dicts (the max is in ``time``).
    eval_bytes: evaluation traffic (not part of the benchmark's byte counts).
    wire_bytes_by_step: "forward" / "backward" / "dp" -> wire bytes of each step.
    network: multi-host and emulated-link runs: ``hosts``, ``link``, ``emulated``, ``latency_note``,
        ``kernel_bytes`` (per node: the kernel's interface counters next to the wire bytes, see
        ``suite.pipeline.wire_check``), ``measured`` (step and comm time over the link) and ``modeled``
        (the network model's prediction for the same link); empty for one-host runs.
    timing_inputs: what the network model used (``suite.results.network.TimingInputs.to_dict``), so a
        stored run can be re-modeled under other profiles.
    model_params: the whole model's parameter count (every stage, before tensor-parallel sharding).
    """

    final_metric: float
    final_metric_uncompressed: float | None
    metric_name: str
    higher_is_better: bool
    target: float
    reached_target_step: int | None
    curve: list[EvalPoint]
    bytes: dict[str, ByteCounts]
    bytes_per_boundary: dict[str, ByteCounts]
    bytes_per_step: dict[str, float]
    time: TimeSplit
    modeled: dict[str, dict[str, float | None]]
    steps: int
    n_stages: int
    dp: int
    microbatches: int
    schedule: str
    mode: str
    device: str
    stage_times: list[dict[str, float]] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)  # training loss per step (equivalence tests)
    compressor_state_bytes: int = 0
    compressor_stats: dict[str, float] = field(default_factory=dict)  # counters from compressors' stats()
    eval_bytes: ByteCounts = field(default_factory=ByteCounts)
    wire_bytes_by_step: dict[str, list[int]] = field(default_factory=dict)
    timing_inputs: dict[str, Any] = field(default_factory=dict)
    network: dict[str, Any] = field(default_factory=dict)
    model_params: int | None = None  # parameters of the whole (unsplit, unsharded) model

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunResult:
        d = dict(d)
        d["curve"] = [EvalPoint(**p) for p in d["curve"]]
        d["bytes"] = {k: ByteCounts(**v) for k, v in d["bytes"].items()}
        d["bytes_per_boundary"] = {k: ByteCounts(**v) for k, v in d["bytes_per_boundary"].items()}
        d["time"] = TimeSplit(**d["time"])
        if isinstance(d.get("eval_bytes"), dict):
            d["eval_bytes"] = ByteCounts(**d["eval_bytes"])
        return cls(**d)
