"""Launch a torchrun job for one cell, watch it, and always clean up.

``launch(config)`` starts ``python -m torch.distributed.run --standalone
--nproc-per-node=<pipeline ranks*dp> -m suite.pipeline.worker ...`` in its own session, waits with a
wall-clock watchdog and returns the RunResult that rank 0 wrote. Failure handling:

- a rank that raises writes a one-line error and exits; its peers' blocked receives fail
  (connection closed) and torchrun stops the job;
- a rank that stalls makes its peers' receives time out after ``comm_timeout_s``;
- a rank that dies silently (killed, ``os._exit``) is reported by torchrun's exit summary;
- past the watchdog (``time_limit_s``), every process of the job is SIGKILLed.

Whatever happens, every process carrying this run's marker in its environment is killed
before returning, so nothing is orphaned; the error is one line naming the failing rank.
torchrun stays in the caller's process group (a runner killing its cell's group reaches
it) and gets SIGKILL if the caller dies; workers get SIGKILL if torchrun dies.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from .config import CellConfig
from .errors import RunError, RunTimeout
from .result import RunResult

__all__ = ["launch", "run_agents", "torchrun_command", "DEFAULT_TIME_LIMIT_S", "RUN_MARKER"]

DEFAULT_TIME_LIMIT_S = 4 * 3600.0  # watchdog when the config sets no time_limit_s
FAILURE_GRACE_S = 10.0  # after one host's agent failed, the others' time to report before they are killed
RUN_MARKER = "MPCBENCH_RUN_DIR"  # env var set on every process of a run (the cleanup sweep's key)
_DIST_ENV = {
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
}
_SECONDARY = (
    "peer died or stalled",
    "Connection closed",
    "Connection reset",
    "Broken pipe",
    "SIGTERM",
    "SignalException",
)


def _absolute_plugins(cfg: CellConfig) -> CellConfig:
    """Plugin file paths made absolute, so workers find them from any working directory."""
    fixed = tuple(
        str(Path(p).resolve()) if (p.endswith(".py") or "/" in p) and Path(p).exists() else p for p in cfg.plugins
    )
    return replace(cfg, plugins=fixed)


@dataclass
class _Agent:
    """One torchrun agent: the whole job on one host, or one node of a multi-host job."""

    label: str  # how errors name it ("node 1 (namespace mpcbl-00abcd-n1)")
    cmd: list[str]
    env: dict[str, str]
    run_dir: Path
    proc: subprocess.Popen | None = None
    # rank -> when it was first seen stopped (SIGSTOP, a debugger): torchrun SIGKILLs a stopped rank in
    # the end, which alone would read like a crash
    stopped: dict[str, float] = field(default_factory=dict)

    @property
    def log_path(self) -> Path:
        return self.run_dir / "torchrun.log"


def _base_env() -> dict[str, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    for k in list(env):  # a run launched from inside another distributed job starts fresh
        if k in _DIST_ENV or k.startswith("TORCHELASTIC_"):
            del env[k]
    return env


def torchrun_command(
    config: CellConfig,
    run_dir: Path,
    *,
    nproc_per_node: int,
    nnodes: int = 1,
    rdzv_endpoint: str | None = None,
    is_host: bool | None = None,
    local_addr: str | None = None,
) -> list[str]:
    """The torchrun command of one host; writes the config file it reads into ``run_dir``.

    One host: ``--standalone``. Several: the c10d rendezvous at ``rdzv_endpoint`` with one
    rendezvous id per cell (every host derives the same one). ``is_host`` pins which host serves
    the rendezvous store and ``local_addr`` the address this host advertises to the others;
    torchrun guesses both from the host name otherwise, which fails when hosts share a host name
    (network namespaces on one machine; see docs/ARCHITECTURE.md, "Several hosts")."""
    cfg_path = run_dir / "config.json"
    cfg_path.write_text(json.dumps(_absolute_plugins(config).to_dict()))
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc-per-node={nproc_per_node}",
        "--max-restarts=0",
        "--monitor-interval=0.1",
    ]
    if nnodes == 1 and rdzv_endpoint is None:
        cmd.insert(3, "--standalone")
    else:
        cmd += [
            f"--nnodes={nnodes}",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint={rdzv_endpoint}",
            f"--rdzv-id=mpcbench-{config.key()}",
        ]
        if is_host is not None:
            cmd.append(f"--rdzv-conf=is_host={str(is_host).lower()}")
        if local_addr:
            cmd.append(f"--local-addr={local_addr}")
    return cmd + ["-m", "suite.pipeline.worker", "--config", str(cfg_path), "--out", str(run_dir)]


def launch(config: CellConfig, keep_dir: bool = False) -> RunResult:
    """Run ``config`` (already validated, mode torchrun) under torchrun; see the module docstring.

    ``config.link``: emulated hosts on this machine (``suite.pipeline.emulation``). ``config.nnodes > 1``:
    this host's part of a multi-host job (every host runs the same command with its own ``node_rank``);
    the result comes back to every host over the process group."""
    if config.link is not None:
        from .emulation import launch_emulated

        return launch_emulated(config, keep_dir=keep_dir)
    nproc = config.n_procs // config.nnodes
    run_dir = Path(tempfile.mkdtemp(prefix="mpcbench-run-"))
    multi = config.nnodes > 1
    cmd = torchrun_command(
        config,
        run_dir,
        nproc_per_node=nproc,
        nnodes=config.nnodes,
        rdzv_endpoint=config.rdzv_endpoint,
        is_host=(config.node_rank == 0) if multi else None,
    )
    label = f"node {config.node_rank}" if multi else "torchrun"
    result = run_agents(config, [_Agent(label, cmd, _base_env(), run_dir)], keep_dir=keep_dir)
    if multi:
        result.network.update(
            {"hosts": config.nnodes, "node_rank": config.node_rank, "link": "real network", "emulated": False}
        )
    return result


def run_agents(
    config: CellConfig, agents: list[_Agent], keep_dir: bool = False, grace_s: float | None = None
) -> RunResult:
    """Start every agent, wait for all of them, return the result the first agent's host wrote.

    When one agent fails the job cannot finish (no restarts): the others get ``grace_s`` (default
    ``FAILURE_GRACE_S``, at most ``comm_timeout_s``) to write their ranks' errors before everything is
    killed; past ``time_limit_s`` everything is killed. Every process carrying an agent's marker is
    killed before returning."""
    limit = config.time_limit_s or DEFAULT_TIME_LIMIT_S
    grace = min(FAILURE_GRACE_S, config.comm_timeout_s) if grace_s is None else grace_s
    nproc = config.n_procs
    ok = False
    logs = []
    try:
        deadline = time.monotonic() + limit
        for a in agents:
            a.env[RUN_MARKER] = str(a.run_dir)
            log = open(a.log_path, "wb")
            logs.append(log)
            # torchrun stays in the caller's process group (a runner that kills its cell's group
            # reaches it) and dies with the caller; workers die with torchrun (see worker.py).
            a.proc = subprocess.Popen(
                a.cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=a.env,
                preexec_fn=_pdeathsig_setter(),
            )
        first_failure: tuple[float, _Agent] | None = None
        next_scan = time.monotonic() + 1.0
        try:
            while True:
                codes = [a.proc.poll() for a in agents if a.proc]
                if all(c is not None for c in codes):
                    break
                now = time.monotonic()
                if first_failure is None:
                    bad = next((a for a in agents if a.proc and a.proc.poll() not in (None, 0)), None)
                    if bad is not None:
                        first_failure = (now, bad)
                elif now - first_failure[0] > grace:
                    break  # the others did not notice in time: kill them below
                if now >= next_scan:  # once a second: which ranks are stopped (state T)
                    next_scan = now + 1.0
                    for a in agents:
                        for rank in _stopped_ranks(a.run_dir):
                            a.stopped.setdefault(rank, now)
                if now > deadline:
                    _kill_agents(agents)
                    raise RunTimeout(
                        f"run exceeded time_limit_s={limit:g}: killed all {nproc} ranks (log: {agents[0].log_path})"
                    )
                time.sleep(0.05)
        except BaseException:  # KeyboardInterrupt, SIGTERM turned into an exception: never leave the job running
            _kill_agents(agents)
            raise
        killed = [a for a in agents if a.proc and a.proc.poll() is not None and a.proc.returncode < 0]
        _kill_agents(agents)  # stragglers (none after a clean exit)
        result_path = agents[0].run_dir / "result.json"
        if any(a.proc.returncode != 0 for a in agents if a.proc) or not result_path.exists():
            raise RunError(_failure_line(agents, first_failure[1] if first_failure else None, killed))
        result = RunResult.from_dict(json.loads(result_path.read_text()))
        ok = True
        return result
    finally:
        for log in logs:
            log.close()
        if ok and not keep_dir:
            for a in agents:
                shutil.rmtree(a.run_dir, ignore_errors=True)


def _stopped_ranks(run_dir: Path) -> list[str]:
    """Ranks (their ``RANK``) of this run's processes that are stopped right now (Linux /proc)."""
    out = []
    for pid in _marked_pids(run_dir):
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            if state in ("T", "t"):
                env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                rank = next((v[5:].decode() for v in env if v.startswith(b"RANK=")), None)
                if rank is not None:
                    out.append(rank)
        except (OSError, IndexError, UnicodeDecodeError):
            continue
    return out


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(code).name
    except ValueError:
        return "unknown signal"


