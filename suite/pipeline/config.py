"""Typed configuration of one benchmark cell: task x compressor plan x seed (+ placement).

Everything is validated at construction (``CellConfig.validate``) so that a bad name or
parameter fails before any training starts, with a one-line message.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from compressors.api import CompressorError, TensorRole, did_you_mean
from suite.results.records import MAX_SEED

from .schedules import SCHEDULES, build_schedule, pipeline_ranks

__all__ = [
    "Direction",
    "DIRECTIONS",
    "CompressionPlan",
    "CellConfig",
    "ConfigError",
    "SCHEDULES",
    "MODES",
    "DEVICES",
]

Direction = Literal["forward", "backward", "dp"]
DIRECTIONS: tuple[str, ...] = ("forward", "backward", "dp")
ROLE_OF_DIRECTION = {
    "forward": TensorRole.ACTIVATION,
    "backward": TensorRole.ACTIVATION_GRAD,
    "dp": TensorRole.WEIGHT_GRAD,
}
MODES = ("single", "torchrun")  # all stages in one process, or one process per stage (and replica)
DEVICES = ("cpu", "cuda", "auto")


class ConfigError(ValueError):
    """A cell configuration is invalid; the message names the field and the fix."""


@dataclass(frozen=True)
class CompressionPlan:
    """Which compressor spec runs where.

    ``forward`` / ``backward`` apply at every pipeline boundary unless ``per_boundary``
    overrides them: ``per_boundary = {"0": {"forward": "topk(ratio=0.1)"}}`` changes the
    forward compressor of boundary 0 only. ``dp`` compresses data-parallel weight gradients.
    """

    forward: str = "none"
    backward: str = "none"
    dp: str = "none"
    per_boundary: tuple[tuple[int, str, str], ...] = ()  # (boundary, direction, spec)

    def spec_for(self, direction: str, boundary: int = 0) -> str:
        for b, d, s in self.per_boundary:
            if b == boundary and d == direction:
                return s
        return getattr(self, direction)

    def all_specs(self) -> list[str]:
        return [self.forward, self.backward, self.dp] + [s for _, _, s in self.per_boundary]

    @property
    def label(self) -> str:
        """Short display name: the forward spec if everything else is ``none``/same, else all."""
        parts = []
        if self.forward == self.backward:
            parts.append(self.forward)
        else:
            parts.append(f"fwd={self.forward},bwd={self.backward}")
        if self.dp != "none":
            parts.append(f"dp={self.dp}")
        for b, d, s in self.per_boundary:
            parts.append(f"b{b}.{d}={s}")
        return "|".join(parts)

    @classmethod
    def from_dict(cls, d: dict[str, Any] | str) -> "CompressionPlan":
        """From a matrix entry: a spec string (forward = backward = it) or a mapping."""
        if isinstance(d, str):
            return cls(forward=d, backward=d)
        if not isinstance(d, dict):
            raise ConfigError(f"compressor entry must be a spec string or a mapping, got {type(d).__name__}")
        unknown = set(d) - {"forward", "backward", "dp", "per_boundary", "both"}
        if unknown:
            raise ConfigError(
                f"compressor entry has unknown key(s) {sorted(unknown)}; valid keys: forward, backward, dp, both, per_boundary"
            )
        both = d.get("both")
        pb = []
        for b, dirs in (d.get("per_boundary") or {}).items():
            if not isinstance(dirs, dict):
                raise ConfigError(f"per_boundary[{b}] must map direction -> spec")
            for direction, spec in dirs.items():
                if direction not in ("forward", "backward"):
                    raise ConfigError(f"per_boundary[{b}]: direction {direction!r} must be forward or backward")
                pb.append((int(b), direction, str(spec)))
        return cls(
            forward=str(d.get("forward", both or "none")),
            backward=str(d.get("backward", both or "none")),
            dp=str(d.get("dp", "none")),
            per_boundary=tuple(sorted(pb)),
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"forward": self.forward, "backward": self.backward, "dp": self.dp}
        if self.per_boundary:
            pb: dict[str, dict[str, str]] = {}
            for b, d, s in self.per_boundary:
                pb.setdefault(str(b), {})[d] = s
            out["per_boundary"] = pb
        return out

    def canonical(self) -> "CompressionPlan":
        """Same plan with every spec normalized and validated (raises ConfigError)."""
        from compressors.registry import canonical_spec

        def canon(s: str, where: str) -> str:
            try:
                return canonical_spec(s)
            except CompressorError as e:
                raise ConfigError(f"{where} compressor: {e}") from None

        return CompressionPlan(
            forward=canon(self.forward, "forward"),
            backward=canon(self.backward, "backward"),
            dp=canon(self.dp, "dp"),
            per_boundary=tuple((b, d, canon(s, f"boundary {b} {d}")) for b, d, s in self.per_boundary),
        )


@dataclass(frozen=True)
class CellConfig:
    """One cell of the matrix.

    Attributes:
        task, tier, seed: what to train and how much.
        plan: compressors per direction / boundary.
        stages: pipeline stages (None: the task's default).
        dp: data-parallel replicas (pipeline ranks x dp processes in torchrun mode).
        schedule: a name in ``suite.pipeline.schedules.SCHEDULES`` (``gpipe``, ``1f1b``, ``interleaved_1f1b``).
        microbatches: M (None: the tier's default).
        compress_warmup_steps: the first N steps send uncompressed.
        eval_uncompressed: also evaluate with every boundary uncompressed.
        mode: ``single`` (all stages in one process) or ``torchrun`` (one process per stage).
        device: ``cpu``, ``cuda`` or ``auto``.
        steps: override the tier's step count (None: the tier's).
        plugins: plugin modules or ``.py`` files imported before building compressors.
        data_dir: where the task reads its data (not part of the cell's identity).
        time_limit_s: a cell running longer fails with a timeout (not part of identity).
        comm_timeout_s: a stalled peer fails the run after this many seconds.
        check_consistency: debug mode, the sender/receiver consistency check at every boundary
            (``suite.pipeline.boundary``; ``mpcbench run --check-consistency``). A check, not a different
            measurement: not part of the identity, so it does not change the cell key.
        nnodes: hosts the torchrun job spans (torchrun only; must divide stages x dp). With ``link`` and
            nnodes 1 it becomes one node per process.
        node_rank: this host's index (0 hosts the rendezvous and stores the result; not identity).
        rdzv_endpoint: ``HOST:PORT`` of the c10d rendezvous on node 0 (real hosts; not identity).
        link: emulate hosts on this machine, one network namespace per node, each limited to this
            rate both ways (a network profile name or a rate such as ``250mbit``; root only).
    """

    task: str
    tier: str = "smoke"
    seed: int = 0
    plan: CompressionPlan = field(default_factory=CompressionPlan)
    stages: int | None = None
    dp: int = 1
    schedule: str = "1f1b"
    microbatches: int | None = None
    compress_warmup_steps: int = 0
    eval_uncompressed: bool = True
    mode: str = "single"
    device: str = "cpu"
    steps: int | None = None
    plugins: tuple[str, ...] = ()
    data_dir: str | None = None
    time_limit_s: float | None = None
    comm_timeout_s: float = 120.0
    check_consistency: bool = False
    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str | None = None
    link: str | None = None

    # fields that do not change what is measured: excluded from the cell key
    _NON_IDENTITY = ("data_dir", "time_limit_s", "comm_timeout_s", "check_consistency", "node_rank", "rdzv_endpoint")
    # fields left out of the identity at their default, so older records keep their keys
    _IDENTITY_IF_SET = {"nnodes": 1, "link": None}

    def validate(self) -> "CellConfig":
        """Check names and ranges; return the config with canonical compressor specs."""
        from compressors.registry import load_plugin
        from tasks import available_tasks, get_task_class

        for p in self.plugins:  # first: a plugin may register compressors or tasks
            try:
                load_plugin(p)
            except CompressorError as e:
                raise ConfigError(str(e)) from None
        if self.task not in available_tasks():
            raise ConfigError(f"unknown task {self.task!r}{did_you_mean(self.task, available_tasks())}; "
                              f"valid tasks: {', '.join(available_tasks())}")
        cls = get_task_class(self.task)
        if self.tier not in cls.tiers:
            raise ConfigError(f"unknown tier {self.tier!r}{did_you_mean(self.tier, cls.tiers)}; "
                              f"valid tiers: {', '.join(cls.tiers)}")
        if self.schedule not in SCHEDULES:
            raise ConfigError(f"unknown schedule {self.schedule!r}; valid schedules: {', '.join(SCHEDULES)}")
        if self.mode not in MODES:
            raise ConfigError(f"unknown mode {self.mode!r}; valid modes: {', '.join(MODES)}")
        if self.device not in DEVICES:
            raise ConfigError(f"unknown device {self.device!r}; valid devices: {', '.join(DEVICES)}")
        n = self.stages or cls.default_stages
        if n not in cls.stage_choices:
            raise ConfigError(
                f"task {self.task!r} cannot be split into {n} stages; valid: {', '.join(map(str, cls.stage_choices))}"
            )
        for name, v, lo in (("dp", self.dp, 1), ("seed", self.seed, 0), ("compress_warmup_steps", self.compress_warmup_steps, 0)):
            if not isinstance(v, int) or v < lo:
                raise ConfigError(f"{name}={v!r} must be an integer >= {lo}")
        if self.seed > MAX_SEED:  # records refuse larger seeds (suite.results.records)
            raise ConfigError(f"seed={self.seed} is over the limit of {MAX_SEED}")
        if self.microbatches is not None and (not isinstance(self.microbatches, int) or self.microbatches < 1):
            raise ConfigError(f"microbatches={self.microbatches!r} must be an integer >= 1")
        budget = cls.tiers[self.tier]
        m = self.microbatches or budget.microbatches
        if budget.batch_size % m:  # caught here, before any training, rather than in every cell
            raise ConfigError(
                f"microbatches={m} does not divide the {self.tier} batch size {budget.batch_size} of task "
                f"{self.task!r}; pick a divisor of {budget.batch_size}"
            )
        try:  # the schedule exists and fits (stages per rank, micro-batches)
            build_schedule(self.schedule, n, m)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        if not isinstance(self.check_consistency, bool):
            raise ConfigError(f"check_consistency={self.check_consistency!r} must be true or false")
        if self.steps is not None and (not isinstance(self.steps, int) or self.steps < 1):
            raise ConfigError(f"steps={self.steps!r} must be an integer >= 1")
        for b, _, _ in self.plan.per_boundary:
            if not 0 <= b < n - 1:
                raise ConfigError(f"per_boundary boundary {b} out of range: {n} stages have boundaries 0..{n - 2}")
        return replace(self, plan=self.plan.canonical(), nnodes=self._check_hosts(n))

    def _check_hosts(self, n_stages: int) -> int:
        """Validate nnodes / node_rank / rdzv_endpoint / link; return nnodes (one per process with a link and no
        nnodes given)."""
        nproc = pipeline_ranks(self.schedule, n_stages) * self.dp
        nnodes = self.nnodes
        for name, v, lo in (("nnodes", nnodes, 1), ("node_rank", self.node_rank, 0)):
            if not isinstance(v, int) or isinstance(v, bool) or v < lo:
                raise ConfigError(f"{name}={v!r} must be an integer >= {lo}")
        if self.link is not None:
            from .netns import parse_link

            try:
                parse_link(self.link)
            except ValueError as e:
                raise ConfigError(str(e)) from None
            nnodes = nproc if nnodes == 1 else nnodes
        if nnodes > 1 or self.link is not None:
            if self.mode != "torchrun":
                raise ConfigError(f"nnodes={nnodes} / link={self.link!r} need mode=torchrun (one process per stage); use --mode torchrun")
            if nproc % nnodes:
                raise ConfigError(f"nnodes={nnodes} must divide the job's {nproc} processes (pipeline ranks x dp; spread evenly over hosts)")
        if self.node_rank >= nnodes:
            raise ConfigError(f"node_rank={self.node_rank} must be < nnodes={nnodes}")
        if self.link is None and nnodes > 1:
            if not self.rdzv_endpoint or not re.fullmatch(r"\[?[\w.\-:]+\]?:\d{1,5}", self.rdzv_endpoint):
                raise ConfigError(
                    f"nnodes={nnodes} on real hosts needs rdzv_endpoint=HOST:PORT (node 0's address), got {self.rdzv_endpoint!r}"
                )
        return nnodes

    @property
    def n_stages(self) -> int:
        from tasks import get_task_class

        return self.stages or get_task_class(self.task).default_stages

    def identity(self) -> dict[str, Any]:
        """The fields that define what is measured (for the cell key and records)."""
        d = self.to_dict()
        for k in self._NON_IDENTITY:
            d.pop(k, None)
        for k, default in self._IDENTITY_IF_SET.items():
            if d.get(k) == default:
                d.pop(k, None)
        return d

    def key(self) -> str:
        """Stable hash of the identity: a rerun with the same key is skipped."""
        blob = json.dumps(self.identity(), sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    @property
    def cell_id(self) -> str:
        """Readable id, e.g. ``cifar10-topk(ratio=0.1)-seed0``."""
        return f"{self.task}-{self.plan.label}-seed{self.seed}"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["plan"] = self.plan.to_dict()
        d["plugins"] = list(self.plugins)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "CellConfig":
        d = dict(d)
        d["plan"] = CompressionPlan.from_dict(d.get("plan", {}))
        d["plugins"] = tuple(d.get("plugins", ()))
        known = set(cls.__dataclass_fields__)
        unknown = set(d) - known
        if unknown:
            raise ConfigError(f"unknown cell config field(s) {sorted(unknown)}; valid: {', '.join(sorted(known))}")
        return cls(**d)
