"""The loopback audit: a re-run's stages may talk only over the wire the run counts.

gloo's wire between the stages of a torchrun re-run is TCP on loopback, so the stages could also open
a side connection there (TCP, UDP) and move an activation past the byte counter: a 1-byte payload
plus a side channel. Each re-run has its own network namespace with only ``lo`` (:mod:`.sandbox`), so
everything its stages exchanged crossed that ``lo``; the namespace's first process reads what ``lo``
carried once the re-run ended (:class:`.sandbox.Loopback`). A re-run whose ``lo`` carried more than
the wire bytes it counted plus gloo's framing and control traffic (:func:`allowance`, measured on
honest cells: docs/reliability.md, "The loopback audit") fails with one line.

Collectives are audited too (skipping them let a one-replica ``--dp fp16 --dp-size 1`` run
carry a UDP channel unaudited): a data-parallel collective sends the counted payload several times
over (a ring all-reduce 2 (n - 1) / n of it per rank, an all-gather n - 1 times), so its counted bytes
are allowed :func:`collective_factor` times; with one replica nothing crosses a wire (the hook
reduces in its own process) and they are allowed nothing. Tensor-parallel exchanges are point to point
through the transport, counted per copy like the pipeline's. The audit is the second line: the replay
(:mod:`.replay`) is what holds every process to the counted bytes.
"""

from __future__ import annotations

from typing import Any

from .sandbox import Loopback

__all__ = [
    "counted",
    "processes",
    "replicas",
    "collective_factor",
    "allowance",
    "audit",
    "FIXED_BYTES_PER_PROCESS",
    "BYTES_PER_MESSAGE",
    "WIRE_SHARE",
]

# Measured on honest tiny and real cells (docs/reliability.md, "The loopback audit"), each at two to
# four times the largest seen: the rendezvous (torchrun's TCP store, gloo's pair setup) per process,
FIXED_BYTES_PER_PROCESS = 48 * 1024
# per counted message: gloo's frame, the transport's shape header, TCP/IP headers and ACKs, and the
# per-step control traffic (loss, barriers) spread over the step's messages,
BYTES_PER_MESSAGE = 1024
# and per counted byte: the headers and ACKs of the 64 KiB segments a large message is cut into
# (measured 0.1-0.3 %).
WIRE_SHARE = 0.01


def _int(v: Any) -> int:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 else 0


POINT_TO_POINT = ("forward", "backward", "eval")  # and tp_*: the transport's own sends, counted per copy


def counted(record: dict[str, Any]) -> tuple[int, int, bool]:
    """(wire bytes, messages, whether a collective carried any) of the re-run's own count."""
    wire = messages = 0
    collective = False
    for name, b in _byte_sets(record).items():
        if _collective(name) and _int(b.get("wire")):
            collective = True  # dp: the data-parallel hook's and the outer loop's collectives
        wire += _int(b.get("wire"))
        messages += _int(b.get("messages"))
    return wire, messages, collective


def _byte_sets(record: dict[str, Any]) -> dict[str, dict[str, Any]]:
    sets = dict(record.get("bytes") or {})
    sets["eval"] = record.get("eval_bytes") or {}
    return {k: v for k, v in sets.items() if isinstance(v, dict)}


def _collective(name: str) -> bool:
    return name not in POINT_TO_POINT and not name.startswith("tp_")


def replicas(record: dict[str, Any]) -> int:
    """The data-parallel replicas of the record's run (``run.dp``, else ``config.dp``)."""
    return max(1, _int((record.get("run") or {}).get("dp")) or _int((record.get("config") or {}).get("dp")) or 1)


def collective_factor(n: int) -> float:
    """How many times a collective over ``n`` replicas may put its counted bytes on ``lo``: none with
    one replica (reduced in the process), else a ring all-reduce's 2 (n - 1) / n or an all-gather's n - 1."""
    return 0.0 if n <= 1 else float(max(2, n - 1))


def processes(record: dict[str, Any]) -> int:
    """How many processes the re-run had: its own record's stage and replica counts (``run.n_stages``,
    ``run.dp``: the config's ``stages`` is None where the tier's default stage count applied) times
    the tensor-parallel ranks per stage."""
    cfg = record.get("config") or {}
    run = record.get("run") or {}
    stages = _int(run.get("n_stages")) or _int(cfg.get("stages")) or 1
    replicas = _int(run.get("dp")) or _int(cfg.get("dp")) or 1
    return min(max(1, stages) * max(1, replicas) * max(1, _int(cfg.get("tp")) or 1), 1024)


def allowance(record: dict[str, Any]) -> int:
    """The most loopback bytes an honest re-run of this record's counts carries."""
    total = 0.0
    factor = collective_factor(replicas(record))
    for name, b in _byte_sets(record).items():
        times = factor if _collective(name) else 1.0
        total += times * (_int(b.get("wire")) * (1 + WIRE_SHARE) + BYTES_PER_MESSAGE * _int(b.get("messages")))
    return int(total + FIXED_BYTES_PER_PROCESS * processes(record))


def audit(record: dict[str, Any], lo: Loopback | None) -> tuple[str, dict[str, Any]]:
    """("" or the one-line reason the re-run fails, what the audit read for the report)."""
    wire, messages, collective = counted(record)
    if lo is None:
        return "", {"audited": False, "why": "no network namespace here (the report names the layer missing)"}
    seen = {"lo_bytes": lo.tx_bytes, "lo_packets": lo.tx_packets, "wire_bytes": wire, "messages": messages}
    limit = allowance(record)
    seen = {"audited": True, "allowed": limit, "collectives": collective, **seen}
    if lo.tx_bytes > limit:
        return (
            f"side channel: lo carried {lo.tx_bytes} bytes, the wire counted {wire} "
            f"({messages} messages; at most {limit} with gloo's framing, control traffic"
            f"{' and collectives over ' + str(replicas(record)) + ' replica(s)' if collective else ''})",
            seen,
        )
    return "", seen
