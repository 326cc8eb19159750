"""Ring collectives of data-parallel replicas: their closed-form time and their steps.

Alone on the wire, a stage's per-step reduction over ``d`` replicas costs::

    all-reduce:  2 (d - 1) / d * 8 n / BW + 2 (d - 1) L
    all-gather:  (d - 1) * 8 n / BW       + (d - 1) L

(:func:`dp_time`); the simulation runs the same ring step by step (:func:`ring_steps`) so the
steps share the NICs with the pipeline's messages still in flight. Pure Python.
"""

from __future__ import annotations

from .profiles import NetworkProfile
from .timing_inputs import DPLoad

__all__ = ["dp_time", "ring_steps"]


def dp_time(load: DPLoad, replicas: int, net: NetworkProfile) -> float:
    """Ring all-reduce / all-gather time of one stage's per-step data-parallel traffic."""
    d = replicas
    if d <= 1:
        return 0.0
    t = 2 * (d - 1) * load.allreduce_ops * net.latency_s + (d - 1) * load.allgather_ops * net.latency_s
    t += 2 * (d - 1) / d * net.serialize_s(load.allreduce_bytes) + (d - 1) * net.serialize_s(load.allgather_bytes)
    return t


def ring_steps(load: DPLoad, replicas: int) -> list[float]:
    """Bytes each ring step moves out of (and into) one replica's NIC, in order: an all-reduce
    of ``n`` bytes is a reduce-scatter then an all-gather of ``n / d`` each, ``2 (d - 1)``
    steps; an all-gather passes everyone's ``n`` by once, ``d - 1`` steps. Replicas are alike,
    so a stage's ring neighbours send to it what it sends."""
    d = replicas
    if d <= 1:
        return []
    steps: list[float] = []
    for nbytes, ops, per_op, share in (
        (load.allreduce_bytes, load.allreduce_ops, 2 * (d - 1), 1 / d),
        (load.allgather_bytes, load.allgather_ops, d - 1, 1.0),
    ):
        n_ops = max(1, round(ops)) if nbytes > 0 or ops > 0 else 0
        if n_ops:
            steps += [nbytes / n_ops * share] * (n_ops * per_op)
    return steps