def _kill_agents(agents: list[_Agent]) -> None:
    for a in agents:
        if a.proc is not None:
            _kill_run(a.run_dir, a.proc)


def _pdeathsig_setter():
    """A no-argument callable for ``preexec_fn`` that makes the child get SIGKILL when the
    launching thread dies (Linux ``PR_SET_PDEATHSIG``), or None elsewhere. libc is resolved
    here, in the parent: between fork and exec the child must not import or allocate much
    (the caller may have threads)."""
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    sig = int(signal.SIGKILL)
    return lambda: prctl(1, sig)  # PR_SET_PDEATHSIG


def _marked_pids(run_dir: Path) -> list[int]:
    """Processes whose environment carries this run's marker (Linux /proc)."""
    needle = f"{RUN_MARKER}={run_dir}".encode() + b"\0"
    out = []
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else []:
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes() + b"\0":
                if (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":  # zombies are dead
                    out.append(int(entry.name))
        except (OSError, IndexError):
            continue
    return out


def _kill_run(run_dir: Path, proc: subprocess.Popen) -> None:
    """SIGKILL torchrun and every process carrying this run's marker.

    Workers lead their own sessions (torchrun starts them so), hence the sweep by marker
    rather than by process group; checking the marker also makes a reused pid safe."""
    if proc.poll() is None:
        proc.kill()
    for _ in range(100):
        left = _marked_pids(run_dir)
        if not left:
            break
        for pid in left:
            try:
                os.killpg(pid, signal.SIGKILL) if os.getpgid(pid) == pid else os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.05)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def _failure_line(agents: list[_Agent], first: _Agent | None, killed: list[_Agent]) -> str:
    """One line naming the failing agent or rank and its error (primary errors before peer fallout)."""
    where = agents[0].log_path if len(agents) == 1 else agents[0].run_dir.parent
    # an agent killed from outside (a signal before we killed anything) is the root cause of its peers' errors
    if len(agents) > 1 and killed:
        a = first if first in killed else killed[0]
        return (
            f"torchrun run failed: {a.label}: its torchrun died (signal {-a.proc.returncode}); "
            f"the other hosts stopped (logs: {where})"
        )
    msgs = [_agent_failure(a) for a in agents]
    primary = [m for m, is_primary in msgs if m and is_primary]
    others = [m for m, is_primary in msgs if m and not is_primary]
    msg = (primary or others or [f"torchrun exited with code {agents[0].proc.returncode} and no output"])[0]
    if len(agents) > 1:
        a = next(a for a, (m, _) in zip(agents, msgs) if m == msg)
        msg = f"{a.label}: {msg}"
    return f"torchrun run failed: {msg} (log: {where})"


