"""Network profiles and the pipeline timing model: "how long would this run take over link X?".

The runtime measures, per stage, the time spent computing (forward + backward) and
compressing per micro-batch and the optimizer time per step, and counts the wire bytes of
every boundary and data-parallel collective per step. This module turns those into a
modeled step time under a named network profile. The model (docs/ARCHITECTURE.md has
the derivation):

A step pushes M identical micro-batches through a chain of *servers*: the S stages and
the S-1 links between them. Per micro-batch, stage s is busy ``tau_s`` = compute +
compression, link b carries one forward message of ``wf_b`` bytes and one backward
message of ``wb_b`` bytes::

    f_b = L + 8 * wf_b / BW          g_b = L + 8 * wb_b / BW         (seconds)

For M identical jobs through servers in series the makespan of a synchronous pipeline is
``sum of the servers' times + (M - 1) * the slowest server``: the first micro-batch crosses
every server (the fill/drain bubble), the other M - 1 follow at the bottleneck's pace::

    T_pipe = sum_s tau_s + sum_b (f_b + g_b) + (M - 1) * max(max_s tau_s, max_b max(f_b, g_b))

Links are full duplex, so in steady state a link's forward and backward messages overlap
(``max(f_b, g_b)``); communication overlaps other micro-batches' compute (asynchronous
sends). With uniform stages and free links this is the familiar GPipe/1F1B bubble
``(M + S - 1) * tau``. Then the step adds the slowest stage's optimizer time and the
slowest stage's data-parallel reduction (not overlapped with backward, a conservative
choice), using ring-collective costs for d replicas and n bytes contributed per replica::

    all-reduce:  2 (d - 1) / d * 8 n / BW + 2 (d - 1) L
    all-gather:  (d - 1) * 8 n / BW       + (d - 1) L

``comm_s`` of a step is its modeled time minus the same step on an infinitely fast network
(zero latency, infinite bandwidth): the part of the step the network is responsible for.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

__all__ = [
    "NetworkProfile",
    "PROFILES",
    "get_profile",
    "StageCost",
    "LinkLoad",
    "DPLoad",
    "StepLoad",
    "TimingInputs",
    "encode_steps",
    "pipeline_time",
    "dp_time",
    "step_time",
    "model_run",
]


@dataclass(frozen=True)
class NetworkProfile:
    """A network between neighbouring stages (and between data-parallel replicas).

    bandwidth_bps: link bandwidth in bits per second (each direction; full duplex).
    latency_s: one-way latency per message in seconds.
    """

    name: str
    bandwidth_bps: float
    latency_s: float

    def transfer_s(self, nbytes: float, messages: float = 1.0) -> float:
        """Seconds to move ``nbytes`` in ``messages`` messages over this link."""
        t = messages * self.latency_s
        if self.bandwidth_bps != math.inf:
            t += 8.0 * nbytes / self.bandwidth_bps
        return t


# Latencies are typical one-way figures for the kind of link each bandwidth stands for.
PROFILES: dict[str, NetworkProfile] = {
    p.name: p
    for p in (
        NetworkProfile("100Gbps", 100e9, 5e-6),  # InfiniBand / RoCE inside a cluster (RDMA, ~5 us)
        NetworkProfile("10Gbps", 10e9, 50e-6),  # datacenter Ethernet with TCP (~50 us)
        NetworkProfile("1Gbps", 1e9, 500e-6),  # office / campus LAN (~0.5 ms)
        NetworkProfile("100Mbps", 100e6, 10e-3),  # WAN between sites in one region (~10 ms)
        NetworkProfile("80Mbps", 80e6, 50e-3),  # consumer internet between volunteers (~50 ms)
    )
}
IDEAL = NetworkProfile("ideal", math.inf, 0.0)  # the compute-only reference for comm_s


def get_profile(name: str) -> NetworkProfile:
    """The profile called ``name``; unknown names list the valid ones."""
    if name not in PROFILES:
        raise KeyError(f"unknown network profile {name!r}; valid profiles: {', '.join(PROFILES)}")
    return PROFILES[name]


@dataclass(frozen=True)
class StageCost:
    """Measured cost of one stage: per micro-batch compute (fwd + bwd) and compression
    (compress + decompress of everything the stage sends or receives), per step optimizer."""

    compute_s: float
    compress_s: float = 0.0
    optimizer_s: float = 0.0

    @property
    def busy_s(self) -> float:
        return self.compute_s + self.compress_s


@dataclass(frozen=True)
class LinkLoad:
    """Per micro-batch traffic of one boundary (one pipeline replica): bytes and messages."""

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
class StepLoad:
    """Traffic of one training step: one LinkLoad per boundary, one DPLoad per stage."""

    links: tuple[LinkLoad, ...]
    dp: tuple[DPLoad, ...] = ()


def pipeline_time(stages: list[StageCost], links: Iterable[LinkLoad], microbatches: int, net: NetworkProfile) -> float:
    """Makespan of M micro-batches through stages and links (see the module docstring)."""
    links = list(links)
    if len(links) != max(0, len(stages) - 1):
        raise ValueError(f"{len(stages)} stages need {len(stages) - 1} links, got {len(links)}")
    tau = [s.busy_s for s in stages]
    f = [net.transfer_s(l.fwd_bytes, l.fwd_messages) for l in links]
    g = [net.transfer_s(l.bwd_bytes, l.bwd_messages) for l in links]
    bottleneck = max(tau + [max(a, b) for a, b in zip(f, g)], default=0.0)
    return sum(tau) + sum(f) + sum(g) + (microbatches - 1) * bottleneck


def dp_time(load: DPLoad, replicas: int, net: NetworkProfile) -> float:
    """Ring all-reduce / all-gather time of one stage's per-step data-parallel traffic."""
    d = replicas
    if d <= 1:
        return 0.0
    bw = net.bandwidth_bps
    t = 2 * (d - 1) * load.allreduce_ops * net.latency_s + (d - 1) * load.allgather_ops * net.latency_s
    if bw != math.inf:
        t += 2 * (d - 1) / d * 8 * load.allreduce_bytes / bw + (d - 1) * 8 * load.allgather_bytes / bw
    return t


