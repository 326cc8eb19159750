"""Byte accounting at the transport: what crossed the wire, per link, per direction, per step.

The transport (and the data-parallel hook) call :meth:`ByteMeter.record` with the sizes of
the tensors they hand to ``torch.distributed`` (or, in single-process mode, would hand):
``wire`` = payload tensors + headers, ``raw`` = the uncompressed tensor the message stands
for. Compressors are never asked. Keys name the link:

    b{i}.forward / b{i}.backward      pipeline boundary i (between stage i and i+1)
    tp.s{s}.r{i}.forward / .backward  tensor-parallel reduction i of stage s (bytes every TP rank
                                      sends its peers: ``suite.pipeline.tensor_parallel``)
    dp.s{s}.allreduce / dp.s{s}.allgather
                                      data-parallel reduction of stage s's gradients
                                      (bytes one replica contributes to the collective)
    eval.*                            evaluation traffic (kept apart from the benchmark numbers)

A meter lives in one process; meters of all ranks are merged on the result-owning rank.
``record`` is thread-safe: asynchronous data-parallel reductions launch later rounds from
the collectives' completion callbacks, on the backend's threads.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from typing import Any, Iterable

from .result import ByteCounts

__all__ = ["ByteMeter", "direction_of", "boundary_key", "dp_key"]


def boundary_key(boundary: int, direction: str) -> str:
    return f"b{boundary}.{direction}"


def dp_key(stage: int, kind: str) -> str:
    if kind not in ("allreduce", "allgather"):
        raise ValueError(f"dp collective kind must be allreduce or allgather, got {kind!r}")
    return f"dp.s{stage}.{kind}"


def direction_of(key: str) -> str:
    """``forward`` / ``backward`` / ``dp`` / ``tp_forward`` / ``tp_backward`` / ``eval`` for a meter key."""
    if key.startswith("eval."):
        return "eval"
    if key.startswith("dp."):
        return "dp"
    if key.startswith("tp."):
        return "tp_" + key.rsplit(".", 1)[1]
    return key.rsplit(".", 1)[1]


class ByteMeter:
    """Counts raw and wire bytes and messages per (key, step).

    ``step`` is set by the training loop before each step; while ``evaluating`` is True,
    records go to ``eval.<key>`` instead.
    """

    def __init__(self) -> None:
        self.step = 0
        self.evaluating = False
        # (key, step) -> [raw, wire, messages]
        self._counts: dict[tuple[str, int], list[int]] = defaultdict(lambda: [0, 0, 0])
        self._lock = threading.Lock()

    def record(self, key: str, raw: int, wire: int, messages: int = 1) -> None:
        if self.evaluating:
            key = "eval." + key
        with self._lock:
            c = self._counts[(key, self.step)]
            c[0] += int(raw)
            c[1] += int(wire)
            c[2] += int(messages)

    # --- merge / serialize (rank -> result rank) ------------------------------------------
    def to_list(self) -> list[list[Any]]:
        return [[k, s, *c] for (k, s), c in sorted(self._counts.items())]

    @classmethod
    def from_lists(cls, lists: Iterable[list[list[Any]]]) -> ByteMeter:
        m = cls()
        for rows in lists:
            for key, step, raw, wire, msgs in rows:
                c = m._counts[(key, step)]
                c[0] += raw
                c[1] += wire
                c[2] += msgs
        return m

    # --- views ----------------------------------------------------------------------------
    def keys(self) -> list[str]:
        return sorted({k for k, _ in self._counts})

    def totals(self, select=lambda key: True) -> ByteCounts:
        out = ByteCounts()
        for (k, _), (raw, wire, msgs) in self._counts.items():
            if select(k):
                out.add(raw, wire, msgs)
        return out

    def by_direction(self) -> dict[str, ByteCounts]:
        """forward / backward / dp totals (always present), tp_forward / tp_backward (when a
        tensor-parallel run sent any); eval excluded."""
        out = {d: self.totals(lambda k, d=d: direction_of(k) == d) for d in ("forward", "backward", "dp")}
        if any(k.startswith("tp.") for k in self.keys()):
            out.update({d: self.totals(lambda k, d=d: direction_of(k) == d) for d in ("tp_forward", "tp_backward")})
        return out

    def by_boundary(self) -> dict[str, ByteCounts]:
        """``b{i}.forward`` / ``b{i}.backward`` totals."""
        return {k: self.totals(lambda x, k=k: x == k) for k in self.keys() if k.startswith("b")}

    def eval_totals(self) -> ByteCounts:
        return self.totals(lambda k: direction_of(k) == "eval")

    def per_step(self, key: str, steps: int, field: int = 1) -> list[int]:
        """Wire bytes (``field`` 0 = raw, 2 = messages) of ``key`` at each step 0..steps-1."""
        out = [0] * steps
        for (k, s), c in self._counts.items():
            if k == key and 0 <= s < steps:
                out[s] += c[field]
        return out

    def per_step_direction(self, direction: str, steps: int) -> list[int]:
        out = [0] * steps
        for (k, s), c in self._counts.items():
            if direction_of(k) == direction and 0 <= s < steps:
                out[s] += c[1]
        return out
