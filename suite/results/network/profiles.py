"""Network profiles: the links a run is modeled over (bandwidth and latency per host).

Pure Python (no torch): the leaderboard imports it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["NetworkProfile", "IntraHostLink", "INTRA_HOST", "PROFILES", "IDEAL", "get_profile", "with_intra"]


@dataclass(frozen=True)
class IntraHostLink:
    """The link between the ranks of one host (a tensor-parallel group: suite.pipeline.placement
    puts tp innermost). bandwidth_bps: each rank's share, each direction; latency_s per message."""

    name: str
    bandwidth_bps: float
    latency_s: float

    def serialize_s(self, nbytes: float) -> float:
        return 0.0 if self.bandwidth_bps == math.inf else 8.0 * nbytes / self.bandwidth_bps


# Per-GPU figures, each direction: NVLink 3 (A100: 12 links x 25 GB/s = 300 GB/s), PCIe 4.0 x16 (~32 GB/s);
# latencies are typical small-message figures of NCCL over each.
INTRA_HOST: dict[str, IntraHostLink] = {
    link.name: link
    for link in (
        IntraHostLink("nvlink", 2.4e12, 2e-6),
        IntraHostLink("pcie", 2.56e11, 5e-6),
        IntraHostLink("ideal", math.inf, 0.0),  # the emulated hosts: one namespace, loopback between its ranks
    )
}


@dataclass(frozen=True)
class NetworkProfile:
    """A network between neighbouring stages (and between data-parallel replicas), and the
    link inside each host (between the tensor-parallel ranks of a stage).

    bandwidth_bps: each host's NIC bandwidth in bits per second (each direction; full duplex).
    latency_s: one-way latency per message in seconds.
    intra: the intra-host link (NVLink-class by default; only tensor-parallel traffic uses it).
    """

    name: str
    bandwidth_bps: float
    latency_s: float
    intra: IntraHostLink = INTRA_HOST["nvlink"]

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
IDEAL = NetworkProfile("ideal", math.inf, 0.0, INTRA_HOST["ideal"])  # the compute-only reference for comm_s


def get_profile(name: str) -> NetworkProfile:
    """The profile called ``name``; unknown names list the valid ones."""
    if name not in PROFILES:
        raise KeyError(f"unknown network profile {name!r}; valid profiles: {', '.join(PROFILES)}")
    return PROFILES[name]


def with_intra(profile: NetworkProfile, intra: str) -> NetworkProfile:
    """``profile`` with another intra-host link (``nvlink``, ``pcie``, ``ideal``); unknown names list the valid ones."""
    from dataclasses import replace

    if intra not in INTRA_HOST:
        raise KeyError(f"unknown intra-host link {intra!r}; valid: {', '.join(INTRA_HOST)}")
    return replace(profile, name=f"{profile.name}+{intra}", intra=INTRA_HOST[intra])
