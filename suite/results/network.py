"""Network profiles and the pipeline time model: "how long would this run take over link X?".

The model is a small discrete-event simulation of one training step, run over the very
per-stage action lists the runtime executed (stored in the record), with:

* **per-action costs** measured in the run: for every stage and action kind (``F``/``B``)
  the seconds spent decompressing what it received (``pre_s``), computing (``compute_s``)
  and compressing what it sends (``post_s``), taken as a low quantile over the measured
  steps and micro-batches (robust to a shared, loaded machine; the mean is kept too);
* **messages** as the transport sends them: a payload of ``n`` wire bytes is
  ``protocol.messages`` messages (``header_bytes`` each, the last one carrying the rest);
  a message costs ``latency + 8 * bytes / bandwidth``;
* **receiver-posted sends** (gloo's TCP pair, NCCL alike): a message leaves only after the
  receiver has posted the matching receive and that notice (a zero-byte control message)
  reached the sender; the receiver posts message ``i + 1`` only when message ``i`` arrived
  (a length prefix, then the body), the first one when the action starts (or, with
  ``protocol.post_ahead``, when the previous action starts);
* **streams** between two ranks that carry one message at a time per direction (FIFO in the
  order messages become ready; control messages queue like data: one TCP connection);
* **hosts**: every pipeline rank is a host with one full-duplex NIC of the profile's bandwidth
  each way. The messages on the wire at one moment share the NICs they cross, max-min fairly:
  a middle stage that sends activations forward while it sends gradients back sends each at
  half the rate (on the emulated links of ``--link`` this took the 4-stage cell's error from
  1.08-1.13 to 1.02-1.06; docs/ARCHITECTURE.md).

A stage runs its actions in order; a send does not block it (asynchronous sends). After its
last action a rank reduces its stages' gradients across the data-parallel replicas, ring step
by ring step on the same NICs (so the reduction shares the wire with the pipeline's last
gradients still in flight), and steps its optimizer; the step ends when the slowest rank does.
Alone on the wire a reduction costs the ring formula (``dp_time``)::

    all-reduce:  2 (d - 1) / d * 8 n / BW + 2 (d - 1) L
    all-gather:  (d - 1) * 8 n / BW       + (d - 1) L

``comm_s`` of a step is its modeled time minus the same step on an infinitely fast network.

Re-modeling a stored record (any bandwidth / latency, e.g. the leaderboard's slider)::

    from suite.results.network import NetworkProfile, model_record
    model_record(record["timing_inputs"], NetworkProfile("x", 20e6, 2e-3))
    # -> {"step_s", "total_s", "time_to_target_s", "comm_s_per_step"}

This module is pure Python (no torch): the leaderboard imports it.
"""

from __future__ import annotations

import heapq
import json
import math
import re
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

__all__ = [
    "MODEL_VERSION",
    "NetworkProfile",
    "PROFILES",
    "IDEAL",
    "get_profile",
    "ActionCost",
    "StageCost",
    "Protocol",
    "PROTOCOLS",
    "LinkLoad",
    "DPLoad",
    "StepLoad",
    "TimingInputs",
    "encode_steps",
    "simulate_step",
    "dp_time",
    "step_time",
    "model_run",
    "model_record",
    "run_step_times",
    "interpolate_target_step",
    "quantile",
]


# Which model computed a record's ``modeled`` times (stored next to them as ``model_version``);
# bump it when the same inputs give other times. 1: closed form; 2: the simulation with one
# link per pair of ranks; 3: ranks' NICs shared by their concurrent messages and reductions.
# The leaderboard re-models records of an older model, so one board never mixes two models.
MODEL_VERSION = 3


@dataclass(frozen=True)
class NetworkProfile:
    """A network between neighbouring stages (and between data-parallel replicas).

    bandwidth_bps: each host's NIC bandwidth in bits per second (each direction; full duplex).
    latency_s: one-way latency per message in seconds.
    """

    name: str
    bandwidth_bps: float
    latency_s: float

    def serialize_s(self, nbytes: float) -> float:
        """Seconds the link is busy putting ``nbytes`` on the wire."""
        return 0.0 if self.bandwidth_bps == math.inf else 8.0 * nbytes / self.bandwidth_bps


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