def _agent_failure(agent: _Agent) -> tuple[str | None, bool]:
    """(one line, is it a root cause) for one agent's job, from its ranks' error files and torchrun's log."""
    run_dir, log_path = agent.run_dir, agent.log_path
    errors = sorted((run_dir / "errors").glob("rank*.txt"), key=lambda f: f.stat().st_mtime)
    lines = [f.read_text().strip() for f in errors]
    primary = [l for l in lines if not any(s in l for s in _SECONDARY)]
    log = log_path.read_text(errors="replace") if log_path.exists() else ""
    # torchrun lists every failed rank (root cause and others); a rank that left no Python
    # error died from outside (signal, os._exit) and is the cause of its peers' transport errors,
    # whichever failure torchrun happened to observe first. Prefer signals among those.
    failed = re.findall(r"^\s+rank\s+:\s*(\d+)[^\n]*\n\s+exitcode\s+:\s*(-?\d+)", log, re.M)
    silent = [(r, c) for r, c in failed if not any(l.startswith((f"rank {r} ", f"rank {r}:")) for l in lines)]
    # torchrun SIGTERMs the survivors itself, so a SIGTERM is fallout whatever order torchrun lists it
    # in (under load a survivor can be SIGTERMed before its receive fails): another signal is the
    # likeliest cause, then an exit code, a SIGTERM last
    silent.sort(key=lambda rc: (int(rc[1]) == -signal.SIGTERM, int(rc[1]) >= 0))
    if agent.stopped:  # seen stopped while the job ran: its peers' timeouts and torchrun's SIGKILL follow from it
        r = min(agent.stopped, key=agent.stopped.get)
        msg = f"rank {r} was stopped (SIGSTOP or a debugger) and stalled the run; its peers waited until they gave up"
        return msg + (f"; then {lines[0]}" if lines else ""), True
    if primary:
        return primary[0], True
    if silent:
        r, code = silent[0]
        how = f"signal {-int(code)}" if int(code) < 0 else f"exit code {code}"
        msg = f"rank {r} died ({how}) without a Python error" + (
            f" ({_signal_name(-int(code))})" if int(code) < 0 else ""
        )
        if lines:
            msg += f"; then {lines[0]}"
        return msg, True
    if lines:
        return lines[0], False
    if agent.proc is not None and agent.proc.returncode in (0, None):
        return None, False
    tail = [l.strip() for l in log.splitlines() if l.strip()]
    return (tail[-1] if tail else None), False
