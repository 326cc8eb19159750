"""Emulated hosts on one Linux machine: one network namespace per node, joined by a rate-limited bridge.

::

    namespace mpcbl-<id>-n0           root namespace                 namespace mpcbl-<id>-n1
    veth mpcbl<id>v0 10.213.0.10 <->  mpcbl<id>h0 ]              [ mpcbl<id>h1  <->  veth mpcbl<id>v1 10.213.0.11
      tbf: node 0's uplink              tbf: node 0's downlink  bridge mpcbl<id>b  ...

Every veth end has a ``tbf`` qdisc at the link's rate on its egress: the namespace end limits
what the node sends (its uplink), the bridge end what it receives (its downlink), like a
consumer connection with the same rate both ways. The kernel has no ``netem`` here, so the
links add **no latency** (bandwidth limits only); the network model keeps latency.

Addresses exist only inside the run's namespaces (the root namespace gets none, so nothing
here is reachable from outside or collides with the host). Names carry the owner's pid
(``<id>`` = 6 hex digits): :func:`sweep_leftovers` removes namespaces and links of owners that
are no longer alive (a SIGKILLed run), and :class:`EmulatedHosts` removes its own on exit.
Needs root (CAP_NET_ADMIN) and the ``ip`` and ``tc`` commands; :func:`missing_requirements`
says what is missing in one line.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field

from suite.results.network.profiles import PROFILES

__all__ = [
    "Link",
    "parse_link",
    "missing_requirements",
    "EmulatedHosts",
    "sweep_leftovers",
    "existing",
    "PREFIX",
    "NO_LATENCY_NOTE",
]

PREFIX = "mpcbl"  # "mpcb" + "l" (emulated links): other tools may use "mpcb-"
SUBNET = "10.213.0"  # inside the run's namespaces only; host addresses .10 .. .99 sort like node indices
MAX_NODES = 90
MTU = 9000  # jumbo frames: TCP/IP headers cost 0.7% of a full segment instead of 4.5% at 1500
NO_LATENCY_NOTE = "emulated link: bandwidth limit only (tbf); no latency added (this kernel has no netem)"
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmg]?)(?:bit|bps)\s*$", re.I)
_UNIT = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9}


@dataclass(frozen=True)
class Link:
    """A link to emulate: ``name`` as given (a profile name or a rate), ``rate_bps`` in bit/s,
    and the profile's one-way latency (0 for a plain rate), which the emulation does not add."""

    name: str
    rate_bps: float
    profile_latency_s: float = 0.0

    @property
    def tc_rate(self) -> str:
        return f"{int(self.rate_bps)}bit"


def parse_link(value: str) -> Link:
    """A network profile name (``100Mbps``) or a rate (``250mbit``, ``20Mbps``, ``1gbit``); raises ValueError."""
    if value in PROFILES:
        p = PROFILES[value]
        return Link(value, p.bandwidth_bps, p.latency_s)
    m = _RATE.match(value)
    if not m or float(m.group(1)) <= 0:
        raise ValueError(
            f"unknown link {value!r}; give a network profile ({', '.join(PROFILES)}) or a rate such as 250mbit or 20Mbps"
        )
    rate = float(m.group(1)) * _UNIT[m.group(2).lower()]
    if rate < 8e3 or not math.isfinite(rate):
        raise ValueError(f"link rate {value!r} is below 8kbit; give a rate such as 250mbit")
    return Link(value, rate, 0.0)


@functools.lru_cache(maxsize=1)
def missing_requirements() -> str | None:
    """None if namespaces can be made here, else one line saying what is missing."""
    missing = [c for c in ("ip", "tc") if shutil.which(c) is None]
    if missing:
        return f"emulated links need the {' and '.join(missing)} command(s) (package iproute2)"
    if hasattr(os, "geteuid") and os.geteuid() != 0:
        return "emulated links need root (CAP_NET_ADMIN) to create network namespaces; run as root or drop --link"
    probe = f"{PREFIX}-probe-{os.getpid():x}"
    try:
        _ip("netns", "add", probe)
    except RuntimeError as e:
        return f"emulated links need CAP_NET_ADMIN: creating a network namespace failed ({e})"
    finally:
        _ip("netns", "del", probe, check=False)
    return None


def _run(cmd: list[str], check: bool = True) -> str:
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {(p.stderr or p.stdout).strip().splitlines()[-1:] or p.returncode}")
    return p.stdout


def _ip(*args: str, check: bool = True) -> str:
    return _run(["ip", *args], check)


def _owner_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_NS_NAME = re.compile(rf"^{PREFIX}-([0-9a-f]{{6}})-n\d+$")
_LINK_NAME = re.compile(rf"^{PREFIX}([0-9a-f]{{6}})[bhv]\d*$")


