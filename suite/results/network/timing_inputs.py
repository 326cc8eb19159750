"""What the network model reads about one run, as stored in its record (``timing_inputs``).

Per-action costs (:class:`ActionCost`, :class:`StageCost`), how the transport moves a payload
(:class:`Protocol`), the traffic of each step (:class:`StepLoad`), and :class:`TimingInputs`
that holds them, with its JSON form (version 2) and the migration from version-1 inputs (the
closed-form era). Pure Python (no torch).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from suite.schedules import DEFAULT_SCHEDULE, SCHEDULES, build_schedule

__all__ = [
    "ActionCost",
    "CodecSample",
    "StageCost",
    "Protocol",
    "PROTOCOLS",
    "LinkLoad",
    "DPLoad",
    "TPLoad",
    "StepLoad",
    "TimingInputs",
    "encode_steps",
    "mean_load",
    "interpolate_target_step",
    "quantile",
]


@dataclass(frozen=True)
class ActionCost:
    """Seconds of one action on one stage, excluding waiting for messages: decompress what
    it received (``pre_s``), compute (``compute_s``), compress what it sends (``post_s``)."""

    pre_s: float = 0.0
    compute_s: float = 0.0
    post_s: float = 0.0

    @property
    def busy_s(self) -> float:
        return self.pre_s + self.compute_s + self.post_s


@dataclass(frozen=True)
class CodecSample:
    """One codec site of a run (``"b0.forward.compress"``, ``"dp.s1.decompress"``,
    ``"tp.s0.backward.compress"``): thread CPU seconds of its sampled calls (``codec_s``) and of a
    copy of the same raw bytes timed right after each (``copy_s``), the number of such calls, their
    mean raw bytes, and the site's calls per training step of one replica (``calls_per_step``).
    ``multiple`` is what the time model prices the codec by: the median over sampled calls of the
    call's seconds over those of the copy timed right after it (``ratio_median``: each pair saw the
    same conditions, and the median ignores the odd slow sample), else the ratio of the sums.
    ``codec_q25`` and ``copy_median`` are kept beside it."""

    codec_s: float
    copy_s: float
    samples: int
    nbytes: float
    calls_per_step: float = 0.0
    codec_q25: float = 0.0
    copy_median: float = 0.0
    ratio_median: float = 0.0

    @property
    def multiple(self) -> float | None:
        if self.samples <= 0:
            return None
        if self.ratio_median > 0:
            return self.ratio_median
        return self.codec_s / self.copy_s if self.copy_s > 0 else None


@dataclass(frozen=True)
class StageCost:
    """Measured cost of one stage: per action kind (``F``, ``B``, any other kind such as a
    weight-gradient ``W``) and per step (optimizer)."""

    actions: Mapping[str, ActionCost]
    optimizer_s: float = 0.0
    # seconds of the data-parallel reduction's local work on a step that reduces outside the
    # backward (the outer loop's pseudo-gradient, code, outer optimizer; a single replica's code),
    # added on the steps whose DPLoad carries bytes; 0 for DDP's per-step hook (inside B)
    sync_s: float = 0.0

    def of(self, kind: str) -> ActionCost:
        return self.actions.get(kind, ActionCost())


@dataclass(frozen=True)
class Protocol:
    """How the transport moves one payload (see the module docstring).

    messages: messages per payload (0: as counted per link and direction in the step's
    loads, rounded: 2 = a length prefix then the framed buffer, 1 = a fixed-size body);
    header_bytes: size of each message before the last; post_ahead: the receiver posts an
    action's first receive when the previous action starts.
    """

    name: str
    messages: int = 1
    header_bytes: int = 0
    post_ahead: bool = False


PROTOCOLS: dict[str, Protocol] = {
    p.name: p
    for p in (
        Protocol("measured", messages=0, header_bytes=8),  # the runtime today: see LinkLoad's message counts
        Protocol("length_prefix", messages=2, header_bytes=8),  # int64 length, then the framed buffer
        Protocol("single", messages=1),  # one message, receive posted when the action starts
        Protocol("preposted", messages=1, post_ahead=True),  # one message, receive posted one action ahead
    )
}


@dataclass(frozen=True)
class LinkLoad:
    """Per micro-batch traffic of one boundary (one pipeline replica): wire bytes and messages
    (``torch.distributed`` sends; version-1 records counted payloads)."""

    fwd_bytes: float
    bwd_bytes: float
    fwd_messages: float = 1.0
    bwd_messages: float = 1.0


@dataclass(frozen=True)
class DPLoad:
    """Per step data-parallel traffic of one stage (bytes contributed by one replica)."""

    allreduce_bytes: float = 0.0
    allreduce_ops: float = 0.0
    allgather_bytes: float = 0.0
    allgather_ops: float = 0.0


@dataclass(frozen=True)
class TPLoad:
    """Per micro-batch tensor-parallel traffic of one stage, sent by one TP rank over the
    intra-host link: during its forward (``fwd_*``) and during its backward (``bwd_*``)."""

    fwd_bytes: float = 0.0
    bwd_bytes: float = 0.0
    fwd_messages: float = 0.0
    bwd_messages: float = 0.0


@dataclass(frozen=True)
class StepLoad:
    """Traffic of one training step: one LinkLoad per boundary, one DPLoad per stage, one
    TPLoad per stage in tensor-parallel runs (empty otherwise)."""

    links: tuple[LinkLoad, ...]
    dp: tuple[DPLoad, ...] = ()
    tp: tuple[TPLoad, ...] = ()


@dataclass
class TimingInputs:
    """Everything the model needs about one run (stored in the record for re-modeling).

    ``schedule``: per pipeline rank, the action list the runtime executed each step
    (``Schedule.to_lists``: ``"0F0"``, ``"1B3"``...; stage s runs on rank ``s % len(schedule)``).
    ``stages``: per-action costs from a low quantile over steps (``robust``); ``mean_stages``
    the same from means (what the measured wall-clock steps average over).
    ``steps`` is run-length encoded: ``steps[i]`` is the load of ``counts[i]`` consecutive
    training steps (see :func:`encode_steps`). ``target_step``: the (interpolated, possibly
    fractional) number of steps at which the run first met its target; None if never.
    ``measurement``: how the costs were taken (load average, CPU vs wall, contended flag).
    """

    schedule: list[list[str]]
    stages: list[StageCost]
    steps: list[StepLoad]
    microbatches: int
    replicas: int
    protocol: Protocol = PROTOCOLS["length_prefix"]
    mean_stages: list[StageCost] = field(default_factory=list)
    warmup_steps: int = 0  # uncompressed steps at the start (excluded from step_s)
    counts: list[int] = field(default_factory=list)  # empty: one step per load
    target_step: float | None = None
    measurement: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    # codec site -> its sampled calls against a copy (runs since the time model; empty before)
    codec: dict[str, CodecSample] = field(default_factory=dict)

    def runs(self) -> list[tuple[StepLoad, int]]:
        return list(zip(self.steps, self.counts or [1] * len(self.steps)))

    @property
    def n_steps(self) -> int:
        return sum(c for _, c in self.runs())

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (lists, not tuples): equal to its own JSON round trip."""
        d = asdict(self)
        d["version"] = 2
        return json.loads(json.dumps(d))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TimingInputs:
        """Inverse of :meth:`to_dict`; also reads version-1 inputs (closed-form era, see
        :func:`_from_v1`)."""
        if "schedule" not in d:
            return _from_v1(d)

        def stage(s: Mapping[str, Any]) -> StageCost:
            return StageCost(
                {k: ActionCost(**a) for k, a in s["actions"].items()}, s.get("optimizer_s", 0.0), s.get("sync_s", 0.0)
            )

        return cls(
            schedule=[list(a) for a in d["schedule"]],
            stages=[stage(s) for s in d["stages"]],
            steps=[_step_load(s) for s in d["steps"]],
            microbatches=d["microbatches"],
            replicas=d["replicas"],
            protocol=Protocol(**d["protocol"]) if d.get("protocol") else PROTOCOLS["length_prefix"],
            mean_stages=[stage(s) for s in d.get("mean_stages", [])],
            warmup_steps=d.get("warmup_steps", 0),
            counts=list(d.get("counts", [])),
            target_step=d.get("target_step"),
            measurement=dict(d.get("measurement", {})),
            extra=dict(d.get("extra", {})),
            codec={str(k): CodecSample(**v) for k, v in dict(d.get("codec", {})).items()},
        )


