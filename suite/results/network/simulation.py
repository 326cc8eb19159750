"""The event simulator: one training step of a pipeline over a network, message by message.

See the package docstring (:mod:`suite.results.network`) for what it models. Pure Python.
"""

from __future__ import annotations

import functools
import heapq
import math
import re
from collections import deque
from typing import Any, Callable, Sequence

from .profiles import NetworkProfile
from .ring import ring_steps
from .timing_inputs import PROTOCOLS, DPLoad, Protocol, StageCost, StepLoad

__all__ = ["simulate_step", "step_time"]


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
            version = self._version
            self.sim.at(t, lambda _t: self._complete(version))

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
            self.at(0.0, functools.partial(lambda r, _t: self._start_action(r), r))
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
        steps: list[float] = []  # bytes of each ring step, in order
        optimizer = 0.0
        for s in range(r, self.S, self.R):
            optimizer += self.stages[s].optimizer_s
            dp = self.load.dp[s] if s < len(self.load.dp) else DPLoad()
            if dp.allreduce_bytes or dp.allgather_bytes:  # a reduction outside the backward (outer loop)
                optimizer += self.stages[s].sync_s
            steps += ring_steps(dp, self.replicas or 1)
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
        busy = self.stages[stage].of(kind).busy_s + self._tp_s(stage, kind)
        self.at(self.now + busy, lambda t: self._finish_action(r, stage, kind, m))

    def _tp_s(self, stage: int, kind: str) -> float:
        """Tensor-parallel all-reduces inside an action: blocking (the next layer needs their sum),
        over the intra-host link, each rank sending its contributions to its TP peers
        (suite.pipeline.tensor_parallel); forward ones in F, gradient ones in B."""
        if stage >= len(self.load.tp) or kind not in ("F", "B"):
            return 0.0
        tp = self.load.tp[stage]
        nbytes, msgs = (tp.fwd_bytes, tp.fwd_messages) if kind == "F" else (tp.bwd_bytes, tp.bwd_messages)
        intra = self.net.intra
        return intra.serialize_s(nbytes) + msgs * intra.latency_s

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