# --- model inputs ----------------------------------------------------------------------------------


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
class StageCost:
    """Measured cost of one stage: per action kind (``F``, ``B``, any other kind such as a
    weight-gradient ``W``) and per step (optimizer)."""

    actions: Mapping[str, ActionCost]
    optimizer_s: float = 0.0

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
class StepLoad:
    """Traffic of one training step: one LinkLoad per boundary, one DPLoad per stage."""

    links: tuple[LinkLoad, ...]
    dp: tuple[DPLoad, ...] = ()


# --- the simulation ---------------------------------------------------------------------------------


_ACTION = re.compile(r"^(\d+)([A-Z])(\d+)$")
_RECEIVES = {"F": -1, "B": 1, "I": 1}  # stage offset a kind receives from (W receives nothing)


def _parse_action(a: str) -> tuple[int, str, int]:
    """``"1F3"`` (stage 1, forward, micro-batch 3) -> (1, "F", 3), as ``Schedule.to_lists`` writes them."""
    m = _ACTION.match(a) if isinstance(a, str) else None
    if m is None:
        raise ValueError(f"schedule action {a!r} is not STAGE KIND MICROBATCH (e.g. 0F0, 1B3)")
    return int(m[1]), m[2], int(m[3])


class _Link:
    """One direction between two ranks (one TCP stream): one message at a time, FIFO by ready
    time. A message's bytes move through the :class:`_Fabric` (the two ranks' NICs)."""

    def __init__(self, sim: _Sim, src: int, dst: int) -> None:
        self.sim, self.src, self.dst = sim, src, dst
        self.busy = False
        self.queue: deque[tuple[float, Callable[[float], None]]] = deque()

    def put(self, nbytes: float, on_arrival: Callable[[float], None]) -> None:
        self.queue.append((nbytes, on_arrival))
        if not self.busy:
            self._start()

    def _start(self) -> None:
        nbytes, on_arrival = self.queue.popleft()
        self.busy = True

        def done(t: float) -> None:
            self.sim.at(t + self.sim.net.latency_s, on_arrival)
            self._done(t)

        self.sim.fabric.send(self.src, self.dst, nbytes, done)

    def _done(self, t: float) -> None:
        self.busy = False
        if self.queue:
            self._start()


class _Fabric:
    """Every rank's NIC: full duplex, ``bandwidth`` out and ``bandwidth`` in. The messages
    on the wire at one moment share each NIC equally (max-min fair, as concurrent TCP streams
    through one queue do): a middle stage sending activations forward and gradients back at
    once sends each at half the rate."""

    def __init__(self, sim: _Sim) -> None:
        self.sim = sim
        self.rate_cap = sim.net.bandwidth_bps / 8.0  # bytes per second per NIC and direction
        self.flows: dict[int, list[Any]] = {}  # id -> [bytes left, src, dst, done, rate]
        self._ids = 0
        self._updated = 0.0
        self._version = 0  # a completion event scheduled before the last change is stale

    def send(self, src: int, dst: int, nbytes: float, done: Callable[[float], None]) -> None:
        if nbytes <= 0 or self.rate_cap == math.inf:
            done(self.sim.now)
            return
        self._advance()
        self._ids += 1
        self.flows[self._ids] = [float(nbytes), src, dst, done, 0.0]
        self._reschedule()

    def _advance(self) -> None:
        """Move every flow's bytes on to now at its current rate."""
        dt = self.sim.now - self._updated
        if dt > 0:
            for f in self.flows.values():
                f[0] -= f[4] * dt
        self._updated = self.sim.now

    def _rates(self) -> None:
        """Max-min fair rates by progressive filling over the NICs (``("out", rank)``, ``("in", rank)``)."""
        users: dict[tuple[str, int], list[list[Any]]] = {}
        for f in self.flows.values():
            users.setdefault(("out", f[1]), []).append(f)
            users.setdefault(("in", f[2]), []).append(f)
        if len(users) == 2 * len(self.flows):  # no NIC carries two messages: all at full rate
            for f in self.flows.values():
                f[4] = self.rate_cap
            return
        cap = dict.fromkeys(users, self.rate_cap)
        frozen: set[int] = set()
        while len(frozen) < len(self.flows):
            share, nic = min(
                (cap[n] / k, n) for n, fs in users.items() if (k := sum(1 for f in fs if id(f) not in frozen))
            )
            for f in users[nic]:
                if id(f) in frozen:
                    continue
                f[4] = share
                frozen.add(id(f))
                for other in (("out", f[1]), ("in", f[2])):
                    if other != nic:
                        cap[other] -= share
            cap[nic] = 0.0

    def _reschedule(self) -> None:
        self._rates()
        self._version += 1
        if self.flows:
            t = self.sim.now + min(f[0] / f[4] for f in self.flows.values())
            self.sim.at(t, lambda t, v=self._version: self._complete(v))

    def _complete(self, version: int) -> None:
        if version != self._version:
            return
        self._advance()
        # the flow(s) due now; a relative tolerance absorbs the rounding of rate * dt
        finished = [k for k, f in self.flows.items() if f[0] <= 1e-9 * max(1.0, f[4])]
        if not finished:  # rounding left a sliver: finish the closest one
            finished = [min(self.flows, key=lambda k: self.flows[k][0] / self.flows[k][4])]
        dones = [self.flows.pop(k)[3] for k in finished]
        self._reschedule()
        for done in dones:
            done(self.sim.now)