def _step_load(s: Mapping[str, Any]) -> StepLoad:
    return StepLoad(
        tuple(LinkLoad(**l) for l in s["links"]),
        tuple(DPLoad(**p) for p in s["dp"]),
        tuple(TPLoad(**t) for t in s.get("tp", ())),
    )


def _from_v1(d: Mapping[str, Any]) -> TimingInputs:
    """Version-1 inputs stored per stage only compute and compression per micro-batch: split
    compute 1:2 between forward and backward (a backward costs about two forwards) and
    compression half before / half after, and assume the default schedule unless
    ``extra['schedule']`` says otherwise."""
    S, M = len(d["stages"]), d["microbatches"]
    name = d.get("extra", {}).get("schedule", DEFAULT_SCHEDULE)
    if name not in SCHEDULES or SCHEDULES[name].chunks != 1:  # v1 knew one stage per rank only
        name = DEFAULT_SCHEDULE
    stages = []
    for s in d["stages"]:
        c, z = s.get("compute_s", 0.0), s.get("compress_s", 0.0)
        a = {"F": ActionCost(z / 4, c / 3, z / 4), "B": ActionCost(z / 4, 2 * c / 3, z / 4)}
        stages.append(StageCost(a, s.get("optimizer_s", 0.0)))
    return TimingInputs(
        schedule=build_schedule(name, S, M).to_lists(),
        stages=stages,
        steps=[_step_load(s) for s in d["steps"]],
        microbatches=M,
        replicas=d["replicas"],
        warmup_steps=d.get("warmup_steps", 0),
        counts=list(d.get("counts", [])),
        extra={**d.get("extra", {}), "converted_from_v1": True},
    )


