"""The sandbox a re-run runs in: what holds the submitted plugin away from the host and each
pipeline stage away from the others (docs/reliability.md, "What verified guarantees").

Layers, each probed on this machine; one that cannot be set up is named in the report
(``containment.missing``), never skipped silently:

- **environment**: an allow-list of variables, a fresh ``HOME`` and ``TMPDIR``, rlimits, its own session;
- **namespaces** (root with ``unshare``): network (loopback only), PID (nothing outlives it), mount:
  every mount read-only but the re-run's folder, which is a size-capped tmpfs, a private size-capped
  ``/dev/shm``, the verifier's home hidden, every capability dropped (it cannot remount);
- **cgroups** (v2, else v1 ``pids`` and ``memory``): caps on processes and memory;
- **loopback audit** (:mod:`.loopback`): the namespace's ``lo`` is the only way between stages; what it
  carried, read by the namespace's first process after the re-run, must match the counted wire;
- **stages** (:mod:`.stage_jail`, Landlock): every torchrun worker, before any plugin code runs,
  restricts itself to reading the minimal root (the code tree, the interpreter, the data) and
  writing only its own private folder (its ``TMPDIR``); two stages share no writable path, cannot
  ``ptrace`` or signal each other or meet on an abstract socket, and System V IPC is refused.
  It needs no capability, so it works under the dropped capabilities of the mount layer and on
  any kernel with Landlock (5.13+; TCP rules 6.7+).

Whatever a re-run prints or records as an error is **never published**: the report keeps a fixed
category and exception class (:func:`sanitise`); the full text goes to a private log (0600).
"""

from __future__ import annotations

import contextlib
import os
import re
import resource
import shutil
import signal
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .errors import VerifyError

__all__ = [
    "Containment",
    "containment",
    "contained_run",
    "ContainedRun",
    "Loopback",
    "sanitise",
    "Cgroup",
    "JAIL_DIR",
    "MEM_LIMIT",
    "PIDS_LIMIT",
    "TMPFS_BYTES",
]

ENV_ALLOW = ("PATH", "LANG", "LC_ALL", "TZ")  # the only variables a re-run inherits
# memory of one re-run: RLIMIT_DATA (heap and private mappings), not RLIMIT_AS, because the sparse
# per-sample memories are shared file mappings of tens of GB that hold a few MB (RLIMIT_AS = 20 GiB
# failed shakespeare's AQ-SGD / EF re-runs with ENOMEM); the cgroup caps what is really resident
MEM_LIMIT = 20 * 2**30
CGROUP_MEMORY = 12 * 2**30  # resident memory of a whole re-run (every stage and torchrun together)
PIDS_LIMIT = 512  # processes and threads of a whole re-run (a 4-stage torchrun cell uses ~150)
# the re-run's writable folder and its /dev/shm: tmpfs of this size (the sparse AQ-SGD / EF memories
# hold a few MB; a size cap on tmpfs counts allocated pages, not the sparse length)
TMPFS_BYTES = 4 * 2**30
FILE_LIMIT = 2**40  # RLIMIT_FSIZE: the sparse per-sample memories span tens of GB of offsets
OPEN_FILES = 4096
JAIL_DIR = Path(__file__).with_name("stage_jail")  # put first on a re-run's PYTHONPATH (sitecustomize)

