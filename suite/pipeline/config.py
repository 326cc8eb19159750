"""Typed configuration of one benchmark cell: task x compressor plan x seed (+ placement).

Everything is validated before anything trains (``CellConfig.validate`` / ``resolve``; the plan
by :func:`suite.pipeline.plan.resolve_plan`), so that a bad name or parameter fails first,
with a one-line message.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from compressors.api import CompressorError, did_you_mean
from suite.results.records import MAX_SEED
from suite.schedules import DEFAULT_SCHEDULE, SCHEDULES, build_schedule, pipeline_ranks

from .errors import ConfigError
from .plan import DIRECTIONS, ROLE_OF_DIRECTION, CompressionPlan, Direction, ResolvedPlan, resolve_plan
from .sync import DPSync, parse_sync

__all__ = [
    "Direction",
    "DIRECTIONS",
    "ROLE_OF_DIRECTION",
    "CompressionPlan",
    "CellConfig",
    "ConfigError",
    "DPSync",
    "SCHEDULES",
    "MODES",
    "DEVICES",
]

MODES = ("single", "torchrun")  # all stages in one process, or one process per stage (and replica)
DEVICES = ("cpu", "cuda", "auto")


@dataclass(frozen=True)
class CellConfig:
    """One cell of the matrix.

    Attributes:
        task, tier, seed: what to train and how much.
        plan: compressors per direction / boundary.
        stages: pipeline stages (None: the task's default).
        dp: data-parallel replicas (pipeline ranks x dp processes in torchrun mode).
        tp: tensor-parallel ranks per stage (Megatron-style, ``suite.pipeline.tensor_parallel``); the
            job runs tp x pipeline ranks x dp processes under torchrun, and simulates the tp ranks of
            every stage in one process in single mode (same bytes).
        schedule: a name in ``suite.schedules.SCHEDULES`` (``gpipe``, ``1f1b``, ``interleaved_1f1b``).
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
        sync: how data-parallel replicas synchronize (``suite.pipeline.sync``): every step (default)
            or a DiLoCo-style outer loop, ``DPSync(mode="outer", h=8)`` (a string such as
            ``"outer(h=8)"`` is parsed on construction).
        optimizer: None trains with the task's optimizer; ``"sgd(momentum=0.9, clip=1.0)"`` with momentum
            SGD (``suite.pipeline.optimizer``; with DGC as the dp code the momentum and clip move into it).
        lr: the peak learning rate (None: the tier's), e.g. one point of a learning-rate sweep.
        model_size: one of the task's named ``model_sizes`` (the tier's budget on a model of that size:
            the scale ladder); None, the tier's own model. Identity only when set.
    """

    task: str
    tier: str = "smoke"
    seed: int = 0
    plan: CompressionPlan = field(default_factory=CompressionPlan)
    stages: int | None = None
    dp: int = 1
    tp: int = 1
    schedule: str = DEFAULT_SCHEDULE
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
    sync: DPSync = field(default_factory=DPSync)
    optimizer: str | None = None
    lr: float | None = None
    model_size: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.sync, DPSync):  # a string from the CLI, a matrix entry or a stored config
            object.__setattr__(self, "sync", parse_sync(self.sync))

    # fields that do not change what is measured: excluded from the cell key
    _NON_IDENTITY = ("data_dir", "time_limit_s", "comm_timeout_s", "check_consistency", "node_rank", "rdzv_endpoint")
    # fields left out of the identity at their default, so older records keep their keys
    _IDENTITY_IF_SET = {
        "nnodes": 1,
        "link": None,
        "tp": 1,
        "sync": "step",
        "optimizer": None,
        "lr": None,
        "model_size": None,
    }

    def resolve(self) -> tuple[CellConfig, ResolvedPlan]:
        """Check every field and resolve the plan once (:func:`suite.pipeline.plan.resolve_plan`).

        Returns the config with canonical compressor specs and the resolved plan. A plan the
        task cannot run (a compressor requires a model feature it lacks) is returned with
        ``not_applicable`` set, so the runner can skip the cell; :meth:`validate` refuses it.
        """
        from compressors.registry import load_plugin
        from tasks import available_tasks, get_task_class
        from tasks.api import TaskError

        for p in self.plugins:  # first: a plugin may register compressors or tasks
            try:
                load_plugin(p)
            except CompressorError as e:
                raise ConfigError(str(e)) from None
        if self.task not in available_tasks():
            raise ConfigError(
                f"unknown task {self.task!r}{did_you_mean(self.task, available_tasks())}; "
                f"valid tasks: {', '.join(available_tasks())}"
            )
        cls = get_task_class(self.task)
        if self.tier not in cls.tiers:
            raise ConfigError(
                f"unknown tier {self.tier!r}{did_you_mean(self.tier, cls.tiers)}; valid tiers: {', '.join(cls.tiers)}"
            )
        if self.schedule not in SCHEDULES:
            raise ConfigError(f"unknown schedule {self.schedule!r}; valid schedules: {', '.join(SCHEDULES)}")
        if self.mode not in MODES:
            raise ConfigError(f"unknown mode {self.mode!r}; valid modes: {', '.join(MODES)}")
        if self.device not in DEVICES:
            raise ConfigError(f"unknown device {self.device!r}; valid devices: {', '.join(DEVICES)}")
        if self.model_size is not None and self.model_size not in cls.model_sizes:
            raise ConfigError(
                f"task {self.task!r} has no model size {self.model_size!r}"
                f"{did_you_mean(self.model_size, cls.model_sizes)}; valid: {', '.join(cls.model_sizes) or 'none'}"
            )
        n = self.stages or cls.default_stages
        if n not in cls.stage_choices:
            raise ConfigError(
                f"task {self.task!r} cannot be split into {n} stages; valid: {', '.join(map(str, cls.stage_choices))}"
            )
        for name, v, lo in (
            ("dp", self.dp, 1),
            ("tp", self.tp, 1),
            ("seed", self.seed, 0),
            ("compress_warmup_steps", self.compress_warmup_steps, 0),
        ):
            if not isinstance(v, int) or v < lo:
                raise ConfigError(f"{name}={v!r} must be an integer >= {lo}")
        if self.seed > MAX_SEED:  # records refuse larger seeds (suite.results.records)
            raise ConfigError(f"seed={self.seed} is over the limit of {MAX_SEED}")
        budget = cls.tiers[self.tier]
        try:  # caught here, before any training, rather than in every cell
            m = budget.resolve_microbatches(self.microbatches)
        except TaskError as e:
            raise ConfigError(f"{e} (task {self.task!r}, {self.tier} tier)") from None
        try:  # the schedule exists and fits (stages per rank, micro-batches)
            build_schedule(self.schedule, n, m)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        if not isinstance(self.check_consistency, bool):
            raise ConfigError(f"check_consistency={self.check_consistency!r} must be true or false")
        if self.steps is not None and (not isinstance(self.steps, int) or self.steps < 1):
            raise ConfigError(f"steps={self.steps!r} must be an integer >= 1")
        if self.mode == "single" and self.dp != 1:
            raise ConfigError(
                f"dp={self.dp} needs mode=torchrun (one process per stage and replica); single mode runs dp=1"
            )
        nnodes = self._check_hosts(n)
        resolved = resolve_plan(self.plan, cls, n, self.dp, self.tp, outer=self.sync.outer)
        optimizer = self._check_optimizer(resolved.plan.dp, n)
        lr = None if self.lr is None else float(self.lr)  # 1 and 1.0 are one cell
        return replace(self, plan=resolved.plan, nnodes=nnodes, optimizer=optimizer, lr=lr), resolved

    def _check_optimizer(self, dp_spec: str, n_stages: int) -> str | None:
        """Validate ``lr`` and ``optimizer`` (with the dp code it runs beside); the optimizer's canonical text."""
        from .optimizer import MOMENTUM_CODES, parse_optimizer

        if self.lr is not None and (
            isinstance(self.lr, bool) or not isinstance(self.lr, (int, float)) or not 0 < self.lr < 100
        ):
            raise ConfigError(f"lr={self.lr!r} must be a number in (0, 100)")
        if self.optimizer is None:
            from compressors.spec import parse_spec

            if parse_spec(dp_spec).name in MOMENTUM_CODES:
                raise ConfigError(
                    f"dp code {dp_spec} applies momentum SGD's momentum itself: give the optimizer, "
                    "e.g. --optimizer 'sgd(momentum=0.9)'"
                )
            return None
        opt = parse_optimizer(self.optimizer)
        opt.check_code(dp_spec, n_stages, self.tp, self.compress_warmup_steps)
        return str(opt)

    def validate(self) -> CellConfig:
        """Check names and ranges, resolve the plan; return the config with canonical compressor specs.

        Raises :class:`ConfigError` (one line) for anything that would fail later, a plan the
        task cannot run included."""
        cfg, resolved = self.resolve()
        if resolved.not_applicable:
            raise ConfigError(resolved.not_applicable)
        return cfg

    def _check_hosts(self, n_stages: int) -> int:
        """Validate nnodes / node_rank / rdzv_endpoint / link; return nnodes (one per process with a link and no
        nnodes given)."""
        nproc = pipeline_ranks(self.schedule, n_stages) * self.dp * self.tp
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
                raise ConfigError(
                    f"nnodes={nnodes} / link={self.link!r} need mode=torchrun (one process per stage); use --mode torchrun"
                )
            if nproc % nnodes:
                raise ConfigError(
                    f"nnodes={nnodes} must divide the job's {nproc} processes (tp x pipeline ranks x dp; spread evenly over hosts)"
                )
        if self.node_rank >= nnodes:
            raise ConfigError(f"node_rank={self.node_rank} must be < nnodes={nnodes}")
        if self.link is None and nnodes > 1:
            if not self.rdzv_endpoint or not re.fullmatch(r"\[?[\w.\-:]+\]?:\d{1,5}", self.rdzv_endpoint):
                raise ConfigError(
                    f"nnodes={nnodes} on real hosts needs rdzv_endpoint=HOST:PORT (node 0's address), got {self.rdzv_endpoint!r}"
                )
        return nnodes

    @property
    def n_procs(self) -> int:
        """Processes of the torchrun job: tp x pipeline ranks x dp (``suite.pipeline.placement``)."""
        return pipeline_ranks(self.schedule, self.n_stages) * self.dp * self.tp

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
        """Readable id, e.g. ``cifar10-topk(ratio=0.1)-seed0`` (``cifar10-w16-topk-seed0`` at a model size)."""
        size = f"-{self.model_size}" if self.model_size is not None else ""
        return f"{self.task}{size}-{self.plan.label}-seed{self.seed}"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["plan"] = self.plan.to_dict()
        d["plugins"] = list(self.plugins)
        d["sync"] = str(self.sync)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CellConfig:
        d = dict(d)
        d["plan"] = CompressionPlan.from_dict(d.get("plan", {}))
        d["plugins"] = tuple(d.get("plugins", ()))
        known = set(cls.__dataclass_fields__)
        unknown = set(d) - known
        if unknown:
            raise ConfigError(f"unknown cell config field(s) {sorted(unknown)}; valid: {', '.join(sorted(known))}")
        return cls(**d)