class _Message:
    """One message of a payload: leaves when both the send and the receiver's notice are in."""

    __slots__ = ("sent", "notice", "nbytes", "arrived")

    def __init__(self, nbytes: float) -> None:
        self.sent = self.notice = False
        self.nbytes = nbytes
        self.arrived: Callable[[float], None] | None = None


class _Sim:
    """Discrete-event simulation of one step (see :func:`simulate_step`). Processes are the
    pipeline ranks; stage s lives on rank ``s % n_ranks`` (the runtime's placement formula)."""

    def __init__(self, schedule, stages, load, net, protocol, replicas: int | None = None) -> None:
        self.net, self.protocol = net, protocol
        self.replicas = replicas  # None: stop at each rank's last action; else also reduce and step
        self.now = 0.0
        self._heap: list[tuple[float, int, Callable[[float], None]]] = []
        self._seq = 0
        self.R, self.S = len(schedule), len(stages)
        self.schedule = [[_parse_action(a) for a in acts] for acts in schedule]
        for r, acts in enumerate(self.schedule):
            for st, kind, _ in acts:
                if not 0 <= st < self.S or st % self.R != r:
                    raise ValueError(f"schedule action {st}{kind} names stage {st}, not one of this rank's stages")
        self.stages, self.load = stages, load
        self.links: dict[tuple[int, int], _Link] = {}
        self.fabric = _Fabric(self)
        self.msgs: dict[tuple[int, int, str, int], list[_Message]] = {}  # (src stage, dst stage, kind, m)
        # post_ahead: (rank, action index) -> {"t": arrival of its payload or None, "waiter": callback}
        self.early: dict[tuple[int, int], dict[str, Any]] = {}
        self.pos = [0] * self.R
        self.end = [0.0] * self.R

    def at(self, t: float, fn: Callable[[float], None]) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, fn))

    def run(self) -> list[float]:
        for r in range(self.R):
            self.at(0.0, lambda t, r=r: self._start_action(r))
        while self._heap:
            self.now, _, fn = heapq.heappop(self._heap)
            fn(self.now)
        if self.pos != [len(a) for a in self.schedule]:
            stuck = {
                r: "{}{}{}".format(*self.schedule[r][p]) for r, p in enumerate(self.pos) if p < len(self.schedule[r])
            }
            raise ValueError(f"schedule deadlocks in the simulation (ranks waiting at {stuck})")
        return self.end

    # --- communication ---
    def _peer(self, kind: str, stage: int, receive: bool) -> int | None:
        """The stage an action of ``kind`` on ``stage`` receives from (or sends to)."""
        d = _RECEIVES.get(kind)
        if d is None:
            return None
        peer = stage + d if receive else stage - d
        return peer if 0 <= peer < self.S else None

    def _link(self, src_stage: int, dst_stage: int) -> _Link | None:
        a, b = src_stage % self.R, dst_stage % self.R
        if a == b:
            return None  # both stages on one rank: handed over in memory
        if (a, b) not in self.links:
            self.links[(a, b)] = _Link(self, a, b)
        return self.links[(a, b)]

    def _payload(self, src: int, dst: int, kind: str, m: int) -> list[_Message]:
        key = (src, dst, kind, m)
        if key not in self.msgs:
            link = self.load.links[min(src, dst)]
            nbytes = link.fwd_bytes if kind == "F" else link.bwd_bytes
            k, h = self.protocol.messages, self.protocol.header_bytes
            if k == 0:
                k = max(1, round(link.fwd_messages if kind == "F" else link.bwd_messages))
            if self._link(src, dst) is None:
                k = 1
            sizes = [float(h)] * (k - 1) + [max(0.0, nbytes - h * (k - 1))]
            self.msgs[key] = [_Message(b) for b in sizes]
        return self.msgs[key]

    def _try_send(self, src: int, dst: int, msg: _Message) -> None:
        if not (msg.sent and msg.notice):
            return
        link = self._link(src, dst)
        deliver = lambda t, msg=msg: msg.arrived and msg.arrived(t)  # noqa: E731
        if link is None:
            self.at(self.now, deliver)
        else:
            link.put(msg.nbytes, deliver)

    def _post_recv(self, dst: int, src: int, kind: str, m: int, i: int, then: Callable[[float], None]) -> None:
        """Stage ``dst`` posts the receive of message ``i`` from stage ``src``; the notice travels back."""
        msgs = self._payload(src, dst, kind, m)
        msg = msgs[i]

        def arrived(t: float) -> None:
            if i + 1 < len(msgs):
                self._post_recv(dst, src, kind, m, i + 1, then)
            else:
                then(t)

        msg.arrived = arrived

        def notice(t: float) -> None:
            msg.notice = True
            self._try_send(src, dst, msg)

        back = self._link(dst, src)
        if back is None:
            self.at(self.now, notice)
        else:
            back.put(0.0, notice)

    # --- ranks ---
    def _needs(self, r: int, idx: int) -> tuple[str, int, int, int] | None:
        stage, kind, m = self.schedule[r][idx]
        src = self._peer(kind, stage, receive=True)
        return None if src is None else (kind, m, src, stage)

    def _start_action(self, r: int) -> None:
        idx = self.pos[r]
        if idx == len(self.schedule[r]):
            if self.replicas is not None:
                self._finish_rank(r)
            else:
                self.end[r] = self.now
            return
        need = self._needs(r, idx)
        body = lambda t: self._run_body(r)  # noqa: E731
        if need is None:
            self._run_body(r)
        else:
            kind, m, src, stage = need
            slot = self.early.pop((r, idx), None)
            if slot is None:  # receive posted now
                self._post_recv(stage, src, kind, m, 0, body)
            elif slot["t"] is not None:  # posted one action ago and already here
                self._run_body(r)
            else:
                slot["waiter"] = body
        if self.protocol.post_ahead and idx + 1 < len(self.schedule[r]):
            nxt = self._needs(r, idx + 1)
            if nxt is not None:  # post the next action's receive behind this one's
                self._post_early(r, idx + 1, nxt)

    def _post_early(self, r: int, idx: int, need: tuple[str, int, int, int]) -> None:
        kind, m, src, stage = need
        slot: dict[str, Any] = {"t": None, "waiter": None}
        self.early[(r, idx)] = slot

        def arrived(t: float) -> None:
            slot["t"] = t
            if slot["waiter"] is not None:
                slot["waiter"](t)

        self._post_recv(stage, src, kind, m, 0, arrived)

    def _finish_rank(self, r: int) -> None:
        """After its last action a rank reduces each of its stages' gradients across the
        replicas (ring collectives on the fabric, so they share the NIC with sends still on the
        wire), then steps their optimizers. Replicas are alike, so a stage's ring neighbours
        send to it what it sends: each ring step is one message out of and one into this rank's
        NIC, ``latency`` after which the next step starts."""
        d = self.replicas
        steps: list[float] = []  # bytes of each ring step, in order
        optimizer = 0.0
        for s in range(r, self.S, self.R):
            dp = self.load.dp[s] if s < len(self.load.dp) else DPLoad()
            optimizer += self.stages[s].optimizer_s
            if d <= 1:
                continue
            for nbytes, ops, per_op, share in (
                (dp.allreduce_bytes, dp.allreduce_ops, 2 * (d - 1), 1 / d),  # reduce-scatter + all-gather of n / d
                (dp.allgather_bytes, dp.allgather_ops, d - 1, 1.0),  # everyone's n passes by once
            ):
                n_ops = max(1, round(ops)) if nbytes > 0 or ops > 0 else 0
                if n_ops:
                    steps += [nbytes / n_ops * share] * (n_ops * per_op)
        steps.reverse()

        def next_step(t: float) -> None:
            if not steps:
                self.at(t + optimizer, lambda t: self.end.__setitem__(r, t))
                return
            nbytes = steps.pop()
            self.fabric.send(r, r, nbytes, lambda t: self.at(t + self.net.latency_s, next_step))

        next_step(self.now)

    def _run_body(self, r: int) -> None:
        stage, kind, m = self.schedule[r][self.pos[r]]
        busy = self.stages[stage].of(kind).busy_s
        self.at(self.now + busy, lambda t: self._finish_action(r, stage, kind, m))

    def _finish_action(self, r: int, stage: int, kind: str, m: int) -> None:
        dst = self._peer(kind, stage, receive=False)
        if dst is not None:
            for msg in self._payload(stage, dst, kind, m):  # asynchronous sends, all issued now
                msg.sent = True
                self._try_send(stage, dst, msg)
        self.pos[r] += 1
        self._start_action(r)


