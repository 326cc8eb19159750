"""A fair first-come queue for the machine's cores: one job per ticket, run in ticket order.

Long CPU jobs (training cells, calibration runs, the test suite) started by several people or
sessions at once each get a core of their own instead of all slowing down together, and the
order they start in is the order they were queued (no job starves behind later small ones).

    python benchmarks/cpuq.py [--slots N] [--both] [--name TEXT] -- COMMAND ARGS...
    python benchmarks/cpuq.py --list

A job takes one slot (``--both``: every slot, for a two-process cell or the test suite). Jobs
start in ticket order when enough slots are free; a younger job may use a slot an older, bigger
job cannot use yet (backfill), until that job has waited 2 hours. A job runs with
``OMP_NUM_THREADS``/``MKL_NUM_THREADS`` set to its slots. Tickets live in ``$CPUQ_DIR``
(default ``/tmp/cpuq``); a ticket whose process died is dropped. Slots default to the usable cores.
The job's exit status is the queue's. Stdlib only.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

QUEUE = Path(os.environ.get("CPUQ_DIR", "/tmp/cpuq"))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a killed job its parent has not reaped yet (a zombie) is gone too: its ticket would block the queue
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _tickets() -> list[tuple[str, int, int, str]]:
    """(ticket file name, pid, slots, state) of live tickets, oldest first; dead ones removed."""
    out = []
    for p in sorted(QUEUE.glob("*.t")):
        try:
            pid_s, slots_s, state, *_ = p.read_text().split("\n")
            pid, slots = int(pid_s), int(slots_s)
        except (OSError, ValueError):
            continue
        if not _alive(pid):
            p.unlink(missing_ok=True)
            continue
        out.append((p.name, pid, slots, state))
    return out


BACKFILL_S = 7200.0  # a job that needs more slots than are free holds back smaller ones after this long


def _my_turn(live: list[tuple[str, int, int, str]], me: str, slots: int) -> bool:
    """Whether ticket ``me`` may start now: tickets start in order; a younger job may start on free
    slots an older, bigger job cannot use yet (backfill), unless that job has waited BACKFILL_S."""
    free = slots - sum(s for _, _, s, st in live if st == "running")
    now_ns = time.time_ns()
    for name, _pid, need, state in live:
        if state != "waiting":
            continue
        if need <= free:
            return name == me  # the oldest waiting job that fits goes first
        if (now_ns - int(name.split("-")[0])) / 1e9 > BACKFILL_S:
            return False  # an older job that does not fit has waited long enough: keep slots for it
    return False


def _write(path: Path, pid: int, slots: int, state: str, name: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(f"{pid}\n{slots}\n{state}\n{name}\n")
    tmp.replace(path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--slots", type=int, default=len(os.sched_getaffinity(0)), help="slots in all (default: usable cores)"
    )
    ap.add_argument("--both", action="store_true", help="take every slot")
    ap.add_argument("--name", default="", help="a label shown by --list")
    ap.add_argument("--list", action="store_true", help="show the queue and exit")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    QUEUE.mkdir(parents=True, exist_ok=True)
    if a.list:
        for name, pid, slots, state in _tickets():
            label = (QUEUE / name).read_text().split("\n")[3]
            print(f"{name}  pid {pid}  slots {slots}  {state}  {label}")
        return 0
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not cmd:
        ap.error("no command: cpuq.py [options] -- COMMAND ARGS...")
    need = a.slots if a.both else 1
    me = QUEUE / f"{time.time_ns():020d}-{os.getpid()}.t"
    label = a.name or " ".join(cmd)[:120]
    _write(me, os.getpid(), need, "waiting", label)
    try:
        while True:
            if _my_turn(_tickets(), me.name, a.slots):
                break
            time.sleep(0.5)
        _write(me, os.getpid(), need, "running", label)
        env = {**os.environ, "OMP_NUM_THREADS": str(need), "MKL_NUM_THREADS": str(need)}
        return subprocess.call(cmd, env=env)
    finally:
        me.unlink(missing_ok=True)


if __name__ == "__main__":
    sys.exit(main())
