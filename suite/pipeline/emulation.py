"""A multi-host torchrun job on one machine: each node in its own network namespace, links limited by the kernel.

``launch_emulated(config)`` (``config.link`` set, mode torchrun) builds ``config.nnodes`` namespaces on
a bridge (``suite.pipeline.netns``), starts one torchrun agent per node inside its namespace
exactly as on real hosts (c10d rendezvous on node 0's address, gloo bound to the node's veth
through ``GLOO_SOCKET_IFNAME``), waits for all of them (``launch.run_agents``), and removes every
namespace and link on the way out (success, failure, SIGINT/SIGTERM; a SIGKILLed run's leftovers
are removed by the next run). Each node has its own run directory, as separate hosts would.

The result gets ``network``: hosts, link, ``emulated: True``, the latency note (bandwidth
limits only), the kernel byte counters per node (filled by the workers), the measured step
and communication times over the link and the network model's prediction for the same link
(:func:`suite.pipeline.link_model.attach_link_times`).
"""

from __future__ import annotations

import signal
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from .config import CellConfig
from .errors import RunError
from .launch import _Agent, _base_env, run_agents, torchrun_command
from .link_model import attach_link_times
from .netns import NO_LATENCY_NOTE, EmulatedHosts, missing_requirements, parse_link
from .result import RunResult

__all__ = ["launch_emulated", "RDZV_PORT"]

RDZV_PORT = 29400  # inside the run's own namespaces: cannot collide with anything outside them


@contextmanager
def _sigterm_as_exception() -> Iterator[None]:
    """SIGTERM raises SystemExit in the main thread while the hosts exist, so cleanup runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def launch_emulated(config: CellConfig, keep_dir: bool = False) -> RunResult:
    """Run ``config`` as ``config.nnodes`` emulated hosts over ``config.link`` (see the module docstring)."""
    problem = missing_requirements()
    if problem:
        raise RunError(problem)
    link = parse_link(str(config.link))
    n = config.nnodes
    nproc = config.n_procs // n
    root = Path(tempfile.mkdtemp(prefix="mpcbench-hosts-"))
    with _sigterm_as_exception(), EmulatedHosts(n, link) as hosts:
        endpoint = f"{hosts.address(0)}:{RDZV_PORT}"
        agents = []
        for i in range(n):
            run_dir = root / f"node{i}"
            run_dir.mkdir()
            cmd = torchrun_command(
                config,
                run_dir,
                nproc_per_node=nproc,
                nnodes=n,
                rdzv_endpoint=endpoint,
                is_host=i == 0,
                local_addr=hosts.address(i),
            )
            env = {**_base_env(), "GLOO_SOCKET_IFNAME": hosts.iface(i)}
            agents.append(
                _Agent(f"node {i} (namespace {hosts.namespace(i)})", hosts.exec_prefix(i) + cmd, env, run_dir)
            )
        result = run_agents(config, agents, keep_dir=keep_dir)
    if not keep_dir:
        import shutil

        shutil.rmtree(root, ignore_errors=True)
    result.network.update(
        {
            "hosts": n,
            "link": link.name,
            "rate_bps": link.rate_bps,
            "emulated": True,
            "latency_added_s": 0.0,
            "latency_note": NO_LATENCY_NOTE,
        }
    )
    attach_link_times(result, link.name, link.rate_bps, link.profile_latency_s)
    return result