# Inside the namespaces: loopback up, the verifier's home folder hidden; with VERIFY_READONLY every
# mount read-only (a bind remount keeps nosuid/nodev), the re-run's own folder (VERIFY_RW_DIRS) a
# size-capped tmpfs, a private size-capped /dev/shm, and every capability dropped so that the re-run
# (root) cannot remount, mount or unmount anything; then the re-run.
NS_SCRIPT = (
    'ip link set lo up || exit 97; d="$VERIFY_HIDE_DIR"; k="$VERIFY_KEEP_DIRS"; ro="$VERIFY_READONLY"; '
    'rw="$VERIFY_RW_DIRS"; sz="$VERIFY_TMPFS"; unset VERIFY_HIDE_DIR VERIFY_KEEP_DIRS VERIFY_READONLY VERIFY_RW_DIRS VERIFY_TMPFS; set -f; '
    'if [ -n "$d" ] && [ -d "$d" ]; then if [ -n "$k" ]; then mount -t tmpfs -o size=1m tmpfs /dev/shm || exit 98; '
    'IFS=:; i=0; for x in $k; do i=$((i+1)); mkdir "/dev/shm/$i" && mount --bind "$d/$x" "/dev/shm/$i" || exit 98; '
    "done; unset IFS; fi; "
    'mount -t tmpfs -o size=1m,mode=700 tmpfs "$d" || exit 98; '
    'if [ -n "$k" ]; then IFS=:; i=0; for x in $k; do i=$((i+1)); '
    'mkdir "$d/$x" && mount --move "/dev/shm/$i" "$d/$x" || exit 98; done; unset IFS; umount /dev/shm || exit 98; fi; '
    "fi; "
    # the loopback audit: the re-run gets no copy of the audit's descriptor; once it ends, this shell
    # (PID 1 here: the re-run cannot signal it, nor open its descriptors without capabilities) writes
    # what loopback carried, from this namespace's /proc/net/dev, to it
    'a="$VERIFY_LO_FD"; unset VERIFY_LO_FD; case "$a" in *[!0-9]*) a="";; esac; '
    'audit() { rc=$?; [ -n "$a" ] && awk \'/^ *lo:/ {sub(/^ *lo:/, ""); print "lo", $1, $2, $9, $10}\' /proc/net/dev >&"$a"; exit $rc; }; '
    'if [ -z "$ro" ]; then if [ -z "$a" ]; then exec "$@"; fi; eval "\\"\\$@\\" $a>&-"; audit; fi; '
    "for m in $(awk '{print $5}' /proc/self/mountinfo | sort -u); do "
    'mount -o remount,bind,ro "$m" || { echo "containment: cannot make $m read-only" >&2; exit 99; }; done; '
    # the re-run's folder: its staged files (config, plugin copy) move onto a size-capped tmpfs
    'IFS=:; for w in $rw; do mount -t tmpfs -o size=1g tmpfs /dev/shm && cp -a "$w/." /dev/shm/ '
    '&& mount -t tmpfs -o "size=${sz:-1g},mode=755,nosuid,nodev" tmpfs "$w" && cp -a /dev/shm/. "$w/" && umount /dev/shm '
    '|| { echo "containment: cannot make $w a writable tmpfs" >&2; exit 96; }; done; unset IFS; '
    'mount -t tmpfs -o "size=${sz:-1g},mode=1777,nosuid,nodev" tmpfs /dev/shm '
    '|| { echo "containment: no private /dev/shm" >&2; exit 95; }; '
    'if [ -z "$a" ]; then exec setpriv --bounding-set=-all --inh-caps=-all --no-new-privs -- "$@"; fi; '
    'eval "setpriv --bounding-set=-all --inh-caps=-all --no-new-privs -- \\"\\$@\\" $a>&-"; audit'
)
# bash, not sh: the audit's descriptor is any number (dash redirects only descriptors 0 to 9)
NS_PREFIX = (
    "unshare", "--net", "--pid", "--ipc", "--fork", "--kill-child", "--mount-proc", "--", "bash", "-c", NS_SCRIPT, "bash",
)  # fmt: skip
READONLY_PROBE = 'echo ok > "$1/rw/probe" && ! (echo no > "$1/outside") 2>/dev/null && [ ! -e "$1/outside" ]'


# --------------------------------------------------------------------------- errors are never published
_CATEGORY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]{0,80}$")


def sanitise(what: str, text: str | None, log: Path | None = None) -> str:
    """A published line about a failed re-run: ``what`` (our own words) plus at most the exception
    class the text starts with (``ValueError``), never the text itself (it may hold any file the
    re-run could read). The full text goes to ``log`` (a private file) when one is given."""
    text = text or ""
    if log is not None and text:
        with contextlib.suppress(OSError):
            fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "a") as f:
                f.write(f"{what}\n{text}\n\n")
    head = text.strip().split(":", 1)[0].strip() if text.strip() else ""
    kind = head.rsplit(" ", 1)[-1] if head else ""
    tail = f" ({kind})" if kind and _CATEGORY.match(kind) and kind[0].isupper() else ""
    return what + tail


