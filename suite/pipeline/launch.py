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
from dataclasses import replace
from pathlib import Path

from .config import CellConfig
from .errors import RunError, RunTimeout
from .result import RunResult
from .schedules import pipeline_ranks

__all__ = ["launch", "DEFAULT_TIME_LIMIT_S", "RUN_MARKER"]

DEFAULT_TIME_LIMIT_S = 4 * 3600.0  # watchdog when the config sets no time_limit_s
RUN_MARKER = "MPCBENCH_RUN_DIR"  # env var set on every process of a run (the cleanup sweep's key)
_DIST_ENV = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}
_SECONDARY = ("peer died or stalled", "Connection closed", "Connection reset", "Broken pipe", "SIGTERM", "SignalException")


def _absolute_plugins(cfg: CellConfig) -> CellConfig:
    """Plugin file paths made absolute, so workers find them from any working directory."""
    fixed = tuple(str(Path(p).resolve()) if (p.endswith(".py") or "/" in p) and Path(p).exists() else p for p in cfg.plugins)
    return replace(cfg, plugins=fixed)


def launch(config: CellConfig, keep_dir: bool = False) -> RunResult:
    """Run ``config`` (already validated, mode torchrun) under torchrun; see the module docstring."""
    nproc = pipeline_ranks(config.schedule, config.n_stages) * config.dp
    run_dir = Path(tempfile.mkdtemp(prefix="mpcbench-run-"))
    cfg_path = run_dir / "config.json"
    cfg_path.write_text(json.dumps(_absolute_plugins(config).to_dict()))
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
        "--max-restarts=0", "--monitor-interval=0.1",
        "-m", "suite.pipeline.worker", "--config", str(cfg_path), "--out", str(run_dir),
    ]  # fmt: skip
    env = {**os.environ, RUN_MARKER: str(run_dir), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    for k in list(env):  # a run launched from inside another distributed job starts fresh
        if k in _DIST_ENV or k.startswith("TORCHELASTIC_"):
            del env[k]
    limit = config.time_limit_s or DEFAULT_TIME_LIMIT_S
    log_path = run_dir / "torchrun.log"
    ok = False
    try:
        with open(log_path, "wb") as log:
            # torchrun stays in the caller's process group (a runner that kills its cell's group
            # reaches it) and dies with the caller; workers die with torchrun (see worker.py).
            proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, preexec_fn=_pdeathsig_setter()
            )
            try:
                rc = proc.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                _kill_run(run_dir, proc)
                raise RunTimeout(
                    f"run exceeded time_limit_s={limit:g}: killed all {nproc} ranks (log: {log_path})"
                ) from None
            except BaseException:  # KeyboardInterrupt etc.: never leave the job running
                _kill_run(run_dir, proc)
                raise
        _kill_run(run_dir, proc)  # stragglers (should be none after torchrun exits)
        result_path = run_dir / "result.json"
        if rc != 0 or not result_path.exists():
            raise RunError(_failure_line(run_dir, log_path, rc))
        result = RunResult.from_dict(json.loads(result_path.read_text()))
        ok = True
        return result
    finally:
        if ok and not keep_dir:
            shutil.rmtree(run_dir, ignore_errors=True)


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


def _failure_line(run_dir: Path, log_path: Path, rc: int) -> str:
    """One line naming the failing rank and its error (primary errors before peer fallout)."""
    errors = sorted((run_dir / "errors").glob("rank*.txt"), key=lambda f: f.stat().st_mtime)
    lines = [f.read_text().strip() for f in errors]
    primary = [l for l in lines if not any(s in l for s in _SECONDARY)]
    log = log_path.read_text(errors="replace") if log_path.exists() else ""
    # torchrun lists every failed rank (root cause and others); a rank that left no Python
    # error died from outside (signal, os._exit) and is the cause of its peers' transport errors,
    # whichever failure torchrun happened to observe first. Prefer signals among those.
    failed = re.findall(r"^\s+rank\s+:\s*(\d+)[^\n]*\n\s+exitcode\s+:\s*(-?\d+)", log, re.M)
    silent = [(r, c) for r, c in failed if not any(l.startswith((f"rank {r} ", f"rank {r}:")) for l in lines)]
    silent.sort(key=lambda rc: int(rc[1]) >= 0)
    if primary:
        msg = primary[0]
    elif silent:
        r, code = silent[0]
        how = f"signal {-int(code)}" if int(code) < 0 else f"exit code {code}"
        msg = f"rank {r} died ({how}) without a Python error"
        if lines:
            msg += f"; then {lines[0]}"
    elif lines:
        msg = lines[0]
    else:
        tail = [l.strip() for l in log.splitlines() if l.strip()]
        msg = tail[-1] if tail else f"torchrun exited with code {rc} and no output"
    return f"torchrun run failed: {msg} (log: {log_path})"
