"""Pipeline schedules as per-stage action lists (they never touch tensors).

A schedule for S stages and M micro-batches is, per stage, the ordered list of what that
stage does: ``F(m)`` (receive micro-batch m's activation, run forward, send) and ``B(m)``
(receive its output gradient, run backward, send the input gradient). Communication is
implied by the actions, so executing every stage's list in order, with blocking receives
and asynchronous sends, is deadlock-free for both schedules below.

GPipe (Huang et al. 2019): all forwards, then all backwards.
1F1B (Narayanan et al. 2019, PipeDream-Flush): stage s runs ``min(S - s - 1, M)`` warm-up
forwards, then alternates one forward / one backward, then drains the remaining
backwards; at most S - s activations are alive per stage instead of M.

Both take (M + S - 1) forward+backward slots per step with uniform stages; the backward
order is micro-batch 0..M-1 in both, so gradients accumulate in the same order as in
plain (unpipelined) training.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

__all__ = ["Action", "gpipe", "one_f_one_b", "forward_only", "SCHEDULES", "get_schedule", "check_schedule"]


@dataclass(frozen=True)
class Action:
    """``kind`` "F" or "B" on micro-batch ``microbatch``."""

    kind: str
    microbatch: int

    def __repr__(self) -> str:
        return f"{self.kind}{self.microbatch}"


def gpipe(n_stages: int, n_micro: int) -> list[list[Action]]:
    """F0..F(M-1) then B0..B(M-1) on every stage."""
    per_stage = [Action("F", m) for m in range(n_micro)] + [Action("B", m) for m in range(n_micro)]
    return [list(per_stage) for _ in range(n_stages)]


def one_f_one_b(n_stages: int, n_micro: int) -> list[list[Action]]:
    """Warm-up forwards, steady one-forward-one-backward, cool-down backwards."""
    out = []
    for s in range(n_stages):
        warmup = min(n_stages - s - 1, n_micro)
        acts = [Action("F", m) for m in range(warmup)]
        f, b = warmup, 0
        while f < n_micro:
            acts.append(Action("F", f))
            f += 1
            acts.append(Action("B", b))
            b += 1
        acts += [Action("B", m) for m in range(b, n_micro)]
        out.append(acts)
    return out


def forward_only(n_stages: int, n_micro: int) -> list[list[Action]]:
    """Evaluation: forwards only."""
    return [[Action("F", m) for m in range(n_micro)] for _ in range(n_stages)]


SCHEDULES: dict[str, Callable[[int, int], list[list[Action]]]] = {"gpipe": gpipe, "1f1b": one_f_one_b}


def get_schedule(name: str, n_stages: int, n_micro: int) -> list[list[Action]]:
    """The action lists of schedule ``name``; unknown names list the valid ones."""
    if name not in SCHEDULES:
        raise ValueError(f"unknown schedule {name!r}; valid schedules: {', '.join(SCHEDULES)}")
    acts = SCHEDULES[name](n_stages, n_micro)
    check_schedule(acts, n_micro)
    return acts


def check_schedule(actions: list[list[Action]], n_micro: int, backward: bool = True) -> None:
    """Every stage forwards each micro-batch once, in order, and backwards it once after."""
    for s, acts in enumerate(actions):
        fwd = [a.microbatch for a in acts if a.kind == "F"]
        bwd = [a.microbatch for a in acts if a.kind == "B"]
        if fwd != list(range(n_micro)) or (backward and bwd != list(range(n_micro))):
            raise ValueError(f"stage {s}: schedule {acts} must run F and B of micro-batches 0..{n_micro - 1} in order")
        for a in acts:
            if a.kind == "B" and acts.index(Action("F", a.microbatch)) > acts.index(a):
                raise ValueError(f"stage {s}: {a} comes before its forward")