def sweep_leftovers() -> list[str]:
    """Remove namespaces and links left by runs whose owner process is gone; returns their names."""
    removed = []
    for line in _ip("netns", "list", check=False).splitlines():
        name = line.split()[0] if line.strip() else ""
        m = _NS_NAME.match(name)
        if m and not _owner_alive(int(m.group(1), 16)):
            _ip("netns", "del", name, check=False)
            removed.append(name)
    try:
        links = json.loads(_ip("-j", "link", "show", check=False) or "[]")
    except json.JSONDecodeError:
        links = []
    for link in links:
        name = str(link.get("ifname", "")).split("@")[0]
        m = _LINK_NAME.match(name)
        if m and not _owner_alive(int(m.group(1), 16)):
            _ip("link", "del", name, check=False)
            removed.append(name)
    return removed


def _tbf(dev: str, link: Link, netns: str | None = None) -> None:
    # burst: a small bucket, one jumbo frame plus headroom (tbf drops a packet larger than its
    # bucket; offload packets it splits), or 0.5 ms at the rate if larger. A big bucket refills
    # while a pipeline's link idles between payloads and then lets each payload's first
    # bucketful out at line rate (docs/ARCHITECTURE.md, "Checked against emulated links").
    # The queue holds 8 MB, so TCP sees no drops.
    burst = max(MTU + 1024, int(link.rate_bps / 8 * 5e-4))
    ns = ["-n", netns] if netns else []
    _run(
        [
            "tc",
            *ns,
            "qdisc",
            "replace",
            "dev",
            dev,
            "root",
            "tbf",
            "rate",
            link.tc_rate,
            "burst",
            str(burst),
            "limit",
            "8mb",
        ]
    )


@dataclass
class EmulatedHosts:
    """``n`` namespaces on one bridge, each node's traffic limited to ``link`` both ways.

    Use as a context manager: entering builds everything (removing leftovers of dead runs
    first), leaving removes everything it made, whatever happened in between."""

    n: int
    link: Link
    owner: int = field(default_factory=os.getpid)
    made_ns: list[str] = field(default_factory=list)
    made_links: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not 1 <= self.n <= MAX_NODES:
            raise ValueError(f"emulated hosts: {self.n} nodes; valid 1..{MAX_NODES}")
        self.id = f"{self.owner:06x}"[-6:]

    # names -------------------------------------------------------------------------------
    def namespace(self, i: int) -> str:
        return f"{PREFIX}-{self.id}-n{i}"

    def iface(self, i: int) -> str:
        """The node's interface inside its namespace (gloo binds to it)."""
        return f"{PREFIX}{self.id}v{i}"

    def address(self, i: int) -> str:
        return f"{SUBNET}.{10 + i}"

    @property
    def bridge(self) -> str:
        return f"{PREFIX}{self.id}b"

    def exec_prefix(self, i: int) -> list[str]:
        """Command prefix that runs a program inside node ``i``'s namespace."""
        return ["ip", "netns", "exec", self.namespace(i)]

    # life cycle ----------------------------------------------------------------------------
    def __enter__(self) -> EmulatedHosts:
        sweep_leftovers()
        self.remove()  # our own pid's names from an earlier run in this process
        try:
            self._build()
        except BaseException:
            self.remove()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def _build(self) -> None:
        _ip("link", "add", self.bridge, "mtu", str(MTU), "type", "bridge")
        self.made_links.append(self.bridge)
        _ip("link", "set", self.bridge, "up")
        for i in range(self.n):
            ns, v, h = self.namespace(i), self.iface(i), f"{PREFIX}{self.id}h{i}"
            _ip("netns", "add", ns)
            self.made_ns.append(ns)
            _ip("link", "add", v, "mtu", str(MTU), "type", "veth", "peer", "name", h, "mtu", str(MTU))
            self.made_links.append(h)
            _ip("link", "set", v, "netns", ns)
            _ip("link", "set", h, "master", self.bridge)
            _ip("link", "set", h, "up")
            _ip("-n", ns, "addr", "add", f"{self.address(i)}/24", "dev", v)
            _ip("-n", ns, "link", "set", v, "up")
            _ip("-n", ns, "link", "set", "lo", "up")  # local ranks of one node talk over loopback
            _tbf(v, self.link, ns)  # uplink
            _tbf(h, self.link)  # downlink

    def remove(self) -> None:
        """Delete every namespace and link this owner may have made (idempotent)."""
        for i in range(self.n):
            _ip("netns", "del", self.namespace(i), check=False)
        for i in range(self.n):
            _ip("link", "del", f"{PREFIX}{self.id}h{i}", check=False)  # gone with its peer, normally
        _ip("link", "del", self.bridge, check=False)
        self.made_ns.clear()
        self.made_links.clear()


def existing() -> list[str]:
    """Namespaces and links with this module's prefix (for tests: nothing may be left behind)."""
    names = [l.split()[0] for l in _ip("netns", "list", check=False).splitlines() if _NS_NAME.match(l.split(" ")[0])]
    try:
        links = json.loads(_ip("-j", "link", "show", check=False) or "[]")
    except json.JSONDecodeError:
        links = []
    return names + [n for l in links if _LINK_NAME.match(n := str(l.get("ifname", "")).split("@")[0])]