def simulate_step(
    schedule: Sequence[Sequence[str]],
    stages: Sequence[StageCost],
    load: StepLoad,
    net: NetworkProfile,
    protocol: Protocol = PROTOCOLS["length_prefix"],
) -> list[float]:
    """Seconds from the step's start until each pipeline rank finished its last action (no
    optimizer, no data-parallel reduction). ``schedule[r]`` is rank r's action list as
    ``Schedule.to_lists`` writes it (``"0F0"``, ``"1B3"``: stage, kind, micro-batch); stage s
    runs on rank ``s % len(schedule)``."""
    _check_step(schedule, stages, load)
    return _Sim(schedule, stages, load, net, protocol).run()


def _check_step(schedule: Sequence[Sequence[str]], stages: Sequence[StageCost], load: StepLoad) -> None:
    if len(stages) < len(schedule):
        raise ValueError(f"{len(schedule)} ranks in the schedule but only {len(stages)} stage costs")
    if len(load.links) != len(stages) - 1:
        raise ValueError(f"{len(stages)} stages need {len(stages) - 1} link loads, got {len(load.links)}")


def dp_time(load: DPLoad, replicas: int, net: NetworkProfile) -> float:
    """Ring all-reduce / all-gather time of one stage's per-step data-parallel traffic."""
    d = replicas
    if d <= 1:
        return 0.0
    t = 2 * (d - 1) * load.allreduce_ops * net.latency_s + (d - 1) * load.allgather_ops * net.latency_s
    t += 2 * (d - 1) / d * net.serialize_s(load.allreduce_bytes) + (d - 1) * net.serialize_s(load.allgather_bytes)
    return t


