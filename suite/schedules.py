"""Pipeline schedules as complete per-rank action lists (pure data: no tensors, no torch).

A leaf of ``suite`` (like ``suite.settings``): the runtime (``suite.pipeline``) executes these
lists and the network model (``suite.results.network``) replays them, so both read one module.

The format follows ``torch.distributed.pipelining``: an :class:`Action` is (stage, kind,
micro-batch) and a :class:`Schedule` is, for every pipeline rank, the ordered list of actions
that rank executes in one optimizer step. Kinds:

- ``F`` FORWARD: receive micro-batch m's activation from stage s-1 (stage 0 reads the batch),
  run the stage, send the output to stage s+1 (the last stage computes the loss instead);
- ``B`` FULL_BACKWARD: receive the output gradient from stage s+1 (the last stage starts from
  its loss), backpropagate, send the input gradient to stage s-1;
- ``I`` BACKWARD_INPUT / ``W`` BACKWARD_WEIGHT: a backward split into its input-gradient half
  (communicates like ``B``) and its weight-gradient half (local), for zero-bubble schedules.
  The format and :func:`check_schedule` know them; the executor runs ``F`` and ``B`` today.

Communication is implied by the actions (:meth:`Action.receives_from`, :meth:`Action.sends_to`
give the peer stage) and stage s lives on pipeline rank ``rank_of_stage(s, n_ranks) = s % n_ranks``
(the one placement formula: one stage per rank, or ``v`` model chunks per rank for interleaved
schedules, chunk c of rank r being stage ``c * n_ranks + r``).

Example, 1F1B with S=2 stages on 2 ranks and M=2 micro-batches (``repr`` is ``{stage}{kind}{m}``
as in torch)::

    >>> build_schedule("1f1b", 2, 2).ranks
    ((0F0, 0F1, 0B0, 0B1), (1F0, 1B0, 1F1, 1B1))

Executing every rank's list in order, with asynchronous sends and blocking receives, is
what torchrun does; :func:`check_schedule` proves by simulating exactly that (messages
between two ranks arrive in the order they were sent) that a schedule cannot deadlock or
receive a message meant for another action, and that every dependency holds: F(m) on s
after F(m) on s-1, B(m) on s after B(m) on s+1 and after F(m) on s, every action once.

Schedules (uniform stages, all backpropagate micro-batches 0..M-1 in order on every stage,
so gradients accumulate in the order of unpipelined training):

- ``gpipe`` (Huang et al. 2019): all forwards, then all backwards.
- ``1f1b`` (Narayanan et al. 2019, PipeDream-Flush): stage s runs ``min(S - s - 1, M)`` warm-up
  forwards, then alternates one forward / one backward, then drains; at most S - s
  activations alive per stage instead of M.
- ``interleaved_1f1b`` (Narayanan et al. 2021, Megatron-LM): S stages as v = 2 model chunks on
  each of P = S / 2 ranks; micro-batches go round the ranks v times. The bubble shrinks by v
  for v times the point-to-point messages. Needs P >= 2 and M a multiple of P.

Adding a schedule = one generator function + one :func:`register_schedule` line here.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass
from enum import Enum
from typing import Callable

__all__ = [
    "Kind",
    "Action",
    "Schedule",
    "ScheduleKind",
    "SCHEDULES",
    "DEFAULT_SCHEDULE",
    "register_schedule",
    "rank_of_stage",
    "pipeline_ranks",
    "build_schedule",
    "get_schedule",
    "check_schedule",
    "gpipe",
    "one_f_one_b",
    "interleaved_1f1b",
    "forward_only",
]


class Kind(str, Enum):
    """What an action computes (values as in ``torch.distributed.pipelining``)."""

    FORWARD = "F"
    FULL_BACKWARD = "B"
    BACKWARD_INPUT = "I"
    BACKWARD_WEIGHT = "W"

    def __str__(self) -> str:
        return self.value


_SENDS_GRADIENT = (Kind.FULL_BACKWARD, Kind.BACKWARD_INPUT)


@dataclass(frozen=True)
class Action:
    """``kind`` on micro-batch ``microbatch`` of stage ``stage``; repr ``{stage}{kind}{m}``."""

    stage: int
    kind: Kind
    microbatch: int

    def __repr__(self) -> str:
        return f"{self.stage}{self.kind.value}{self.microbatch}"

    def receives_from(self, n_stages: int) -> int | None:
        """The stage whose message this action receives first (None: nothing to receive)."""
        if self.kind == Kind.FORWARD:
            return self.stage - 1 if self.stage > 0 else None
        if self.kind in _SENDS_GRADIENT:
            return self.stage + 1 if self.stage < n_stages - 1 else None
        return None

    def sends_to(self, n_stages: int) -> int | None:
        """The stage this action sends its result to (None: nothing to send)."""
        if self.kind == Kind.FORWARD:
            return self.stage + 1 if self.stage < n_stages - 1 else None
        if self.kind in _SENDS_GRADIENT:
            return self.stage - 1 if self.stage > 0 else None
        return None


def F(stage: int, m: int) -> Action:
    return Action(stage, Kind.FORWARD, m)


def B(stage: int, m: int) -> Action:
    return Action(stage, Kind.FULL_BACKWARD, m)


def rank_of_stage(stage: int, n_ranks: int) -> int:
    """Pipeline rank holding ``stage`` when ``n_ranks`` ranks hold the stages round-robin."""
    return stage % n_ranks


@dataclass(frozen=True)
class Schedule:
    """One optimizer step of a pipeline: ``ranks[r]`` is what pipeline rank r does, in order."""

    name: str
    n_stages: int
    n_micro: int
    ranks: tuple[tuple[Action, ...], ...]

    @property
    def n_ranks(self) -> int:
        return len(self.ranks)

    def rank_of(self, stage: int) -> int:
        return rank_of_stage(stage, self.n_ranks)

    def stages_of(self, rank: int) -> tuple[int, ...]:
        return tuple(range(rank, self.n_stages, self.n_ranks))

    def to_lists(self) -> list[list[str]]:
        """JSON-able form: per rank, the actions as ``"{stage}{kind}{m}"`` strings."""
        return [[repr(a) for a in acts] for acts in self.ranks]


@dataclass(frozen=True)
class ScheduleKind:
    """A registered schedule: ``build(n_ranks, n_micro) -> per-rank action lists`` with
    ``chunks`` stages per rank (S = n_ranks * chunks)."""

    name: str
    build: Callable[[int, int], list[list[Action]]]
    chunks: int = 1
    min_ranks: int = 1
    micro_multiple_of_ranks: bool = False


SCHEDULES: dict[str, ScheduleKind] = {}


def register_schedule(kind: ScheduleKind) -> ScheduleKind:
    SCHEDULES[kind.name] = kind
    return kind


def _kind(name: str) -> ScheduleKind:
    if name not in SCHEDULES:
        raise ValueError(f"unknown schedule {name!r}; valid schedules: {', '.join(SCHEDULES)}")
    return SCHEDULES[name]


def pipeline_ranks(name: str, n_stages: int) -> int:
    """Processes per pipeline replica that schedule ``name`` runs ``n_stages`` stages on."""
    kind = _kind(name)
    if n_stages % kind.chunks or n_stages // kind.chunks < kind.min_ranks:
        raise ValueError(
            f"schedule {name!r} runs {kind.chunks} stages per rank on at least {kind.min_ranks} ranks: "
            f"{n_stages} stages do not fit; use a multiple of {kind.chunks * kind.min_ranks} stages or another schedule"
        )
    return n_stages // kind.chunks


def build_schedule(name: str, n_stages: int, n_micro: int) -> Schedule:
    """Schedule ``name`` for ``n_stages`` stages and ``n_micro`` micro-batches, checked.
    Raises ValueError naming the problem (unknown names list the valid ones)."""
    kind = _kind(name)
    P = pipeline_ranks(name, n_stages)
    if kind.micro_multiple_of_ranks and n_micro % P:
        raise ValueError(
            f"schedule {name!r} on {P} ranks needs a number of micro-batches that is a multiple of {P}, "
            f"got {n_micro}; choose microbatches accordingly"
        )
    sched = Schedule(name, n_stages, n_micro, tuple(tuple(acts) for acts in kind.build(P, n_micro)))
    check_schedule(sched)
    return sched


def get_schedule(name: str, n_stages: int, n_micro: int) -> list[list[Action]]:
    """Per-rank action lists of schedule ``name`` (see :func:`build_schedule`)."""
    return [list(acts) for acts in build_schedule(name, n_stages, n_micro).ranks]


# --- generators: (pipeline ranks P, micro-batches M) -> per-rank action lists ------------------
def gpipe(n_ranks: int, n_micro: int) -> list[list[Action]]:
    """F0..F(M-1) then B0..B(M-1) on every stage (one stage per rank)."""
    return [[F(s, m) for m in range(n_micro)] + [B(s, m) for m in range(n_micro)] for s in range(n_ranks)]


def one_f_one_b(n_ranks: int, n_micro: int) -> list[list[Action]]:
    """Warm-up forwards, steady one-forward-one-backward, cool-down backwards."""
    out = []
    for s in range(n_ranks):
        warmup = min(n_ranks - s - 1, n_micro)
        acts = [F(s, m) for m in range(warmup)]
        f, b = warmup, 0
        while f < n_micro:
            acts += [F(s, f), B(s, b)]
            f, b = f + 1, b + 1
        acts += [B(s, m) for m in range(b, n_micro)]
        out.append(acts)
    return out


def interleaved_1f1b(n_ranks: int, n_micro: int, chunks: int = 2) -> list[list[Action]]:
    """Megatron-LM's interleaved 1F1B: rank r holds stages r, r + P, ..., r + (v-1)P.

    Forward slot k of a rank runs chunk ``(k // P) % v`` on micro-batch ``(k // (P v)) P + k % P``
    (P micro-batches per chunk, round-robin); backward slots run the chunks in reverse. Rank r
    warms up with ``2 (P - r - 1) + (v - 1) P`` forwards, then alternates, then drains."""
    P, v = n_ranks, chunks
    total = n_micro * v
    out = []
    for r in range(P):

        def slot(k: int, backward: bool) -> Action:
            chunk = (k // P) % v
            m = (k // (P * v)) * P + k % P
            if backward:
                return B((v - 1 - chunk) * P + r, m)
            return F(chunk * P + r, m)

        warmup = min(2 * (P - r - 1) + (v - 1) * P, total)
        acts = [slot(k, False) for k in range(warmup)]
        f, b = warmup, 0
        while f < total:
            acts += [slot(f, False), slot(b, True)]
            f, b = f + 1, b + 1
        acts += [slot(k, True) for k in range(b, total)]
        out.append(acts)
    return out


def forward_only(n_stages: int, n_micro: int) -> list[list[Action]]:
    """Evaluation: forwards only, one stage per rank."""
    return [[F(s, m) for m in range(n_micro)] for s in range(n_stages)]


register_schedule(ScheduleKind("gpipe", gpipe))
register_schedule(ScheduleKind("1f1b", one_f_one_b))
register_schedule(
    ScheduleKind("interleaved_1f1b", interleaved_1f1b, chunks=2, min_ranks=2, micro_multiple_of_ranks=True)
)
# a cell's schedule when nothing names one (CellConfig, the overhead tool, records from before the
# schedule was stored)
DEFAULT_SCHEDULE = "1f1b"


# --- checking ------------------------------------------------------------------------------------------
def check_schedule(schedule: Schedule, backward: bool = True) -> None:
    """Raise ValueError unless ``schedule`` runs every action once and executes deadlock-free.

    Every stage must forward each micro-batch once and (``backward``) backpropagate it once,
    as ``B`` or as ``I`` + ``W``, on the rank that holds the stage. Then the ranks are simulated
    as torchrun runs them: each rank executes its list in order; a receive waits for its
    message and messages between two ranks arrive in the order they were sent."""
    S, M, P = schedule.n_stages, schedule.n_micro, schedule.n_ranks
    if P < 1 or S < P or S % P:
        raise ValueError(f"schedule {schedule.name!r}: {S} stages cannot be spread evenly over {P} ranks")
    counts: Counter[tuple[int, Kind, int]] = Counter()
    for r, acts in enumerate(schedule.ranks):
        for a in acts:
            if not (0 <= a.stage < S and 0 <= a.microbatch < M and isinstance(a.kind, Kind)):
                raise ValueError(f"schedule {schedule.name!r}: action {a!r} is out of range (S={S}, M={M})")
            if schedule.rank_of(a.stage) != r:
                home = schedule.rank_of(a.stage)
                raise ValueError(
                    f"schedule {schedule.name!r}: action {a!r} is on rank {r}, its stage lives on rank {home}"
                )
            counts[(a.stage, a.kind, a.microbatch)] += 1
    for s in range(S):
        if s + 1 < S and schedule.rank_of(s) == schedule.rank_of(s + 1):
            raise ValueError(
                f"schedule {schedule.name!r}: neighbouring stages {s} and {s + 1} share rank {schedule.rank_of(s)}"
            )
        for m in range(M):
            f, b, i, w = (counts[(s, k, m)] for k in Kind)
            ok = f == 1 and ((b, i, w) in ((1, 0, 0), (0, 1, 1)) if backward else b + i + w == 0)
            if not ok:
                need = "F once and B (or I and W) once" if backward else "F once and no backward"
                raise ValueError(
                    f"schedule {schedule.name!r}: stage {s} micro-batch {m} has F x{f}, B x{b}, I x{i}, W x{w}; "
                    f"needs {need}"
                )
    _simulate(schedule)


def _simulate(schedule: Schedule) -> None:
    """Run the per-rank lists with FIFO links between ranks; raise on deadlock or mismatch."""
    S = schedule.n_stages
    links: dict[tuple[int, int], deque[tuple[int, int, int]]] = {}  # (src rank, dst rank) -> (from, to, m)
    done: set[Action] = set()
    pos = [0] * schedule.n_ranks

    def ready(r: int, a: Action) -> bool:
        if a.kind in _SENDS_GRADIENT and Action(a.stage, Kind.FORWARD, a.microbatch) not in done:
            raise ValueError(f"schedule {schedule.name!r}: rank {r} runs {a!r} before its forward")
        if a.kind == Kind.BACKWARD_WEIGHT and Action(a.stage, Kind.BACKWARD_INPUT, a.microbatch) not in done:
            raise ValueError(f"schedule {schedule.name!r}: rank {r} runs {a!r} before its input-gradient pass")
        src = a.receives_from(S)
        if src is None:
            return True
        q = links.get((schedule.rank_of(src), r))
        if not q:
            return False
        if q[0] != (src, a.stage, a.microbatch):
            raise ValueError(
                f"schedule {schedule.name!r}: rank {r}'s action {a!r} would receive the message from stage {q[0][0]} "
                f"to stage {q[0][1]} for micro-batch {q[0][2]} (messages between two ranks arrive in the order sent)"
            )
        return True

    remaining = sum(len(acts) for acts in schedule.ranks)
    while remaining:
        progressed = False
        for r, acts in enumerate(schedule.ranks):
            if pos[r] < len(acts) and ready(r, acts[pos[r]]):
                a = acts[pos[r]]
                src, dst = a.receives_from(S), a.sends_to(S)
                if src is not None:
                    links[(schedule.rank_of(src), r)].popleft()
                if dst is not None:
                    links.setdefault((r, schedule.rank_of(dst)), deque()).append((a.stage, dst, a.microbatch))
                done.add(a)
                pos[r] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            waiting = ", ".join(
                f"rank {r} at {acts[pos[r]]!r}" for r, acts in enumerate(schedule.ranks) if pos[r] < len(acts)
            )
            raise ValueError(f"schedule {schedule.name!r} deadlocks: {waiting} wait for messages never sent")