# --------------------------------------------------------------------------- cgroups
@dataclass
class Cgroup:
    """A cgroup for one re-run (v2, else v1 ``pids`` + ``memory``): processes join it before exec."""

    paths: tuple[Path, ...]

    def join(self) -> None:
        for p in self.paths:
            (p / "cgroup.procs").write_text(str(os.getpid()))

    def remove(self) -> None:
        for p in self.paths:
            with contextlib.suppress(OSError):
                for pid in (p / "cgroup.procs").read_text().split():
                    with contextlib.suppress(OSError):
                        os.kill(int(pid), signal.SIGKILL)
            for _ in range(50):
                try:
                    p.rmdir()
                    break
                except OSError:
                    import time

                    time.sleep(0.1)


def _v2_root() -> Path | None:
    for root in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")):
        ctl = root / "cgroup.controllers"
        if ctl.is_file() and {"pids", "memory"} <= set(ctl.read_text().split()):
            return root
    return None


def make_cgroup() -> tuple[Cgroup | None, str]:
    """A fresh cgroup capping processes (:data:`PIDS_LIMIT`) and memory (:data:`CGROUP_MEMORY`),
    or (None, why not)."""
    name = f"mpcbench-verify-{uuid.uuid4().hex[:12]}"
    made: list[Path] = []
    try:
        v2 = _v2_root()
        if v2 is not None:
            with contextlib.suppress(OSError):  # enable the controllers for children (may already be)
                (v2 / "cgroup.subtree_control").write_text("+pids +memory")
            p = v2 / name
            p.mkdir()
            made.append(p)
            (p / "pids.max").write_text(str(PIDS_LIMIT))
            (p / "memory.max").write_text(str(CGROUP_MEMORY))
            with contextlib.suppress(OSError):
                (p / "memory.swap.max").write_text("0")
            return Cgroup((p,)), ""
        v1 = Path("/sys/fs/cgroup")
        pids, mem = v1 / "pids", v1 / "memory"
        if not ((pids / "cgroup.procs").is_file() and (mem / "cgroup.procs").is_file()):
            return None, "no cgroup v2 with pids and memory controllers, no v1 pids and memory hierarchies"
        for root, files in ((pids, {"pids.max": PIDS_LIMIT}), (mem, {"memory.limit_in_bytes": CGROUP_MEMORY})):
            p = root / name
            p.mkdir()
            made.append(p)
            for f, v in files.items():
                (p / f).write_text(str(v))
        return Cgroup(tuple(made)), ""
    except OSError as e:
        for p in made:
            with contextlib.suppress(OSError):
                p.rmdir()
        return None, f"cannot create a cgroup ({e.strerror or type(e).__name__})"


# --------------------------------------------------------------------------- the layers here
@dataclass(frozen=True)
class Containment:
    """How re-runs are contained on this machine: the command prefix, the layers, the missing ones."""

    prefix: tuple[str, ...]
    layers: tuple[str, ...]
    missing: tuple[str, ...]
    hide: str = ""  # a folder the namespace covers with an empty tmpfs
    keep: str = ""  # ':'-separated folders of ``hide`` the re-run needs, kept visible in it
    readonly: bool = False  # the file system read-only but for the re-run's own folder (a tmpfs)
    cgroups: bool = False  # each re-run gets a capped cgroup
    stage_jail: bool = False  # each stage restricts itself (Landlock): :mod:`.stage_jail`

    def to_dict(self) -> dict[str, list[str]]:
        return {"layers": list(self.layers), "missing": list(self.missing)}


