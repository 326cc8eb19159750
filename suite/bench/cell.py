"""Run ONE cell in an isolated child process and turn what happened into a record.

The child validates the config, imports the plugins, calls ``suite.pipeline.runtime.run(config)`` and
writes the RunResult as JSON to a file. Everything else about it is untrusted: a plugin may
raise, hang, segfault, call ``os._exit`` or make the runtime return garbage. The parent
therefore

- runs it as its own session (process group) with a time limit, and kills the whole group
  (torchrun and its workers included) when the limit passes;
- reads the result only from a complete file (written to a temp name, then renamed);
- checks the result (finite metrics, sane byte counts) before calling the cell ``ok``;
- turns every failure into a ONE-line reason (exception type and message, or exit code /
  signal); the full traceback and the child's output go to ``<store>.logs/<cell>.log``.

The child is forked from a fork server that has torch & co. already imported
(``suite.bench.forkserver``: seconds saved per cell), or, with ``MPCBENCH_ISOLATION=spawn`` or when
the server is unavailable, spawned as ``python -m suite.bench.cell``. Either way it watches the
runner: if the runner dies (even by SIGKILL) the child kills its own process group, so no
orphaned training keeps running.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from suite import settings
from suite.pipeline.config import CellConfig
from suite.pipeline.result import RunResult

from .forkserver import cell_environment
from .matrix import PlannedCell
from .record_builder import ResultError, _now, build_record, check_result, failed_record

__all__ = ["run_cell", "execute", "interpret", "child_entry", "DEFAULT_RUNTIME", "log_path_for", "one_line"]

DEFAULT_RUNTIME = "suite.pipeline.runtime:run"
KILL_GRACE_S = 5.0


def one_line(e: BaseException) -> str:
    """``"TypeError: message"`` on one line, at most ~500 characters."""
    msg = " ".join(str(e).split())
    text = f"{type(e).__name__}: {msg}" if msg else type(e).__name__
    return text if len(text) <= 500 else text[:497] + "..."


def log_path_for(config: CellConfig, log_dir: Path) -> Path:
    safe = re.sub(r"[^A-Za-z0-9._=-]+", "_", config.cell_id)[:120]
    return log_dir / f"{safe}-{config.key()}.log"


def _signal_name(rc: int) -> str:
    try:
        return signal.Signals(-rc).name
    except ValueError:
        return f"signal {-rc}"


class _Spawned:
    """A cell in a freshly spawned interpreter (``MPCBENCH_ISOLATION=spawn``, or no fork server)."""

    def __init__(self, argv: list[str], logf: Any, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", *argv, "--parent", str(os.getpid())],
            stdin=subprocess.DEVNULL,
            stdout=logf,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
        )
        self.pid = self.proc.pid

    def wait(self, timeout: float | None) -> int | None:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None


def _kill_group(child: Any) -> int | None:
    """SIGTERM the cell's process group, SIGKILL what is left after a grace period; return
    the child's exit code."""
    rc = None
    for sig, wait in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, 30.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, sig)
        rc = child.wait(wait)
        if rc is not None:
            break
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signal.SIGKILL)  # grandchildren that outlived the child
    return rc


def _task_module(task: str) -> tuple[str, ...]:
    """The built-in module defining ``task`` (for the fork server to preload), if any."""
    try:
        from tasks import get_task_class

        module = get_task_class(task).__module__
    except Exception:  # noqa: BLE001 - the cell itself will report it
        return ()
    return (module,) if module.startswith("tasks.") else ()


def _launch(argv: list[str], log: Path, logf: Any, env: dict[str, str], task: str) -> Any:
    """Start the cell process: forked from the fork server when possible, else spawned."""
    if settings.isolation() != "spawn" and hasattr(os, "fork") and sys.platform == "linux":
        from .forkserver import ForkServerError, get_server

        try:
            return get_server(env).start(argv, str(log), env, os.getcwd(), preload=_task_module(task))
        except ForkServerError as e:
            logf.write(f"(fork server unavailable: {e}; spawning)\n")
            logf.flush()
    return _Spawned(argv, logf, env)


_LIVE: set[Any] = set()  # cells running now (several with -j): killed when the runner is interrupted
_LIVE_LOCK = threading.Lock()


def kill_running() -> None:
    """Kill every cell process this runner has running (the parallel executors call it on Ctrl-C:
    their worker threads cannot receive KeyboardInterrupt themselves). Signals only: the thread
    running each cell is the one waiting for its exit (a second waiter would steal it); SIGTERM,
    then SIGKILL for the groups still there after the grace period."""
    with _LIVE_LOCK:
        children = list(_LIVE)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for child in children:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child.pid, sig)
        deadline = time.monotonic() + KILL_GRACE_S
        while time.monotonic() < deadline:
            with _LIVE_LOCK:
                children = [c for c in children if c in _LIVE]
            if not children:
                return
            time.sleep(0.05)


