"""The loopback audit: a re-run's stages may talk only over the wire the run counts.

gloo's wire between the stages of a torchrun re-run is TCP on loopback, so the stages could also open
a side connection there (TCP, UDP) and move an activation past the byte counter: a 1-byte payload
plus a side channel. Each re-run has its own network namespace with only ``lo`` (:mod:`.sandbox`), so
everything its stages exchanged crossed that ``lo``; the namespace's first process reads what ``lo``
carried once the re-run ended (:class:`.sandbox.Loopback`). A re-run whose ``lo`` carried more than
the wire bytes it counted plus gloo's framing and control traffic (:func:`allowance`, measured on
honest cells: docs/reliability.md, "The loopback audit") fails with one line.

Collectives are not audited: a data-parallel all-reduce or a tensor-parallel exchange sends the
counted payload several times over (a ring all-reduce 2 (n - 1) / n of it per rank), so lo carries
more than the count by design; such a re-run says "not audited" and the report names the gap.
"""

from __future__ import annotations

from typing import Any

from .sandbox import Loopback

__all__ = ["counted", "allowance", "audit", "FIXED_BYTES_PER_PROCESS", "BYTES_PER_MESSAGE", "WIRE_SHARE"]

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


def counted(record: dict[str, Any]) -> tuple[int, int, bool]:
    """(wire bytes, messages, whether a collective carried any) of the re-run's own count."""
    wire = messages = 0
    collective = False
    byte_sets = dict(record.get("bytes") or {})
    byte_sets["eval"] = record.get("eval_bytes") or {}
    for name, b in byte_sets.items():
        if not isinstance(b, dict):
            continue
        if name not in ("forward", "backward", "eval") and _int(b.get("wire")):
            collective = True  # dp, tp_forward, tp_backward, the outer loop's pseudo-gradients
        wire += _int(b.get("wire"))
        messages += _int(b.get("messages"))
    return wire, messages, collective


def _processes(record: dict[str, Any]) -> int:
    cfg = record.get("config") or {}
    n = max(1, _int(cfg.get("stages")) or 1) * max(1, _int(cfg.get("dp")) or 1) * max(1, _int(cfg.get("tp")) or 1)
    return min(n, 1024)


def allowance(record: dict[str, Any]) -> int:
    """The most loopback bytes an honest re-run of this record's counts carries."""
    wire, messages, _ = counted(record)
    return int(wire * (1 + WIRE_SHARE) + BYTES_PER_MESSAGE * messages + FIXED_BYTES_PER_PROCESS * _processes(record))


def audit(record: dict[str, Any], lo: Loopback | None) -> tuple[str, dict[str, Any]]:
    """("" or the one-line reason the re-run fails, what the audit read for the report)."""
    wire, messages, collective = counted(record)
    if lo is None:
        return "", {"audited": False, "why": "no network namespace here (the report names the layer missing)"}
    seen = {"lo_bytes": lo.tx_bytes, "lo_packets": lo.tx_packets, "wire_bytes": wire, "messages": messages}
    if collective:
        return "", {"audited": False, "why": "collectives send the counted payload several times", **seen}
    limit = allowance(record)
    if lo.tx_bytes > limit:
        return (
            f"side channel: lo carried {lo.tx_bytes} bytes, the wire counted {wire} "
            f"({messages} messages; at most {limit} with gloo's framing and control traffic)",
            {"audited": True, "allowed": limit, **seen},
        )
    return "", {"audited": True, "allowed": limit, **seen}
