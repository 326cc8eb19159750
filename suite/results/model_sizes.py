"""FLOPs, boundary activations and parameters per pipeline stage, per task and model size
(``model_sizes.json``): read them without torch.

The file is written by the maintainers' command ``python -m suite.pipeline.flops --write``, which
builds each model (on the meta device where it is too big to build) and counts one micro-batch's
forward and backward with ``torch.utils.flop_counter.FlopCounterMode``. This module holds the
format (one home: the writer serializes these dataclasses) and reads it for the projection
(``suite.results.projection``) and the leaderboard.

Counted: matrix multiplications, convolutions and scaled-dot-product attention (at the full
T x T: causal masking is not discounted), forward and backward (input and weight gradients; the
first stage computes no input gradient). Not counted: element-wise work, normalizations,
softmax, embeddings lookups, the loss and the optimizer step (small next to the matmuls of these
models; memory-bound work is the codec's and the copy's side of the time model).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping

__all__ = [
    "MODEL_SIZES_FILE",
    "SCHEMA",
    "ModelSizeError",
    "StageCost",
    "ModelCost",
    "load_model_costs",
    "get_model_cost",
]

MODEL_SIZES_FILE = Path(__file__).with_name("model_sizes.json")
SCHEMA = "mpcbench.model_sizes/1"


class ModelSizeError(ValueError):
    """The file is invalid, or the asked-for (task, size, tier, stages) is not in it."""


@dataclass(frozen=True)
class StageCost:
    """One pipeline stage for one micro-batch: parameters, FLOPs forward and backward, and the
    activation it sends to the next stage (``boundary_shape`` () and 0 bytes on the last stage).
    ``boundary_bytes`` at the dtype the count ran in (``ModelCost.dtype``: float32).
    ``forward_kernels`` / ``backward_kernels``: the dispatched ops that launch a kernel (views,
    aliases and empty allocations left out; 0 in a file written before they were counted)."""

    params: int
    forward_flops: int
    backward_flops: int
    boundary_shape: tuple[int, ...]
    boundary_bytes: int
    forward_kernels: int = 0
    backward_kernels: int = 0

    @property
    def boundary_elements(self) -> int:
        n = 1
        for s in self.boundary_shape:
            n *= s
        return n if self.boundary_shape else 0


@dataclass(frozen=True)
class ModelCost:
    """One (task, tier, model size, stage count): the tier's micro-batch on the model of that size.

    ``model_size`` None is the tier's own model. ``microbatch_samples``: samples per micro-batch
    (the tier's batch / M, ``microbatches``; a data-parallel replica trains on batches of the
    same size, its own shard); ``sample_shape``: one sample's input (``[T]`` token ids, ``[3, 32, 32]``
    an image). ``extra``: the model's settings after the size's overrides (widths, depths, context)."""

    task: str
    tier: str
    model_size: str | None
    n_stages: int
    microbatches: int
    microbatch_samples: int
    sample_shape: tuple[int, ...]
    dtype: str
    model_params: int
    extra: Mapping[str, Any]
    stages: tuple[StageCost, ...]

    @property
    def forward_flops(self) -> int:
        return sum(s.forward_flops for s in self.stages)

    @property
    def backward_flops(self) -> int:
        return sum(s.backward_flops for s in self.stages)

    def stage_flops(self, stage: int) -> int:
        """Forward + backward FLOPs of ``stage`` for one micro-batch."""
        s = self.stages[stage]
        return s.forward_flops + s.backward_flops

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["extra"] = dict(self.extra)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str = "entry") -> ModelCost:
        try:
            stages = tuple(
                StageCost(
                    params=_int(s["params"]),
                    forward_flops=_int(s["forward_flops"]),
                    backward_flops=_int(s["backward_flops"]),
                    boundary_shape=tuple(_int(x) for x in s["boundary_shape"]),
                    boundary_bytes=_int(s["boundary_bytes"]),
                    forward_kernels=_int(s.get("forward_kernels", 0)),
                    backward_kernels=_int(s.get("backward_kernels", 0)),
                )
                for s in d["stages"]
            )
            cost = cls(
                task=str(d["task"]),
                tier=str(d["tier"]),
                model_size=None if d["model_size"] is None else str(d["model_size"]),
                n_stages=_int(d["n_stages"]),
                microbatches=_int(d["microbatches"]),
                microbatch_samples=_int(d["microbatch_samples"]),
                sample_shape=tuple(_int(x) for x in d["sample_shape"]),
                dtype=str(d["dtype"]),
                model_params=_int(d["model_params"]),
                extra=dict(d["extra"]),
                stages=stages,
            )
        except (KeyError, TypeError, ValueError) as e:
            raise ModelSizeError(f"{where}: invalid model-size entry ({type(e).__name__}: {e})") from None
        if len(stages) != cost.n_stages or cost.n_stages < 1:
            raise ModelSizeError(f"{where}: {len(stages)} stage rows for n_stages={cost.n_stages}")
        if cost.model_params < 1 or sum(s.params for s in stages) < cost.model_params:
            raise ModelSizeError(
                f"{where}: model_params={cost.model_params} exceeds the sum of the stages' params (or is 0)"
            )
        return cost


def _int(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"{v!r} is not a non-negative integer")
    return v


def load_model_costs(path: str | Path = MODEL_SIZES_FILE) -> tuple[list[ModelCost], dict[str, Any]]:
    """The file's entries and its provenance (``torch``, ``commit``, ``counted``, ``command``)."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise ModelSizeError(
            f"{p}: cannot read the model sizes ({e}); regenerate: python -m suite.pipeline.flops --write"
        ) from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ModelSizeError(
            f"{p}: schema {data.get('schema') if isinstance(data, dict) else None!r}, expected {SCHEMA!r}"
        )
    entries = data.get("entries")
    if not isinstance(entries, list):
        raise ModelSizeError(f"{p}: 'entries' must be a list")
    costs = [ModelCost.from_dict(e, f"{p.name}: entries[{i}]") for i, e in enumerate(entries)]
    return costs, {k: v for k, v in data.items() if k not in ("schema", "entries")}


_CACHE: list[ModelCost] | None = None


def get_model_cost(
    task: str, model_size: str | None = None, tier: str = "quick", n_stages: int | None = None
) -> ModelCost:
    """The committed entry of ``task`` at ``model_size`` (None: the tier's model), the tier's
    micro-batch and ``n_stages`` (None: the pipeline split, the most stages listed; a one-stage
    entry is the data-parallel setup's); unknown ones list what is."""
    global _CACHE
    if _CACHE is None:
        _CACHE = load_model_costs()[0]
    found = [
        c
        for c in _CACHE
        if (c.task, c.tier, c.model_size) == (task, tier, model_size) and n_stages in (None, c.n_stages)
    ]
    if n_stages is None and len(found) > 1:
        found = [max(found, key=lambda c: c.n_stages)]
    if len(found) != 1:
        have = sorted(
            {f"{c.task}/{c.tier}/{c.model_size or 'tier model'}/{c.n_stages} stages" for c in _CACHE if c.task == task}
        )
        what = "several entries (give n_stages)" if found else "no entry"
        raise ModelSizeError(
            f"{what} for task {task!r}, tier {tier!r}, model size {model_size!r}, stages {n_stages}; "
            f"listed: {', '.join(have) or 'none for this task'} (python -m suite.pipeline.flops --write adds more)"
        )
    return found[0]