def step_time(
    schedule: Sequence[Sequence[str]],
    stages: Sequence[StageCost],
    load: StepLoad,
    replicas: int,
    net: NetworkProfile,
    protocol: Protocol = PROTOCOLS["length_prefix"],
) -> float:
    """Modeled seconds of one training step: the simulated pipeline, then on each rank its
    stages' data-parallel reductions and optimizer steps; the slowest rank ends the step."""
    _check_step(schedule, stages, load)
    return max(_Sim(schedule, stages, load, net, protocol, replicas=replicas).run())


# --- stored inputs ---------------------------------------------------------------------------------


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
            return StageCost({k: ActionCost(**a) for k, a in s["actions"].items()}, s.get("optimizer_s", 0.0))

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
        )


def _step_load(s: Mapping[str, Any]) -> StepLoad:
    return StepLoad(tuple(LinkLoad(**l) for l in s["links"]), tuple(DPLoad(**p) for p in s["dp"]))


def _from_v1(d: Mapping[str, Any]) -> TimingInputs:
    """Version-1 inputs stored per stage only compute and compression per micro-batch: split
    compute 1:2 between forward and backward (a backward costs about two forwards) and
    compression half before / half after, and assume 1F1B (the default schedule) unless
    ``extra['schedule']`` says otherwise."""
    from_name = {"gpipe": _gpipe, "1f1b": _one_f_one_b}
    S, M = len(d["stages"]), d["microbatches"]
    name = d.get("extra", {}).get("schedule", "1f1b")
    stages = []
    for s in d["stages"]:
        c, z = s.get("compute_s", 0.0), s.get("compress_s", 0.0)
        a = {"F": ActionCost(z / 4, c / 3, z / 4), "B": ActionCost(z / 4, 2 * c / 3, z / 4)}
        stages.append(StageCost(a, s.get("optimizer_s", 0.0)))
    return TimingInputs(
        schedule=from_name.get(name, _one_f_one_b)(S, M),
        stages=stages,
        steps=[_step_load(s) for s in d["steps"]],
        microbatches=M,
        replicas=d["replicas"],
        warmup_steps=d.get("warmup_steps", 0),
        counts=list(d.get("counts", [])),
        extra={**d.get("extra", {}), "converted_from_v1": True},
    )


