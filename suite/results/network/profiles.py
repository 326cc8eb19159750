"""Network profiles: the links a run is modeled over (bandwidth and latency per host).

Pure Python (no torch): the leaderboard imports it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["NetworkProfile", "PROFILES", "IDEAL", "get_profile"]


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