def mean_load(loads: list[StepLoad]) -> StepLoad:
    """Field-wise mean of equally shaped step loads."""

    def mean(objs, cls):
        return cls(**{k: sum(getattr(o, k) for o in objs) / len(objs) for k in cls.__dataclass_fields__})

    return StepLoad(
        tuple(mean([l.links[i] for l in loads], LinkLoad) for i in range(len(loads[0].links))),
        tuple(mean([l.dp[i] for l in loads], DPLoad) for i in range(len(loads[0].dp))),
        tuple(mean([l.tp[i] for l in loads], TPLoad) for i in range(len(loads[0].tp))),
    )


def encode_steps(loads: list[StepLoad], warmup_steps: int = 0, max_runs: int = 256) -> tuple[list[StepLoad], list[int]]:
    """Run-length encode per-step loads (equal consecutive steps merge). A phase (warm-up,
    then the rest) with more than ``max_runs`` distinct runs, i.e. variable-size payloads,
    is averaged over ``max_runs`` contiguous chunks instead, which bounds the stored size
    (and the simulations per re-model); this only smooths step-to-step byte variation."""
    out_loads: list[StepLoad] = []
    out_counts: list[int] = []
    for phase in (loads[:warmup_steps], loads[warmup_steps:]):
        runs: list[list[Any]] = []
        for load in phase:
            if runs and runs[-1][0] == load:
                runs[-1][1] += 1
            else:
                runs.append([load, 1])
        if len(runs) > max_runs:
            bounds = [round(i * len(phase) / max_runs) for i in range(max_runs + 1)]
            runs = [[mean_load(phase[a:b]), b - a] for a, b in zip(bounds, bounds[1:]) if b > a]
        out_loads += [r[0] for r in runs]
        out_counts += [r[1] for r in runs]
    return out_loads, out_counts


def interpolate_target_step(
    points: Iterable[tuple[float, float]], target: float, higher_is_better: bool
) -> float | None:
    """Steps at which a curve of (step, metric) evaluation points first meets ``target``,
    linearly interpolated between the last point below it and the first at or past it
    (from step 0 when the first evaluation already meets it); None if never."""
    prev: tuple[float, float] | None = None
    for step, metric in points:
        met = metric >= target if higher_is_better else metric <= target
        if met:
            if prev is None or prev[1] == metric:
                return float(step)
            frac = (target - prev[1]) / (metric - prev[1])
            return prev[0] + min(1.0, max(0.0, frac)) * (step - prev[0])
        if math.isfinite(metric):
            prev = (step, metric)
    return None


def quantile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (linear interpolation; 0.0 for no values)."""
    v = sorted(values)
    if not v:
        return 0.0
    x = q * (len(v) - 1)
    i = min(int(x), len(v) - 2) if len(v) > 1 else 0
    return v[i] if len(v) == 1 else v[i] + (x - i) * (v[i + 1] - v[i])