def _gpipe(S: int, M: int) -> list[list[str]]:
    return [[f"{s}F{m}" for m in range(M)] + [f"{s}B{m}" for m in range(M)] for s in range(S)]


def _one_f_one_b(S: int, M: int) -> list[list[str]]:
    out = []
    for s in range(S):
        w = min(S - s - 1, M)
        acts = [f"{s}F{m}" for m in range(w)]
        for f in range(w, M):
            acts += [f"{s}F{f}", f"{s}B{f - w}"]
        out.append(acts + [f"{s}B{m}" for m in range(M - w, M)])
    return out


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
            runs = [[_mean_load(phase[a:b]), b - a] for a, b in zip(bounds, bounds[1:]) if b > a]
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


def run_step_times(inputs: TimingInputs, net: NetworkProfile, statistic: str = "robust") -> list[float]:
    """Modeled seconds of one step of each run of equal steps (``inputs.runs()``), over ``net``."""
    if statistic not in ("robust", "mean"):
        raise ValueError(f"statistic {statistic!r}: valid values are robust, mean")
    stages = inputs.mean_stages if statistic == "mean" and inputs.mean_stages else inputs.stages
    cache: dict[StepLoad, float] = {}
    out = []
    for load, _ in inputs.runs():
        if load not in cache:
            cache[load] = step_time(inputs.schedule, stages, load, inputs.replicas, net, inputs.protocol)
        out.append(cache[load])
    return out


def model_run(
    inputs: TimingInputs,
    profiles: Mapping[str, NetworkProfile] | None = None,
    reached_target_step: float | None = None,
    statistic: str = "robust",
) -> dict[str, dict[str, float | None]]:
    """Per profile: ``step_s`` (mean modeled step after the uncompressed warm-up),
    ``total_s`` (all steps), ``time_to_target_s`` (the steps before the target was first met,
    ``reached_target_step`` or else ``inputs.target_step``; None if never) and
    ``comm_s_per_step`` (step_s minus the same on an ideal network). ``statistic``:
    ``robust`` (low-quantile action costs) or ``mean``."""
    profiles = PROFILES if profiles is None else profiles
    reached = inputs.target_step if reached_target_step is None else reached_target_step
    runs = inputs.runs()
    total_steps = sum(c for _, c in runs)
    warm = inputs.warmup_steps if inputs.warmup_steps < total_steps else 0
    ideal = run_step_times(inputs, IDEAL, statistic)
    out: dict[str, dict[str, float | None]] = {}
    for name, net in profiles.items():
        steady_s = steady_comm = 0.0
        done = total = 0.0
        ttt = None
        for (_load, count), t, t0 in zip(runs, run_step_times(inputs, net, statistic), ideal):
            # steps [done, done + count) of this run; the warm-up ones don't count for step_s
            steady = max(0, min(count, done + count - warm))
            steady_s += steady * t
            steady_comm += steady * (t - t0)
            if reached is not None and ttt is None and done + count >= reached:
                ttt = total + (reached - done) * t
            total += count * t
            done += count
        n = max(1, total_steps - warm)
        out[name] = {
            "step_s": steady_s / n,
            "total_s": total,
            "time_to_target_s": ttt,
            "comm_s_per_step": steady_comm / n,
        }
    return out


def model_record(
    inputs: TimingInputs | Mapping[str, Any], profile: NetworkProfile, statistic: str = "robust"
) -> dict[str, float | None]:
    """Modeled times of one stored run (``record["timing_inputs"]`` or a TimingInputs) over
    ``profile``: ``step_s``, ``total_s``, ``time_to_target_s``, ``comm_s_per_step``. Pure:
    the same inputs and profile always give the same numbers."""
    if not isinstance(inputs, TimingInputs):
        inputs = TimingInputs.from_dict(inputs)
    return model_run(inputs, {profile.name: profile}, statistic=statistic)[profile.name]


def quantile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (linear interpolation; 0.0 for no values)."""
    v = sorted(values)
    if not v:
        return 0.0
    x = q * (len(v) - 1)
    i = min(int(x), len(v) - 2) if len(v) > 1 else 0
    return v[i] if len(v) == 1 else v[i] + (x - i) * (v[i + 1] - v[i])