def _landlock_abi() -> int:
    """The kernel's Landlock ABI version (0: none)."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        v = int(libc.syscall(444, None, 0, 1))  # landlock_create_ruleset(NULL, 0, VERSION)
    except (OSError, AttributeError):
        return 0
    return max(0, v)


def containment(hide: Path | None = None, needed: tuple[Path, ...] = ()) -> Containment:
    """The layers available here. ``hide``: the verifier's home folder (hidden unless a ``needed``
    path, e.g. the interpreter or the data, lies inside it)."""
    layers = [
        "environment: allow-list " + ", ".join(ENV_ALLOW) + " (+ the data folder and thread counts)",
        "HOME and TMPDIR: a fresh folder",
        f"rlimits: {MEM_LIMIT // 2**30} GiB data, {OPEN_FILES} open files, no core dumps, "
        "CPU time = the cell's time limit",
        "session: its own process group, killed when the re-run ends",
    ]
    missing: list[str] = []
    abi = _landlock_abi()
    if abi >= 1:
        layers.append(
            f"stages (Landlock ABI {abi}): each torchrun worker reads only the code tree, the interpreter and the "
            "data and writes only its own folder; no ptrace between stages"
            + ("; no signals or abstract sockets between stages" if abi >= 6 else "")
            + "; System V IPC refused (seccomp)"
        )
        if abi < 6:
            missing.append(f"stages: abstract unix sockets and signals between stages (Landlock ABI {abi} < 6)")
    else:
        missing.append("stages: no Landlock in this kernel: stages of a re-run share the re-run's files")
    cg, why_cg = make_cgroup()
    if cg is not None:
        cg.remove()
        layers.append(f"cgroup: at most {PIDS_LIMIT} processes and {CGROUP_MEMORY // 2**30} GiB resident memory")
    else:
        missing.append(f"cgroup caps on processes and memory: {why_cg}")
    why = ""
    if os.geteuid() != 0:
        why = "not root"
    elif not shutil.which("unshare") or not shutil.which("ip") or not shutil.which("bash"):
        why = "no unshare, ip or bash command"
    else:
        probe = subprocess.run(
            [*NS_PREFIX, "true"],
            capture_output=True,
            text=True,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
            check=False,
        )
        if probe.returncode != 0:
            why = f"unshare failed (exit {probe.returncode})"
    common = dict(cgroups=cg is not None, stage_jail=abi >= 1)
    if why:
        missing += [
            f"network namespace: {why}",
            f"PID and IPC namespaces: {why}",
            f"hidden home folder: {why}",
            f"read-only file system and size-capped tmpfs: {why}",
            f"loopback audit (a side channel between stages over loopback): {why}",
        ]
        return Containment((), tuple(layers), tuple(missing), **common)
    layers += [
        "network: its own namespace with only loopback",
        "PID and IPC namespaces: everything it starts is killed when it ends; no System V IPC with the host",
        "loopback audit: what the namespace's lo carried against the wire bytes the re-run counted "
        "(collectives at their replicas' multiple; the replay of each process is the first line)",
    ]
    readonly, why_not = _readonly_works()
    if readonly:
        layers.append(
            "file system: read-only but the re-run's own folder, a tmpfs of "
            f"{TMPFS_BYTES // 2**30} GiB, and a private /dev/shm of the same size; no capabilities (it cannot remount)"
        )
    else:
        missing.append(f"read-only file system: {why_not}")
    home, keep = "", ""
    if hide is not None and hide.is_dir():
        h = hide.resolve()
        inside = [n.resolve() for n in needed if h in (n.resolve(), *n.resolve().parents)]
        kept = sorted({n.relative_to(h).parts[0] for n in inside if n != h})
        bad = [n for n in inside if n == h or not (h / n.relative_to(h).parts[0]).is_dir()]
        bad += [h / k for k in kept if ":" in k or "\n" in k]
        why_not = ""
        if bad:
            why_not = f"{hide} holds {bad[0]}, which the re-run needs"
        elif not _hiding_works(h, kept):
            why_not = f"the probe failed to cover {hide} but {', '.join(kept)}"
        if why_not:
            missing.append(f"hidden home folder: {why_not}")
        else:
            home, keep = str(h), ":".join(kept)
            but = f"; only {', '.join(kept)} left visible in it, which the re-run needs" if kept else ""
            layers.append(f"{hide}: hidden (an empty tmpfs over it{but})")
    return Containment(NS_PREFIX, tuple(layers), tuple(missing), home, keep, readonly, **common)


def _hiding_works(home: Path, kept: list[str]) -> bool:
    """Whether covering ``home`` with an empty tmpfs but ``kept`` works here (a probe lists it inside)."""
    probe = subprocess.run(
        [*NS_PREFIX, "sh", "-c", 'ls -A "$1"', "sh", str(home)],
        capture_output=True,
        text=True,
        env={
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "VERIFY_HIDE_DIR": str(home),
            "VERIFY_KEEP_DIRS": ":".join(kept),
        },
        check=False,
    )
    return probe.returncode == 0 and sorted(probe.stdout.split()) == kept


def _readonly_works() -> tuple[bool, str]:
    """Whether the read-only layer sets up here, tried on a probe: (works, why not)."""
    if not shutil.which("setpriv") or not shutil.which("awk"):
        return False, "no setpriv or awk command"
    with tempfile.TemporaryDirectory(prefix="mpcbench-verify-probe-") as tmp:
        (Path(tmp) / "rw").mkdir()
        probe = subprocess.run(
            [*NS_PREFIX, "sh", "-c", READONLY_PROBE, "sh", tmp],
            capture_output=True,
            text=True,
            env={
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "VERIFY_READONLY": "1",
                "VERIFY_RW_DIRS": str(Path(tmp, "rw").resolve()),
                "VERIFY_TMPFS": "1m",
            },
            check=False,
        )
        if probe.returncode == 0:
            return True, ""
        return False, f"the probe failed (exit {probe.returncode})"


def _limits(cpu_s: float, cgroup: Cgroup | None) -> Callable[[], None]:
    def apply() -> None:
        os.setsid()
        if cgroup is not None:
            cgroup.join()  # before exec: everything the re-run starts is counted against the caps
        with contextlib.suppress(OSError, AttributeError):  # die with the verifier (unshare ignores SIGTERM)
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
        for what, value in (
            (resource.RLIMIT_DATA, MEM_LIMIT),
            (resource.RLIMIT_FSIZE, FILE_LIMIT),
            (resource.RLIMIT_NOFILE, OPEN_FILES),
            (resource.RLIMIT_CORE, 0),
            (resource.RLIMIT_CPU, int(cpu_s)),
        ):
            with contextlib.suppress(ValueError, OSError):
                resource.setrlimit(what, (value, value))

    return apply


@dataclass(frozen=True)
class Loopback:
    """What the re-run's own loopback carried (its network namespace's ``/proc/net/dev``, read by the
    namespace's first process after the re-run ended): bytes include each packet's headers."""

    rx_bytes: int
    rx_packets: int
    tx_bytes: int
    tx_packets: int


class ContainedRun(subprocess.CompletedProcess):
    """A finished contained run, with what its loopback carried (None: no network namespace, or unread)."""

    loopback: Loopback | None = None


def _loopback(line: str) -> Loopback | None:
    parts = line.split()
    if len(parts) != 5 or parts[0] != "lo" or not all(p.isdigit() for p in parts[1:]):
        return None
    return Loopback(*(int(p) for p in parts[1:]))


def contained_run(
    argv: list[str],
    *,
    cwd: Path,
    env: dict[str, str],
    box: Containment,
    timeout_s: float,
    cpu_s: float,
    writable: tuple[Path, ...] = (),
) -> ContainedRun:
    """``argv`` inside ``box``; whatever it started is killed when it ends or times out. With the
    read-only layer, ``writable`` (the re-run's own folder, remounted as a size-capped tmpfs holding
    what it held) are the only places it can write. With a network namespace, the result says what
    its loopback carried (``loopback``), written by the namespace's shell on a descriptor of its own."""
    ns_env: dict[str, str] = {}
    audit_r, audit_w = -1, -1
    if box.prefix:
        audit_r, audit_w = os.pipe()
        os.set_blocking(audit_r, False)
        ns_env.update(VERIFY_LO_FD=str(audit_w))
        ns_env.update(VERIFY_HIDE_DIR=box.hide, VERIFY_KEEP_DIRS=box.keep, VERIFY_TMPFS=str(TMPFS_BYTES))
        if box.readonly:
            dirs = [str(Path(w).resolve()) for w in writable]
            if any(":" in d or "\n" in d for d in dirs):
                raise VerifyError("a re-run folder's path holds ':' or a newline")
            ns_env.update(VERIFY_READONLY="1", VERIFY_RW_DIRS=":".join(dirs))
    cgroup = make_cgroup()[0] if box.cgroups else None
    try:
        proc = subprocess.Popen(
            [*box.prefix, *argv],
            cwd=cwd,
            env={**env, **ns_env},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            pass_fds=(audit_w,) if audit_w >= 0 else (),
            preexec_fn=_limits(cpu_s, cgroup),  # noqa: PLW1509 - rlimits, cgroup and setsid must apply before exec
        )
    finally:
        if audit_w >= 0:
            os.close(audit_w)  # the namespace's shell holds the only writing end now
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # a daemon left in the group (no PID namespace)
        if cgroup is not None:
            cgroup.remove()
        audit = b""
        if audit_r >= 0:
            with contextlib.suppress(BlockingIOError, OSError):
                while chunk := os.read(audit_r, 4096):
                    audit += chunk
            os.close(audit_r)
    done = ContainedRun(proc.args, proc.returncode, out, err)
    done.loopback = _loopback(audit.decode(errors="replace").strip().splitlines()[-1]) if audit.strip() else None
    return done
