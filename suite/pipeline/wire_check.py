"""The kernel's byte counters next to the runtime's wire bytes: an independent check of the byte count.

A worker whose traffic goes through a known interface (``GLOO_SOCKET_IFNAME``: the veth of an
emulated host, or the NIC a user pinned gloo to) reads ``/sys/class/net/<iface>/statistics``
just before training and just after it (evaluation included, process-group set-up and the
final result exchange excluded). On the result rank, :func:`kernel_check` puts each node's
kernel deltas next to the wire bytes its ranks sent and received in the same interval
(training + evaluation messages, all counted at the sender by the transport).

The kernel counts more than the wire bytes: Ethernet/IP/TCP headers per segment, the ACKs of
what the node received, and gloo's own small per-message headers; so ``kernel / wire`` is a
little above 1 for large messages and grows for tiny ones. Pipeline boundaries only: with
data parallelism (dp > 1) collective traffic is not attributed to nodes and the check is skipped.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

__all__ = ["read_counters", "counters_iface", "kernel_check"]


def counters_iface() -> str | None:
    """The interface gloo is bound to, if any (its counters describe this node's traffic)."""
    name = os.environ.get("GLOO_SOCKET_IFNAME", "").split(",")[0].strip()
    return name or None


def read_counters(iface: str) -> tuple[int, int] | None:
    """(tx_bytes, rx_bytes) of ``iface`` as the kernel counts them, or None if unreadable."""
    base = Path("/sys/class/net") / iface / "statistics"
    try:
        return int((base / "tx_bytes").read_text()), int((base / "rx_bytes").read_text())
    except (OSError, ValueError):
        return None


def _ends(key: str) -> tuple[int, int] | None:
    """(sending stage, receiving stage) of a boundary message: ``b{i}.forward`` i -> i+1, ``b{i}.backward`` i+1 -> i."""
    key = key[5:] if key.startswith("eval.") else key
    if not key.startswith("b"):
        return None
    b, direction = key[1:].split(".", 1)
    return (int(b), int(b) + 1) if direction == "forward" else (int(b) + 1, int(b))


def kernel_check(reports: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per node (one entry per interface that reported counters): kernel tx/rx deltas, the wire bytes
    its ranks sent / received, and the ratios. Empty when no rank read counters or dp > 1."""
    if any(r.get("dp_size", 1) > 1 for r in reports) or not any(r.get("kernel") for r in reports):
        return []
    node_of_stage: dict[int, str] = {}
    nodes: dict[str, dict[str, Any]] = {}
    for r in reports:
        k = r.get("kernel")
        iface = (k or {}).get("iface") or r.get("iface")
        if iface is None:
            continue
        for s in r["stages"]:
            node_of_stage[s] = iface
        if k:
            nodes.setdefault(
                iface, {"node": k["node"], "iface": iface, "tx": 0, "rx": 0, "wire_sent": 0, "wire_received": 0}
            )
            nodes[iface]["tx"] += k["tx"]
            nodes[iface]["rx"] += k["rx"]
    for r in reports:
        for key, _step, _raw, wire, _msgs in r["meter"]:
            ends = _ends(key)
            if ends is None:
                continue
            src_node, dst_node = node_of_stage.get(ends[0]), node_of_stage.get(ends[1])
            if src_node == dst_node:  # same host: loopback, not the interface
                continue
            if src_node in nodes:
                nodes[src_node]["wire_sent"] += wire
            if dst_node in nodes:
                nodes[dst_node]["wire_received"] += wire
    out = []
    for n in sorted(nodes.values(), key=lambda n: n["node"]):
        n["tx_over_wire"] = n["tx"] / n["wire_sent"] if n["wire_sent"] else None
        n["rx_over_wire"] = n["rx"] / n["wire_received"] if n["wire_received"] else None
        out.append(n)
    return out
