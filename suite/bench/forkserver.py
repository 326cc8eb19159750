"""A fork server for cells: one preloaded process that forks a fresh child per cell.

Starting a cell from a bare interpreter costs seconds before any training: importing torch,
``torch._dynamo`` (pulled in by the first optimizer), torchvision and transformers. On the
small tiers that is most of a cell's time. The fork server (``python -m suite.bench.forkserver``)
imports them once; every cell is then a ``fork()`` of it, so a child starts in milliseconds
with the libraries already loaded and nothing else: no plugin, task data, model or CUDA
context is ever created in the server (so forking is safe), each child imports its own
plugins and builds its own task.

Each child is as isolated as a spawned process: its own address space, its own session
(``setsid``: the runner kills its whole process group on a timeout), stdout/stderr to the
cell's log, stdin from ``/dev/null``, the environment and working directory of the runner at
the moment of the request. The server reaps children and reports their exit status; it exits
(killing its children's groups) when the runner closes the pipe or dies.

Protocol, one JSON object per line. Runner -> server: ``{"argv": [...], "log": path, "env":
{...}, "cwd": path, "runner": pid, "preload": [module, ...]}``. Server -> runner: ``{"ready": pid}`` once, then
``{"started": pid}`` per request (or ``{"error": reason}``) and ``{"exited": pid, "status":
code}`` (negative: killed by that signal) when a child ends.

``suite.bench.cell`` uses it on Linux; ``MPCBENCH_ISOLATION=spawn`` (or a platform without
``fork``) runs every cell in a freshly spawned interpreter instead.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import queue
import select
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Callable

from suite.pipeline.netns import _owner_alive as _alive

__all__ = [
    "ForkServer",
    "Child",
    "PRELOAD",
    "get_server",
    "prestart",
    "shutdown",
    "fork_unsafe_reason",
    "cell_environment",
    "REPO_ROOT",
]

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# imported once by the server; a module that fails to import is skipped (its cells will say why).
# A request can name more (the cell's task module, e.g. tasks.sst2 -> transformers): imported
# before that fork and kept for the next children.
PRELOAD = (
    "torch",
    "torch._dynamo",
    "torch.distributed",
    "compressors.builtins",
    "suite.pipeline.runtime",
    "suite.bench.cell",
)
READY_TIMEOUT_S = 600.0


class ForkServerError(RuntimeError):
    """The fork server could not start or died; the caller falls back to spawning."""


class Child:
    """A cell process forked by the server."""

    def __init__(self, server: ForkServer, pid: int) -> None:
        self.server = server
        self.pid = pid

    def wait(self, timeout: float | None) -> int | None:
        """Exit code (negative: signal), or None if still running after ``timeout`` seconds.

        If the server dies while the child runs, the child is killed with it: reported as
        SIGKILL."""
        return self.server._wait(self.pid, timeout)


class ForkServer:
    """Runner-side handle of one fork server process (thread-safe)."""

    def __init__(self, env: dict[str, str], preload: tuple[str, ...] = ()) -> None:
        self.env = dict(env)
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "suite.bench.forkserver", str(os.getpid()), *preload],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=self.env,
            start_new_session=True,  # Ctrl-C in the terminal reaches the runner, not the server
            text=True,
            bufsize=1,
        )
        self._started: queue.Queue[dict[str, Any]] = queue.Queue()
        self._exits: dict[int, int] = {}
        self._cond = threading.Condition()
        self._send_lock = threading.Lock()
        self._dead = False
        self._ready: queue.Queue[dict[str, Any]] = queue.Queue()
        threading.Thread(target=self._read, name="mpcbench-forkserver-reader", daemon=True).start()
        try:
            self._ready.get(timeout=READY_TIMEOUT_S)
        except queue.Empty:
            self.close()
            raise ForkServerError("the fork server did not start") from None
        if self._dead:
            raise ForkServerError("the fork server exited while starting")

    # -- runner side ---------------------------------------------------------------------
    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if "ready" in msg:
                self._ready.put(msg)
            elif "exited" in msg:
                with self._cond:
                    self._exits[int(msg["exited"])] = int(msg["status"])
                    self._cond.notify_all()
            else:
                self._started.put(msg)
        with self._cond:  # EOF: the server is gone
            self._dead = True
            self._cond.notify_all()
        self._ready.put({})
        self._started.put({"error": "the fork server exited"})

    @property
    def alive(self) -> bool:
        return not self._dead and self._proc.poll() is None

    def start(self, argv: list[str], log: str, env: dict[str, str], cwd: str, preload: tuple[str, ...] = ()) -> Child:
        """Fork a child that runs ``python -m`` ``argv`` (see ``_child_main``), after the server
        imported ``preload`` (built-in modules only: never a plugin)."""
        request = {"argv": argv, "log": log, "env": env, "cwd": cwd, "runner": os.getpid(), "preload": list(preload)}
        with self._send_lock:
            if not self.alive:
                raise ForkServerError("the fork server is not running")
            try:
                assert self._proc.stdin is not None
                self._proc.stdin.write(json.dumps(request) + "\n")
                self._proc.stdin.flush()
            except (BrokenPipeError, OSError) as e:
                raise ForkServerError(f"cannot reach the fork server: {e}") from None
            reply = self._started.get()
        if "started" not in reply:
            raise ForkServerError(str(reply.get("error", "fork failed")))
        return Child(self, int(reply["started"]))

    def _wait(self, pid: int, timeout: float | None) -> int | None:
        with self._cond:
            self._cond.wait_for(lambda: pid in self._exits or self._dead, timeout)
            if pid in self._exits:
                return self._exits.pop(pid)
            if self._dead:
                return -signal.SIGKILL  # the server killed its children on the way out
            return None

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            if self._proc.stdin:
                self._proc.stdin.close()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()


_SERVER: ForkServer | None = None
_SERVER_LOCK = threading.Lock()


# set by pytest (for every test, or by pytester): not read by any library at import time
_VOLATILE_ENV = ("PYTEST_CURRENT_TEST", "PYTEST_DEBUG_TEMPROOT", "PY_COLORS")


# a pinned cell's threads and GPUs (suite.bench.resources.Slot.env): applied by the child itself
# (torch.set_num_threads; CUDA reads CUDA_VISIBLE_DEVICES at its first call, in the child), so
# cells of every slot fork from one server
_PINNING_ENV = ("MPCBENCH_CELL_RESOURCES", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "CUDA_VISIBLE_DEVICES")


def _env_key(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k not in _VOLATILE_ENV and k not in _PINNING_ENV}


def _serves(server_env: dict[str, str], env: dict[str, str]) -> bool:
    """Whether a server started with ``server_env`` can fork a cell that wants ``env``: the same
    variables, except that a pinned cell sets its own threads and GPUs, while an unpinned one
    inherits the thread count the server's torch read at import (OMP_NUM_THREADS, MKL_NUM_THREADS)."""
    if _env_key(server_env) != _env_key(env):
        return False
    if "MPCBENCH_CELL_RESOURCES" in env:
        return True
    return all(server_env.get(k) == env.get(k) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"))


def cell_environment() -> dict[str, str]:
    """The environment a cell process gets: the runner's, unbuffered, with this checkout
    first on ``PYTHONPATH`` (the child runs this checkout's code, whatever is installed)."""
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = os.pathsep.join([REPO_ROOT, *filter(None, [os.environ.get("PYTHONPATH")])])
    return env


def get_server(env: dict[str, str], preload: tuple[str, ...] = ()) -> ForkServer:
    """The runner's fork server for this environment (restarted if the environment changed,
    since libraries read some variables, e.g. OMP_NUM_THREADS or HF_HUB_OFFLINE, at import).
    ``preload``: modules a new server imports before it reports ready (built-ins only)."""
    global _SERVER
    with _SERVER_LOCK:
        if _SERVER is not None and (not _SERVER.alive or not _serves(_SERVER.env, env)):
            _SERVER.close()
            _SERVER = None
        if _SERVER is None:
            _SERVER = ForkServer(env, preload)
        return _SERVER


def prestart(tasks: tuple[str, ...] = (), pinned: dict[str, str] | None = None) -> threading.Thread | None:
    """Start the fork server now, in the background, for the cells' environment.

    Called by ``mpcbench run`` before it imports torch to plan the matrix: the server's torch
    import (the bulk of a cell's start-up) then runs beside the planning instead of after it,
    and the first cell forks from a ready server. ``tasks``: built-in task names whose modules
    the server imports as well (``tasks.<name>``). ``pinned``: a slot's environment
    (``suite.bench.resources.Slot.env``) when cells run pinned (``-j``). Returns the starting thread, or None where
    cells are spawned (``MPCBENCH_ISOLATION=spawn``, no ``fork``). A server that fails to start
    is left to the first cell, which falls back to spawning and says so in its log.
    """
    from suite import settings

    if settings.isolation() == "spawn" or not hasattr(os, "fork") or sys.platform != "linux":
        return None
    here = os.path.join(REPO_ROOT, "tasks")
    preload = tuple(f"tasks.{t}" for t in tasks if t.isidentifier() and os.path.exists(os.path.join(here, f"{t}.py")))
    env = {**cell_environment(), **(pinned or {})}

    def start() -> None:
        with contextlib.suppress(ForkServerError):
            get_server(env, preload)

    thread = threading.Thread(target=start, name="mpcbench-forkserver-prestart", daemon=True)
    thread.start()
    return thread


def shutdown() -> None:
    global _SERVER
    with _SERVER_LOCK:
        if _SERVER is not None:
            _SERVER.close()
            _SERVER = None


# --------------------------------------------------------------------------- server side
def _send(msg: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def become_subreaper() -> bool:
    """Make orphaned descendants (a plugin's double-forked daemon) our children instead of init's,
    so that :func:`kill_adopted` can end them (Linux ``PR_SET_CHILD_SUBREAPER``; False elsewhere)."""
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _children_of(pid: int) -> list[int]:
    out = []
    for d in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat", "rb") as f:
                    stat = f.read()
                if int(stat[stat.rindex(b")") + 2 :].split()[1]) == pid:
                    out.append(int(d))
            except (OSError, ValueError, IndexError):
                continue
    return out


def kill_adopted(keep: frozenset[int] | set[int] = frozenset()) -> int:
    """SIGKILL and reap our children other than ``keep`` (as a subreaper: whatever a cell started
    and left behind), again while more arrive; the number killed."""
    n = 0
    for _ in range(50):
        pids = [p for p in _children_of(os.getpid()) if p not in keep]
        if not pids:
            break
        for p in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(p, signal.SIGKILL)
        n += len(pids)
        time.sleep(0.02)
        for p in pids:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(p, os.WNOHANG)
    return n


def _kill_children(children: set[int]) -> None:
    for pid in children:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)


def _watch_runner(runner: int) -> None:
    """In a child: kill our own process group when the runner is gone (checked every second)."""

    def loop() -> None:
        while True:
            time.sleep(1.0)
            if not _alive(runner):
                os.killpg(os.getpgrp(), signal.SIGKILL)

    threading.Thread(target=loop, name="mpcbench-runner-watch", daemon=True).start()


def _child_main(req: dict[str, Any], entry: Callable[[list[str]], int]) -> None:
    """In the forked child: become an isolated process, then run ``entry(argv)``. Never returns."""
    code = 1
    try:
        os.setsid()
        fd = os.open(req["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.environ.clear()
        os.environ.update(req["env"])
        for p in reversed([p for p in req["env"].get("PYTHONPATH", "").split(os.pathsep) if p]):
            if p not in sys.path:
                sys.path.insert(0, p)
        os.chdir(req["cwd"])
        _watch_runner(int(req["runner"]))
        code = entry(list(req["argv"]))
    except BaseException:  # noqa: BLE001 - anything here ends this child only
        import traceback

        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code if isinstance(code, int) else 1)


def fork_unsafe_reason() -> str | None:
    """Why forking this process now would hand children a broken state, or None.

    A CUDA context does not survive ``fork()``: a child of a process that initialized CUDA
    fails at its first CUDA call. Nothing the server imports should initialize it, but a
    task module or plugin preloaded on request could; the runner then spawns instead."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return "CUDA was initialized in the fork server (by a preloaded module); a forked cell could not use the GPU"
    return None


def _preload(name: str) -> None:
    """Import ``name`` and the modules its ``PRELOAD`` names (a task module's heavy model code,
    which the module itself imports lazily: tasks.sst2); a module that fails is skipped."""
    with contextlib.suppress(Exception):
        module = importlib.import_module(name)
        for dep in getattr(module, "PRELOAD", ()):
            with contextlib.suppress(Exception):
                importlib.import_module(dep)


def serve(runner: int, extra: tuple[str, ...] = ()) -> None:
    """The server loop: preload (``PRELOAD``, then ``extra``), then fork one child per request
    until the runner goes away."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # torch.cuda.is_available() through NVML: it does not initialize the CUDA driver in the server
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    for name in (*PRELOAD, *extra):
        _preload(name)
    from suite.bench.cell import child_entry  # the same code path a spawned cell runs

    become_subreaper()  # a cell killed on timeout leaves its daemons to us, not to init
    _send({"ready": os.getpid()})
    children: set[int] = set()
    swept = time.monotonic()
    stdin = sys.stdin
    try:
        while True:
            ready, _, _ = select.select([stdin], [], [], 0.2)
            while children:  # reap finished children
                try:
                    pid, status = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    break
                if pid == 0:
                    break
                if pid in children:
                    children.discard(pid)
                    _send({"exited": pid, "status": os.waitstatus_to_exitcode(status)})
                    kill_adopted(keep=children)  # what that cell left behind
            if time.monotonic() - swept > 5.0:
                swept = time.monotonic()
                kill_adopted(keep=children)
            if not _alive(runner):
                break
            if not ready:
                continue
            line = stdin.readline()
            if not line:  # the runner closed the pipe (or died)
                break
            try:
                req = json.loads(line)
                for name in req.get("preload", ()):
                    if name not in sys.modules:
                        _preload(name)
                unsafe = fork_unsafe_reason()
                if unsafe:
                    _send({"error": unsafe})
                    continue
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
            except Exception as e:
                _send({"error": f"{type(e).__name__}: {e}"})
                continue
            if pid == 0:
                _child_main(req, child_entry)
            children.add(pid)
            _send({"started": pid})
    finally:
        _kill_children(children)


if __name__ == "__main__":
    serve(int(sys.argv[1]), tuple(m for m in sys.argv[2:] if m.startswith("tasks.")))