def run_cell(
    cell: PlannedCell | CellConfig,
    *,
    log_dir: str | Path,
    time_limit_s: float | None = None,
    runtime: str = DEFAULT_RUNTIME,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Run one cell in a child process; return its record (status ok, failed or timeout).

    Never raises for anything the cell does (KeyboardInterrupt is passed on after the
    child is killed). ``time_limit_s`` defaults to ``config.time_limit_s`` (None: no limit).
    ``runtime`` is the ``module:function`` (or ``file.py:function``) the child calls; only
    tests change it. ``env``: variables set for this cell only (its slot's pinning,
    ``suite.bench.resources.Slot.env``). Thread-safe: the parallel executors call it from
    several threads at once.
    """
    from .provenance import provenance

    planned = cell if isinstance(cell, PlannedCell) else PlannedCell(cell)
    config = planned.config
    limit = time_limit_s if time_limit_s is not None else config.time_limit_s
    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_path_for(config, log_dir).resolve()

    if planned.error is not None:  # e.g. its plugin failed to import: fails without running
        with open(log, "a", encoding="utf-8") as f:
            f.write(f"=== {_now()} {config.cell_id}: not run\n{planned.error}\n")
        return failed_record(config, planned.error, provenance(config), log=str(log))

    with tempfile.TemporaryDirectory(prefix="mpcbench-cell-") as tmp:
        cfg_file = Path(tmp) / "config.json"
        out_file = Path(tmp) / "result.json"
        cfg_file.write_text(json.dumps(config.to_dict()))
        env = {**cell_environment(), **(env or {})}
        argv = ["suite.bench.cell", "--config", str(cfg_file), "--out", str(out_file), "--runtime", runtime]
        t0 = time.perf_counter()
        with open(log, "a", encoding="utf-8") as logf:
            logf.write(f"=== {_now()} {config.cell_id} (key {config.key()}, limit {limit} s)\n")
            logf.flush()
            child = _launch(argv, log, logf, env, config.task)
            with _LIVE_LOCK:
                _LIVE.add(child)
            timed_out = False
            try:
                rc = child.wait(limit)
                if rc is None:
                    timed_out = True
                    rc = _kill_group(child)
                else:  # the child is gone; make sure nothing it started survives it
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(child.pid, signal.SIGKILL)
            except BaseException:  # Ctrl-C / runner shutdown: leave nothing running
                _kill_group(child)
                raise
            finally:
                with _LIVE_LOCK:
                    _LIVE.discard(child)
        wall = time.perf_counter() - t0
        payload = None
        if out_file.exists():
            try:
                payload = json.loads(out_file.read_text())
            except ValueError as e:
                payload = {"ok": False, "error": f"unreadable result file ({one_line(e)})"}

    return interpret(config, payload, rc, timed_out=timed_out, limit=limit, wall_s=wall, log=log)


def interpret(
    config: CellConfig,
    payload: Any,
    returncode: int | None,
    *,
    timed_out: bool = False,
    limit: float | None = None,
    wall_s: float | None = None,
    log: Path | None = None,
) -> dict[str, Any]:
    """The record for what a cell's child left behind: its output file's ``payload`` (None if
    it wrote none), its exit code, and whether it was killed for its time limit."""
    from .provenance import provenance

    prov = payload.get("provenance") if isinstance(payload, dict) else None
    if not isinstance(prov, dict):
        prov = provenance(config)
    log_ref = str(log) if log else None
    log_name = log.name if log else "the cell log"

    def fail(reason: str, status: str = "failed") -> dict[str, Any]:
        if log:
            with open(log, "a", encoding="utf-8") as f:
                f.write(f"=== {status}: {reason}\n")
        return failed_record(config, reason, prov, status=status, wall_s=wall_s, log=log_ref)

    if timed_out:
        return fail(f"timeout: the cell ran longer than its time limit of {limit:g} s and was killed", "timeout")
    if not isinstance(payload, dict):
        if returncode is not None and returncode < 0:
            return fail(f"cell process crashed with {_signal_name(returncode)} (see {log_name})")
        return fail(f"cell process exited with code {returncode} without a result (see {log_name})")
    if not payload.get("ok"):
        # the runtime's own deadline (RunTimeout) is a timeout too, not a failure
        return fail(str(payload.get("error") or "unknown error"), "timeout" if payload.get("timeout") else "failed")
    try:
        result = RunResult.from_dict(payload["result"])
        check_result(result)
    except ResultError as e:
        return fail(f"invalid result: {e}")
    except Exception as e:  # noqa: BLE001 - garbage from the runtime: malformed fields
        return fail(f"invalid result: {one_line(e)}")
    try:
        wall = float(payload.get("wall_s", wall_s or 0.0))
        return build_record(config, result, prov, wall_s=wall, log=log_ref)
    except Exception as e:  # noqa: BLE001 - e.g. a value the schema rejects
        return fail(f"invalid result: {one_line(e)}")


# --------------------------------------------------------------------------- the child
def _watch_parent(parent: int) -> None:
    """Kill our process group when the runner that started us goes away (checked every second;
    ``parent`` is passed on the command line so a runner killed while we were still importing
    is noticed too)."""

    def loop() -> None:
        while True:
            if os.getppid() != parent:
                os.killpg(os.getpgrp(), signal.SIGKILL)
            time.sleep(1.0)

    threading.Thread(target=loop, name="mpcbench-parent-watch", daemon=True).start()


def _write(out: Path, payload: dict[str, Any]) -> None:
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, allow_nan=True, default=str))
    os.replace(tmp, out)


def _import(module: str) -> Any:
    """A module by name, or from a ``.py`` file path (test runtimes)."""
    import importlib
    import importlib.util

    if not module.endswith(".py"):
        return importlib.import_module(module)
    spec = importlib.util.spec_from_file_location(Path(module).stem, module)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {module}")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _log_progress_to_stdout() -> None:
    """The trainer's progress lines (logger ``mpcbench.train``) go to stdout, the cell's log, as they happen."""
    import logging

    handler = logging.StreamHandler(sys.stdout)  # flushes after every line
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", datefmt="%H:%M:%S"))
    logger = logging.getLogger("mpcbench.train")
    logger.handlers[:] = [handler]
    logger.setLevel(logging.INFO)
    logger.propagate = False


def _pin_threads() -> None:
    """A cell run beside others uses the threads its executor gave it (a forked child inherits the
    fork server's torch, already imported: OMP_NUM_THREADS alone would come too late)."""
    threads = settings.cell_resources().get("cpu_threads")
    if threads:
        import torch

        torch.set_num_threads(max(1, int(threads)))


def execute(config_file: str | Path, out_file: str | Path, runtime: str = DEFAULT_RUNTIME) -> int:
    """The child's work: validate, run, write ``{"ok", "result" | "error", "wall_s", "provenance"}``.

    Any exception (SystemExit from a plugin included) becomes a one-line error in the output
    file and a full traceback on stderr (the cell's log). Returns the exit code.
    """
    out = Path(out_file)
    prov: dict[str, Any] | None = None
    _log_progress_to_stdout()
    try:
        from .provenance import provenance

        config = CellConfig.from_dict(json.loads(Path(config_file).read_text())).validate()
        _pin_threads()
        prov = provenance(config)
        module, _, fn = runtime.rpartition(":") if runtime.count(":") else (runtime, "", "run")
        run = getattr(_import(module), fn or "run")
        t0 = time.perf_counter()
        result = run(config)
        wall = time.perf_counter() - t0
        if not isinstance(result, RunResult):
            raise TypeError(f"{runtime} returned {type(result).__name__}, not a RunResult")
        _write(out, {"ok": True, "result": result.to_dict(), "wall_s": wall, "provenance": prov})
        return 0
    except BaseException as e:  # noqa: BLE001 - SystemExit from a plugin is a failure too
        traceback.print_exc()
        sys.stderr.flush()
        from suite.pipeline.errors import RunTimeout

        _write(out, {"ok": False, "error": one_line(e), "timeout": isinstance(e, RunTimeout), "provenance": prov})
        return 1


def child_entry(argv: list[str]) -> int:
    """``python -m suite.bench.cell --config F --out F [--runtime M:F] [--parent PID]``: run the cell.

    Also what a fork-server child runs (with the same arguments)."""
    import faulthandler

    faulthandler.enable()  # a segfault prints the Python stack into the cell's log
    ap = argparse.ArgumentParser(prog="python -m suite.bench.cell", description="run one mpcbench cell (internal)")
    ap.add_argument("--config", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--runtime", default=DEFAULT_RUNTIME)
    ap.add_argument("--parent", type=int, default=None, help="pid of the runner: die with it (spawned cells)")
    args = ap.parse_args(argv[1:] if argv and argv[0] == "suite.bench.cell" else argv)
    if args.parent:
        _watch_parent(args.parent)
    from .forkserver import become_subreaper, kill_adopted

    become_subreaper()  # a plugin's double-forked daemon becomes our child: nothing it starts outlives the cell
    try:
        return execute(args.config, args.out, args.runtime)
    finally:
        kill_adopted()


if __name__ == "__main__":
    sys.exit(child_entry(sys.argv[1:]))