def step_time(stages: list[StageCost], load: StepLoad, microbatches: int, replicas: int, net: NetworkProfile) -> float:
    """Modeled seconds of one training step: pipeline + slowest optimizer + slowest dp reduction."""
    t = pipeline_time(stages, load.links, microbatches, net)
    t += max((s.optimizer_s for s in stages), default=0.0)
    t += max((dp_time(d, replicas, net) for d in load.dp), default=0.0)
    return t


@dataclass
class TimingInputs:
    """Everything the model needs about one run (stored in the result for re-modeling).

    ``steps`` is run-length encoded: ``steps[i]`` is the load of ``counts[i]`` consecutive
    training steps (see :func:`encode_steps`).
    """

    stages: list[StageCost]
    steps: list[StepLoad]
    microbatches: int
    replicas: int
    warmup_steps: int = 0  # uncompressed steps at the start (excluded from step_s)
    counts: list[int] = field(default_factory=list)  # empty: one step per load
    extra: dict[str, Any] = field(default_factory=dict)

    def runs(self) -> list[tuple[StepLoad, int]]:
        return list(zip(self.steps, self.counts or [1] * len(self.steps)))

    @property
    def n_steps(self) -> int:
        return sum(c for _, c in self.runs())

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (lists, not tuples): equal to its own JSON round trip."""
        return json.loads(json.dumps(asdict(self)))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TimingInputs":
        return cls(
            stages=[StageCost(**s) for s in d["stages"]],
            steps=[
                StepLoad(tuple(LinkLoad(**l) for l in s["links"]), tuple(DPLoad(**p) for p in s["dp"]))
                for s in d["steps"]
            ],
            microbatches=d["microbatches"],
            replicas=d["replicas"],
            warmup_steps=d.get("warmup_steps", 0),
            counts=list(d.get("counts", [])),
            extra=d.get("extra", {}),
        )


def _mean_load(loads: list[StepLoad]) -> StepLoad:
    def mean(objs, cls):
        return cls(**{k: sum(getattr(o, k) for o in objs) / len(objs) for k in cls.__dataclass_fields__})

    return StepLoad(
        tuple(mean([l.links[i] for l in loads], LinkLoad) for i in range(len(loads[0].links))),
        tuple(mean([l.dp[i] for l in loads], DPLoad) for i in range(len(loads[0].dp))),
    )


def encode_steps(loads: list[StepLoad], warmup_steps: int = 0, max_runs: int = 256) -> tuple[list[StepLoad], list[int]]:
    """Run-length encode per-step loads (equal consecutive steps merge). A phase (warm-up,
    then the rest) with more than ``max_runs`` distinct runs, i.e. variable-size payloads,
    is averaged over ``max_runs`` contiguous chunks instead, which bounds the stored size;
    the model is linear in bytes except for the bottleneck ``max``, so this only smooths
    step-to-step variation within a chunk."""
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
            runs = [[_mean_load(phase[a:b]), b - a] for a, b in zip(bounds, bounds[1:]) if b > a]
        out_loads += [r[0] for r in runs]
        out_counts += [r[1] for r in runs]
    return out_loads, out_counts


def model_run(
    inputs: TimingInputs,
    profiles: dict[str, NetworkProfile] | None = None,
    reached_target_step: int | None = None,
) -> dict[str, dict[str, float | None]]:
    """Per profile: ``step_s`` (mean modeled step after the uncompressed warm-up),
    ``total_s`` (all steps), ``time_to_target_s`` (steps before the target was first met;
    None if never) and ``comm_s_per_step`` (step_s minus the same on an ideal network)."""
    profiles = PROFILES if profiles is None else profiles
    m, d = inputs.microbatches, inputs.replicas
    runs = inputs.runs()
    total_steps = sum(c for _, c in runs)
    warm = inputs.warmup_steps if inputs.warmup_steps < total_steps else 0
    ideal = [step_time(inputs.stages, load, m, d, IDEAL) for load, _ in runs]
    out: dict[str, dict[str, float | None]] = {}
    for name, net in profiles.items():
        times = [step_time(inputs.stages, load, m, d, net) for load, _ in runs]
        steady_s = steady_comm = 0.0
        done = total = 0.0
        ttt = None
        for (_, count), t, t0 in zip(runs, times, ideal):
            # steps [done, done + count) of this run; the warm-up ones don't count for step_s
            steady = max(0, min(count, done + count - warm))
            steady_s += steady * t
            steady_comm += steady * (t - t0)
            if reached_target_step is not None and ttt is None and done + count >= reached_target_step:
                ttt = total + (reached_target_step - done) * t
            total += count * t
            done += count
        n = max(1, total_steps - warm)
        out[name] = {"step_s": steady_s / n, "total_s": total, "time_to_target_s": ttt, "comm_s_per_step": steady_comm / n}
    return out
