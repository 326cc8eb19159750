"""The network model on one machine's shared cores: what the emulated hosts of ``--link`` add.

``suite.results.network`` gives every host cores of its own (what records and the leaderboard
show). The emulated hosts (``mpcbench run --link``, ``suite/pipeline/netns.py``) are network
namespaces on one machine, so all the job's processes share its cores: a 2-stage x tp 2 cell is
4 processes on 2 cores, and while both stages compute, each process gets half a core. The
model's per-action costs are thread CPU seconds (they do not grow while a process waits for a
core), so on the emulation the model is short by that sharing, not by anything the network does.

``step_s(inputs, net, cores)`` re-runs the model's own simulation with a processor-sharing CPU
(:class:`Cores`): a pipeline rank's action is a job of its CPU seconds on each of the rank's
processes (its TP ranks x replicas, which compute at once); the busy processes share ``cores``
equally, each at most one core. Links, messages, TP all-reduce times and the optimizer are as
in the model (the optimizer and data-parallel reductions are not shared: small here).

A benchmark-side tool (it subclasses the simulator's private ``_Sim``): the network check uses it
to separate the emulation's CPU limit from the network model's error
(``benchmarks/network_model_check.py``, ``ratio_*_shared_cores``). Its home, if records should
model emulated runs this way, is the simulator itself (``suite/results/network/simulation.py``,
with the committed leaderboard index regenerated, since that code is hashed into it).
"""

from __future__ import annotations

from typing import Any, Callable

from suite.results.network import NetworkProfile, TimingInputs
from suite.results.network.simulation import _check_step, _Sim

__all__ = ["Cores", "step_s", "step_time"]


class Cores:
    """Processor sharing: the jobs' processes share ``cores`` equally, each at most one core.
    A job is ``work`` CPU seconds on each of ``procs`` processes; it ends when they are done."""

    def __init__(self, sim: _Sim, cores: float) -> None:
        self.sim, self.cores = sim, cores
        self.jobs: dict[int, list[Any]] = {}  # id -> [CPU seconds left per process, procs, done]
        self._ids = 0
        self._updated = 0.0
        self._version = 0  # a completion scheduled before the last change is stale

    def run(self, work: float, procs: float, done: Callable[[float], None]) -> None:
        if work <= 0:
            done(self.sim.now)
            return
        self._advance()
        self._ids += 1
        self.jobs[self._ids] = [float(work), procs, done]
        self._reschedule()

    def _rate(self) -> float:
        busy = sum(j[1] for j in self.jobs.values())
        return min(1.0, self.cores / busy) if busy > 0 else 1.0

    def _advance(self) -> None:
        dt = self.sim.now - self._updated
        if dt > 0 and self.jobs:
            rate = self._rate()
            for j in self.jobs.values():
                j[0] -= rate * dt
        self._updated = self.sim.now

    def _reschedule(self) -> None:
        self._version += 1
        if self.jobs:
            t = self.sim.now + min(j[0] for j in self.jobs.values()) / self._rate()
            version = self._version
            self.sim.at(t, lambda _t: self._complete(version))

    def _complete(self, version: int) -> None:
        if version != self._version:
            return
        self._advance()
        finished = [k for k, j in self.jobs.items() if j[0] <= 1e-12]
        if not finished:  # rounding left a sliver: finish the closest one
            finished = [min(self.jobs, key=lambda k: self.jobs[k][0])]
        dones = [self.jobs.pop(k)[2] for k in finished]
        self._reschedule()
        for done in dones:
            done(self.sim.now)


class _SharedSim(_Sim):
    """The model's simulation with every action's CPU seconds run on :class:`Cores`."""

    def __init__(self, *args: Any, cores: float, procs_per_rank: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.cpu = Cores(self, cores)
        self.procs_per_rank = procs_per_rank

    def _run_body(self, r: int) -> None:
        stage, kind, m = self.schedule[r][self.pos[r]]
        tp_s = self._tp_s(stage, kind)  # the TP all-reduces' transfer time: waiting, not computing

        def computed(t: float) -> None:
            self.at(t + tp_s, lambda _t: self._finish_action(r, stage, kind, m))

        self.cpu.run(self.stages[stage].of(kind).busy_s, self.procs_per_rank, computed)


def step_time(
    schedule, stages, load, replicas: int, net: NetworkProfile, protocol, cores: float, procs: float
) -> float:
    """``suite.results.network.step_time`` with all ranks on ``cores`` shared cores."""
    _check_step(schedule, stages, load)
    sim = _SharedSim(schedule, stages, load, net, protocol, replicas=replicas, cores=cores, procs_per_rank=procs)
    return max(sim.run())


def step_s(inputs: TimingInputs | dict, net: NetworkProfile, cores: float, statistic: str = "robust") -> float:
    """Mean modeled step after the uncompressed warm-up (as ``model_run``'s ``step_s``), all the
    run's processes (``measurement["processes"]``) on ``cores`` cores."""
    if not isinstance(inputs, TimingInputs):
        inputs = TimingInputs.from_dict(inputs)
    stages = inputs.mean_stages if statistic == "mean" and inputs.mean_stages else inputs.stages
    procs = (inputs.measurement.get("processes") or len(inputs.schedule) * inputs.replicas) / len(inputs.schedule)
    runs = inputs.runs()
    total = sum(c for _, c in runs)
    warm = inputs.warmup_steps if inputs.warmup_steps < total else 0
    done = steady_s = 0.0
    for load, count in runs:
        steady = max(0, min(count, done + count - warm))
        if steady:
            t = step_time(inputs.schedule, stages, load, inputs.replicas, net, inputs.protocol, cores, procs)
            steady_s += steady * t
        done += count
    return steady_s / max(1, total - warm)
