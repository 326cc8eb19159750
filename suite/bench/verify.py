"""``mpcbench verify records/<entry>``: re-run a random sample of an entry's cells and compare every field.

What "verified" means (docs/leaderboard.md, "What verified guarantees"): the maintainers' check
re-ran a sample of the entry's cells, drawn from a fresh random seed, with the project's own code
in a contained process, and every field the board shows or derives from came out equal.

**Sample** (:func:`sample_records`): one cell of every distinct (task, tier, plan, run setup) of
the entry, plus :data:`FRACTION` of the remaining cells, drawn with a seed from ``secrets`` (stored
in the output; ``--seed`` reproduces a verification). A submitter cannot know which cells will be
re-run; a forged row (every seed of one setup) is always re-run; the chance that a forgery of
``F`` cells escapes is at most ``(1 - p_min) ** F`` (:func:`inclusion_probabilities`).

**Code**: only the project's code re-runs cells. A record's ``provenance.git_commit`` must be on
the base branch's first-parent history (``--base``, default ``main``: the merge order); that
commit's tree (``git archive``: a clean worktree) runs the cell. The only submitter code that runs
is the ``.py`` plugin pinned by hash in ``entry.yaml``; any other plugin, module name or link a
record names is refused with one line.

**Containment** (:func:`containment`): the re-run gets an allow-listed environment, its own
temporary ``HOME``, resource limits, its own session; as root with ``unshare`` also a network
namespace with only loopback, a PID namespace (nothing it starts outlives it), the verifier's
home folder hidden, and (a mount namespace) the whole file system read-only but its own folder
and a private ``/dev/shm``, with every capability dropped so that it cannot remount. A missing
layer is named in the output (``containment.missing``), never silently skipped.

**Comparison** (:func:`compare`): labels, spec, config and run setup equal; quality with and
without compression, the curve, raw / wire bytes and messages per direction, per boundary and per
step, evaluation bytes and the reached-target step equal (**exact** mode: same machine class,
torch build and a clean recorded commit) or each within its own seed spread (**spread** mode,
across machines: :func:`field_spreads`; bytes at least 1 %); the network model's inputs other than measured times equal; modeled
times, recomputed here from each run's own timing inputs with the current model, within a factor
:data:`TIME_FACTOR` (time is not reproducible), and the record's stored modeled times equal to
its own inputs' model. The re-runs' timing goes to ``verification.reruns``; the board shows a
verified record's times from its re-run.

The output, ``records/<entry>/verification.json``, holds the sha256 of **every** file of the entry
(:func:`leaderboard.submissions.entry_file_hashes`): any added, removed or changed file makes the
entry "not verified" again. ``--check`` re-runs a committed verification with its own seed and
fails when the result differs (the CI check that keeps hand-written verification files out).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import hashlib
import json
import math
import os
import random
import resource
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

__all__ = [
    "CellCheck",
    "VerifyError",
    "compare",
    "field_spreads",
    "sample_records",
    "inclusion_probabilities",
    "verify_entry",
    "check_verification",
    "containment",
    "submitted_compressors",
    "main",
    "K_SPREAD",
    "FRACTION",
    "TIME_FACTOR",
    "SCHEMA",
]

SCHEMA = "mpcbench.verification/2"
K_SPREAD = 3.0  # re-run within 3 standard deviations of a difference of two seeds
BYTES_RTOL = 0.01  # across machines: data-dependent payload sizes follow the values
FRACTION = 0.1  # of the cells beyond one per setup (docs/leaderboard.md: the detection table)
TIME_FACTOR = 4.0  # measured and modeled times: re-run / record within [1/4, 4] (a loaded 2-core machine)
MODEL_RTOL = 1e-6  # a record's stored modeled times vs the model of its own inputs (same model version)
# memory of one re-run: RLIMIT_DATA (heap and private mappings), not RLIMIT_AS, because the sparse
# per-sample memories below are shared file mappings of tens of GB that hold a few MB (RLIMIT_AS = 20 GiB
# failed shakespeare's AQ-SGD / EF re-runs with ENOMEM)
MEM_LIMIT = 20 * 2**30
# largest file offset a re-run may write (RLIMIT_FSIZE). Large because per-sample memories (AQ-SGD, EF)
# are sparse files indexed by sample id: shakespeare's ids are offsets into a 1M-character text, so its
# file spans tens of GB while holding a few MB (an 8 GiB limit failed those re-runs with EFBIG)
FILE_LIMIT = 2**40
OPEN_FILES = 4096
ENV_ALLOW = ("PATH", "LANG", "LC_ALL", "TZ")  # the only variables a re-run inherits
RECORD_TAG = "mpcbench-verify-record: "
# Runs one cell in a code tree of any version (before and after the suite/ split); prints its record.
# The layout is read from the tree's files, not by trying imports: an editable install of another
# checkout would answer an import the tree cannot (its finder maps missing subpackages elsewhere).
RUNNER = f"""
import json, os, sys
tree = os.getcwd()
if os.path.exists(os.path.join(tree, "suite", "bench", "cell.py")):
    from suite.bench.cell import run_cell
    from suite.pipeline.config import CellConfig
else:
    from suite.cell import run_cell
    from suite.config import CellConfig
for f in (sys.modules[run_cell.__module__].__file__, sys.modules[CellConfig.__module__].__file__):
    if not os.path.realpath(f).startswith(os.path.realpath(tree) + os.sep):
        sys.exit("the re-run would import " + f + ", outside the recorded code's tree")
cfg = CellConfig.from_dict(json.load(open(sys.argv[1])))
rec = run_cell(cfg, log_dir=sys.argv[2])
print({RECORD_TAG!r} + json.dumps(rec), flush=True)
"""
# Inside the namespaces: loopback up, the verifier's home folder hidden; with VERIFY_READONLY every
# mount read-only (a bind remount keeps nosuid/nodev), the re-run's own folders (VERIFY_RW_DIRS,
# ':'-separated) writable again, a private /dev/shm, and every capability dropped so that the re-run
# (root) cannot remount, mount or unmount anything; then the re-run.
NS_SCRIPT = (
    'ip link set lo up || exit 97; d="$VERIFY_HIDE_DIR"; k="$VERIFY_KEEP_DIRS"; ro="$VERIFY_READONLY"; '
    'rw="$VERIFY_RW_DIRS"; unset VERIFY_HIDE_DIR VERIFY_KEEP_DIRS VERIFY_READONLY VERIFY_RW_DIRS; set -f; '
    # the folders of the home that the re-run needs (the interpreter's) wait on a staging tmpfs while
    # the home is covered, then move back into the empty home
    'if [ -n "$d" ] && [ -d "$d" ]; then if [ -n "$k" ]; then mount -t tmpfs -o size=1m tmpfs /dev/shm || exit 98; '
    'IFS=:; i=0; for x in $k; do i=$((i+1)); mkdir "/dev/shm/$i" && mount --bind "$d/$x" "/dev/shm/$i" || exit 98; '
    "done; unset IFS; fi; "
    'mount -t tmpfs -o size=1m,mode=700 tmpfs "$d" || exit 98; '
    'if [ -n "$k" ]; then IFS=:; i=0; for x in $k; do i=$((i+1)); '
    'mkdir "$d/$x" && mount --move "/dev/shm/$i" "$d/$x" || exit 98; done; unset IFS; umount /dev/shm || exit 98; fi; '
    "fi; "
    'if [ -z "$ro" ]; then exec "$@"; fi; '
    "for m in $(awk '{print $5}' /proc/self/mountinfo | sort -u); do "
    'mount -o remount,bind,ro "$m" || { echo "containment: cannot make $m read-only" >&2; exit 99; }; done; '
    'IFS=:; for w in $rw; do mount --bind "$w" "$w" && mount -o remount,bind,rw "$w" '
    '|| { echo "containment: cannot make $w writable" >&2; exit 96; }; done; unset IFS; '
    f"mount -t tmpfs -o size={2**30},mode=1777,nosuid,nodev tmpfs /dev/shm "
    '|| { echo "containment: no private /dev/shm" >&2; exit 95; }; '
    'exec setpriv --bounding-set=-all --inh-caps=-all --no-new-privs -- "$@"'
)
NS_PREFIX = ("unshare", "--net", "--pid", "--fork", "--kill-child", "--mount-proc", "--", "sh", "-c", NS_SCRIPT, "sh")
READONLY_PROBE = 'echo ok > "$1/rw/probe" && ! (echo no > "$1/outside") 2>/dev/null && [ ! -e "$1/outside" ]'


class VerifyError(RuntimeError):
    """The entry or cell cannot be verified (one line)."""


@dataclass
class CellCheck:
    """One re-run cell: what was recorded, what the re-run gave, and the verdict."""

    cell_id: str
    record_id: str
    status: str  # "match" | "within spread" | "mismatch" | "cannot verify" | "rerun failed"
    detail: str
    mode: str = ""  # "exact" | "spread"
    commit: str = ""
    recorded_metric: float | None = None
    rerun_metric: float | None = None
    recorded_bytes: dict[str, int] = field(default_factory=dict)
    rerun_bytes: dict[str, int] = field(default_factory=dict)
    diffs: list[str] = field(default_factory=list)
    time_ratio: float | None = None  # re-run / record, modeled step time at 1Gbps
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status in ("match", "within spread")


# --------------------------------------------------------------------------- sampling
def _group(r: dict[str, Any]) -> str:
    """The setup a cell belongs to: task, tier, plan (specs) and run setup; seeds of one row share it."""
    return json.dumps([r.get("task"), r.get("tier"), r.get("specs"), r.get("run")], sort_keys=True)


def _latest_ok(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    latest: dict[str, dict[str, Any]] = {}
    for r in sorted(records, key=lambda r: str(r.get("created", ""))):
        if r.get("status") == "ok":
            latest[r["cell_key"]] = r
    return sorted(latest.values(), key=lambda r: (r["cell_id"], r["record_id"]))


def sample_records(records: list[dict[str, Any]], seed: int, fraction: float = FRACTION) -> list[dict[str, Any]]:
    """One ``ok`` cell (the latest record of each cell) per setup, plus ``ceil(fraction * rest)`` of
    the rest, drawn uniformly with ``random.Random(seed)``."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in _latest_ok(records):
        groups.setdefault(_group(r), []).append(r)
    rng = random.Random(seed)
    picked, rest = [], []
    for key in sorted(groups):
        rows = groups[key]
        i = rng.randrange(len(rows))
        picked.append(rows[i])
        rest += rows[:i] + rows[i + 1 :]
    picked += rng.sample(rest, math.ceil(fraction * len(rest)))
    return sorted(picked, key=lambda r: r["cell_id"])


def inclusion_probabilities(records: list[dict[str, Any]], fraction: float = FRACTION) -> dict[str, Any]:
    """What :func:`sample_records` gives a forger: per cell the probability it is re-run
    (``1/g + (1 - 1/g) * m / R`` in a setup of ``g`` cells, ``m`` of the ``R`` remaining drawn);
    inclusions are negatively associated, so ``F`` forged cells all escape with probability at most
    ``(1 - p_min) ** F``."""
    sizes: dict[str, int] = {}
    for r in _latest_ok(records):
        sizes[_group(r)] = sizes.get(_group(r), 0) + 1
    n, g = sum(sizes.values()), len(sizes)
    rest = n - g
    m = math.ceil(fraction * rest)
    frac = m / rest if rest else 0.0
    p_min = min((1 / s + (1 - 1 / s) * frac for s in sizes.values()), default=0.0)

    def detect(f: int) -> float:
        return round(1 - (1 - p_min) ** f, 4)

    return {
        "cells": n,
        "setups": g,
        "sampled": g + m,
        "fraction_of_rest": fraction,
        "p_min": round(p_min, 4),
        "detect_at_least": {
            "1 forged cell": detect(1),
            "5% forged": detect(max(1, math.ceil(0.05 * n))),
            "10% forged": detect(max(1, math.ceil(0.10 * n))),
            "a whole setup (every seed of a row)": 1.0,
        },
    }


# --------------------------------------------------------------------------- code trees
def _git(repo: Path, *args: str, timeout: float = 60) -> str | None:
    try:
        r = subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=timeout, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout.strip() if r.returncode == 0 else None


class CodeTrees:
    """Clean trees of base-branch commits (``git archive``), extracted once per commit."""

    def __init__(self, repo: Path, base: str) -> None:
        self.repo, self.base = repo, base
        self.base_commit = _git(repo, "rev-parse", "--verify", "--quiet", f"{base}^{{commit}}")
        if not self.base_commit:
            raise VerifyError(f"base branch {base!r} is not in {repo} (name it with --base, e.g. origin/main)")
        history = _git(repo, "rev-list", "--first-parent", self.base_commit, timeout=120)
        self.first_parent = set((history or "").split())
        self.trees: dict[str, Path] = {}

    def resolve(self, commit: str | None) -> str:
        """The full commit id, if it is on the base branch's first-parent history (else one line)."""
        if not commit:
            raise VerifyError("the record names no git commit: its code cannot be recovered")
        full = _git(self.repo, "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}")
        if not full:
            raise VerifyError(
                f"commit {commit[:12]} is not in this repository (git fetch it, or the code is unpublished)"
            )
        if full not in self.first_parent:
            raise VerifyError(
                f"commit {full[:12]} is not on the first-parent history of {self.base}: "
                "only code merged into the base branch re-runs cells"
            )
        return full

    def tree(self, commit: str | None) -> tuple[str, Path]:
        full = self.resolve(commit)
        if full not in self.trees:
            dest = Path(tempfile.mkdtemp(prefix=f"mpcbench-verify-{full[:12]}-"))
            archive = subprocess.run(
                ["git", "-C", str(self.repo), "archive", "--format=tar", full], capture_output=True, check=False
            )
            if archive.returncode != 0:
                shutil.rmtree(dest, ignore_errors=True)
                raise VerifyError(
                    f"git archive {full[:12]} failed: {archive.stderr.decode(errors='replace').strip()[:200]}"
                )
            subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
            os.chmod(dest, 0o755)  # mkdtemp's 0700 would hide the tree from nothing but is odd for a code tree
            self.trees[full] = dest
        return full, self.trees[full]

    def close(self) -> None:
        for t in self.trees.values():
            shutil.rmtree(t, ignore_errors=True)


@contextlib.contextmanager
def code_tree(commit: str | None, repo: Path, cache: dict[str, Path], base: str = "HEAD") -> Iterator[Path]:
    """The clean tree of ``commit`` (it must be on ``base``'s first-parent history)."""
    trees = CodeTrees(repo, base)
    trees.trees = cache
    yield trees.tree(commit)[1]


# --------------------------------------------------------------------------- containment
@dataclass(frozen=True)
class Containment:
    """How re-runs are contained on this machine: the command prefix, the layers, the missing ones."""

    prefix: tuple[str, ...]
    layers: tuple[str, ...]
    missing: tuple[str, ...]
    hide: str = ""  # a folder the namespace covers with an empty tmpfs
    keep: str = ""  # ':'-separated folders of ``hide`` the re-run needs, kept visible in it
    readonly: bool = False  # the file system read-only but for the re-run's own folders

    def to_dict(self) -> dict[str, list[str]]:
        return {"layers": list(self.layers), "missing": list(self.missing)}


def containment(hide: Path | None = None, needed: tuple[Path, ...] = ()) -> Containment:
    """The layers available here. ``hide``: the verifier's home folder (hidden unless a ``needed``
    path, e.g. the interpreter or the data, lies inside it)."""
    layers = [
        "environment: allow-list " + ", ".join(ENV_ALLOW) + " (+ the data folder and thread counts)",
        "HOME and TMPDIR: a fresh temporary folder",
        f"rlimits: {MEM_LIMIT // 2**30} GiB data, {FILE_LIMIT // 2**30} GiB files, "
        f"{OPEN_FILES} open files, no core dumps, CPU time = the cell's time limit",
        "session: its own process group, killed when the re-run ends",
    ]
    missing = []
    why = ""
    if os.geteuid() != 0:
        why = "not root"
    elif not shutil.which("unshare") or not shutil.which("ip"):
        why = "no unshare or ip command"
    else:
        probe = subprocess.run(
            [*NS_PREFIX, "true"],
            capture_output=True,
            text=True,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
            check=False,
        )
        if probe.returncode != 0:
            why = f"unshare failed: {(probe.stderr.strip().splitlines() or [f'exit {probe.returncode}'])[-1][:120]}"
    if why:
        missing += [
            f"network namespace: {why}",
            f"PID namespace: {why}",
            f"hidden home folder: {why}",
            f"read-only file system: {why}",
        ]
        return Containment((), tuple(layers), tuple(missing))
    layers += [
        "network: its own namespace with only loopback",
        "PID namespace: everything it starts is killed when it ends",
    ]
    readonly, why_not = _readonly_works()
    if readonly:
        layers.append(
            "file system: read-only but the re-run's own folder (HOME, TMPDIR, logs) and a private /dev/shm; "
            "no capabilities (it cannot remount)"
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
    return Containment(NS_PREFIX, tuple(layers), tuple(missing), home, keep, readonly)


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
            },
            check=False,
        )
        if probe.returncode == 0 and (Path(tmp) / "rw" / "probe").exists():
            return True, ""
        tail = (probe.stderr.strip().splitlines() or [f"exit {probe.returncode}"])[-1][:120]
        return False, f"the probe failed: {tail}"


def _limits(cpu_s: float) -> Callable[[], None]:
    def apply() -> None:
        os.setsid()
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


def contained_run(
    argv: list[str],
    *,
    cwd: Path,
    env: dict[str, str],
    box: Containment,
    timeout_s: float,
    cpu_s: float,
    writable: tuple[Path, ...] = (),
) -> subprocess.CompletedProcess:
    """``argv`` inside ``box``; whatever it started is killed when it ends or times out. With the
    read-only layer, ``writable`` (the re-run's own folders) are the only places it can write."""
    ns_env: dict[str, str] = {}
    if box.prefix:
        ns_env.update(VERIFY_HIDE_DIR=box.hide, VERIFY_KEEP_DIRS=box.keep)
        if box.readonly:
            dirs = [str(Path(w).resolve()) for w in writable]
            if any(":" in d or "\n" in d for d in dirs):
                raise VerifyError(f"a re-run folder's path holds ':' or a newline: {dirs}")
            ns_env.update(VERIFY_READONLY="1", VERIFY_RW_DIRS=":".join(dirs))
    proc = subprocess.Popen(
        [*box.prefix, *argv],
        cwd=cwd,
        env={**env, **ns_env},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_limits(cpu_s),  # noqa: PLW1509 - rlimits and setsid must apply before exec
    )
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
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


# --------------------------------------------------------------------------- one cell
def _pinned_plugin(entry_dir: Path) -> tuple[str, str]:
    """(file name, hash) of the entry's hash-pinned ``.py`` plugin, or ("", "")."""
    from leaderboard.submissions import read_entry_info

    try:
        info = read_entry_info(entry_dir)
    except ValueError as e:
        raise VerifyError(f"{entry_dir}: {e}") from None
    return (info.plugin, info.plugin_hash) if info.plugin.endswith(".py") else ("", "")


def submitted_compressors(record: dict[str, Any]) -> list[str]:
    """The compressor names in a record's specs that are not built-in (registered outside ``compressors.*``,
    or unknown here: a plugin's names are not registered in the verifier)."""
    from compressors.registry import compressor_names, get_class

    texts: list[str] = []

    def walk(x: Any) -> None:
        if isinstance(x, str):
            texts.append(x)
        elif isinstance(x, dict):
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(record.get("specs") or {})
    names: set[str] = set()
    for t in texts:
        try:
            names |= compressor_names(t)
        except Exception as e:  # noqa: BLE001 - the record is untrusted
            raise VerifyError(f"{record.get('cell_id')}: spec {t[:80]!r} cannot be read: {e}") from None
    out = []
    for n in sorted(names):
        try:
            builtin = get_class(n).__module__.startswith("compressors.")
        except Exception:  # noqa: BLE001 - unknown here: it came from a plugin
            builtin = False
        if not builtin:
            out.append(n)
    return out


def _refuse_single_mode_submission(record: dict[str, Any], cfg: dict[str, Any]) -> None:
    """A submitted compressor measured with both ends in one process (its receiver could reach the
    sender's objects) is refused: the record says which mode measured it (``config.mode``, ``run.mode``)."""
    mode = cfg.get("mode") or (record.get("run") or {}).get("mode") or "single"  # CellConfig's default
    if mode != "single":
        return
    submitted = submitted_compressors(record)
    if submitted:
        raise VerifyError(
            f"{record.get('cell_id')} (record {record.get('record_id')}): submitted compressor "
            f"{submitted[0]!r} was measured in single-process mode, where its receiving end can reach the "
            "sender's objects; re-run the cell with the default --mode auto (or --mode torchrun) and submit that record"
        )


def _config_for_rerun(record: dict[str, Any], entry_dir: Path, time_limit_s: float, work: Path) -> dict[str, Any]:
    """The recorded config for the re-run: no data dir (the verifier's), the verifier's time limit,
    and as plugin only a copy of the entry's hash-pinned ``.py`` file; anything else is refused."""
    from leaderboard.submissions import plugin_file_hash

    cfg = dict(record.get("config") or {})
    if not cfg:
        raise VerifyError(f"{record['cell_id']}: the record has no config to re-run")
    if cfg.get("link") or int(cfg.get("nnodes") or 1) != 1 or cfg.get("rdzv_endpoint"):
        raise VerifyError(
            f"{record['cell_id']}: cells over emulated links or several hosts are not re-run (no network in a re-run)"
        )
    _refuse_single_mode_submission(record, cfg)
    cfg.update(data_dir=None, time_limit_s=time_limit_s, node_rank=0, rdzv_endpoint=None)
    pinned, pinned_hash = _pinned_plugin(entry_dir)
    plugins = []
    for p in cfg.get("plugins") or []:
        name = Path(str(p)).name
        if not (str(p).endswith(".py") and pinned and name == Path(pinned).name):
            raise VerifyError(
                f"{record['cell_id']}: plugin {str(p)[:80]!r} is not the .py file entry.yaml pins "
                f"({pinned or 'none'}); only the hash-pinned plugin runs"
            )
        local = entry_dir / pinned
        if plugin_file_hash(local) != pinned_hash:
            raise VerifyError(f"{record['cell_id']}: {pinned} does not match entry.yaml's plugin_hash")
        copy = work / "plugin" / name
        copy.parent.mkdir(exist_ok=True)
        shutil.copyfile(local, copy)
        plugins.append(str(copy))
    cfg["plugins"] = plugins
    return cfg


def rerun_environment(tree: Path, commit: str, threads: int, home: Path) -> dict[str, str]:
    """The whole environment of a re-run: the allow-list, a fresh home, the data folder, threads."""
    from tasks.api import default_data_dir

    env = {k: v for k, v in os.environ.items() if k in ENV_ALLOW}
    env.setdefault("PATH", "/usr/bin:/bin")
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env["PATH"]])
    env.update(
        HOME=str(home),
        TMPDIR=str(home),
        PYTHONPATH=str(tree),
        PYTHONNOUSERSITE="1",
        PYTHONUNBUFFERED="1",
        PYTHONDONTWRITEBYTECODE="1",
        MPCBENCH_GIT_COMMIT=commit,
        MPCBENCH_DATA_DIR=str(default_data_dir()),
        MPCBENCH_OFFLINE="1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        OMP_NUM_THREADS=str(threads),
        MKL_NUM_THREADS=str(threads),
    )
    return env


def _rerun(
    record: dict[str, Any],
    tree: Path,
    commit: str,
    entry_dir: Path,
    time_limit_s: float,
    threads: int,
    box: Containment,
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="mpcbench-verify-cell-") as tmp:
        work = Path(tmp)
        os.chmod(work, 0o755)
        home = work / "home"
        home.mkdir()
        cfg_path = work / "config.json"
        cfg_path.write_text(json.dumps(_config_for_rerun(record, entry_dir, time_limit_s, work)))
        proc = contained_run(
            [sys.executable, "-c", RUNNER, str(cfg_path), str(work / "logs")],
            cwd=tree,
            env=rerun_environment(tree, commit, threads, home),
            box=box,
            timeout_s=time_limit_s + 600,
            cpu_s=(time_limit_s + 600) * max(1, threads) * 2,
            writable=(work,),
        )
        for line in proc.stdout.splitlines():
            if line.startswith(RECORD_TAG):
                return json.loads(line[len(RECORD_TAG) :])
        tail = " ".join((proc.stderr or proc.stdout).strip().splitlines()[-1:])[:300]
        raise VerifyError(f"the re-run produced no record (exit {proc.returncode}): {tail}")


def _bytes(record: dict[str, Any]) -> dict[str, int]:
    return {d: int(c.get("wire", 0)) for d, c in (record.get("bytes") or {}).items() if isinstance(c, dict)}


def _same_environment(old: dict[str, Any], new: dict[str, Any], commit_matches: bool) -> tuple[bool, str]:
    from leaderboard.frame import machine_label

    po, pn = old.get("provenance") or {}, new.get("provenance") or {}
    mo, mn = po.get("machine") or {}, pn.get("machine") or {}
    diffs = []
    if machine_label(po) != machine_label(pn):
        diffs.append(f"machine {machine_label(po)!r} vs {machine_label(pn)!r}")
    if (mo.get("torch_build") or mo.get("torch")) != (mn.get("torch_build") or mn.get("torch")):
        diffs.append(f"torch {mo.get('torch_build') or mo.get('torch')} vs {mn.get('torch_build') or mn.get('torch')}")
    if not commit_matches:
        diffs.append("code: the recorded tree was dirty or had no commit")
    return not diffs, "; ".join(diffs)


def _task_rows(record: dict[str, Any], entry_records: list[dict[str, Any]]) -> dict[str, dict[int, dict[str, Any]]]:
    """The entry's ``ok`` records of ``record``'s task and tier (the latest per cell), by setup and seed."""
    rows: dict[str, dict[int, dict[str, Any]]] = {}
    for r in _latest_ok(entry_records):
        if r.get("task") == record.get("task") and r.get("tier") == record.get("tier"):
            rows.setdefault(_group(r), {})[r["seed"]] = r
    return rows


def _spread(record: dict[str, Any], entry_records: list[dict[str, Any]]) -> tuple[float, str]:
    """The seed std of the final metric to compare against: the entry's own seeds of this row (>= 2);
    else the larger of the tier's measured std (the uncompressed run's) and the pooled std of the
    entry's multi-seed rows of the task (a one-seed row's own spread is unknown, and compressors that
    disturb training spread more than `none`: shakespeare's ef(topk) moved 0.061 nats between an AMD
    and an Intel machine where `none`'s spread allows 0.026)."""
    from leaderboard.statistics import MEASURED_SPREAD
    from suite.results.tier_spread import sample_std

    rows = {
        g: {seed: r["final_metric"] for seed, r in seeds.items()}
        for g, seeds in _task_rows(record, entry_records).items()
    }

    own = list(rows.get(_group(record), {}).values())
    if len(own) >= 2:
        return sample_std(own), f"std of the entry's {len(own)} seeds"
    variances = [sample_std(list(v.values())) ** 2 for v in rows.values() if len(v) >= 2]
    pooled = math.sqrt(sum(variances) / len(variances)) if variances else 0.0
    measured = MEASURED_SPREAD.get((record["task"], record["tier"]))
    if measured is None and not variances:
        raise VerifyError(
            f"no measured seed spread for {record['task']} / {record['tier']}: cannot compare across machines"
        )
    tier = measured.seed_std if measured is not None else 0.0
    if pooled > tier:
        return pooled, f"pooled std of the task's {len(variances)} multi-seed rows in the entry (a one-seed row)"
    return tier, f"measured seed std of {record['task']} / {record['tier']}"


BYTE_FIELDS = ("bytes", "bytes_per_boundary", "eval_bytes", "wire_bytes_by_step")
CURVE_FIELDS = ("metric", "metric_uncompressed", "train_loss")


def _numeric_fields(record: dict[str, Any]) -> tuple[dict[str, float], dict[str, float]]:
    """(quality fields, byte counts) of a record by the names the comparison reports them under."""
    quality: dict[str, float] = {}
    counts: dict[str, float] = {}

    def num(v: Any) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

    for k in ("final_metric", "final_metric_uncompressed"):
        if num(record.get(k)):
            quality[k] = float(record[k])
    for p in record.get("curve") or []:
        if isinstance(p, dict):
            for k in CURVE_FIELDS:
                if num(p.get(k)):
                    quality[f"curve[step {p.get('step')}].{k}"] = float(p[k])

    def walk(name: str, x: Any) -> None:
        for k, v in x.items() if isinstance(x, dict) else ():
            if isinstance(v, dict):
                walk(f"{name}.{k}", v)
            elif isinstance(v, list) and all(num(e) for e in v):
                counts[f"{name}.{k} total"] = float(sum(v))
            elif num(v):
                counts[f"{name}.{k}"] = float(v)

    for k in BYTE_FIELDS:
        walk(k, record.get(k))
    if num(record.get("compressor_state_bytes")):
        counts["compressor_state_bytes"] = float(record["compressor_state_bytes"])
    return quality, counts


def _field_stds(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Per field, the sample std over the rows' seeds (byte counts: relative to their mean)."""
    from suite.results.tier_spread import sample_std

    by_seed = {r["seed"]: _numeric_fields(r) for r in rows}
    if len(by_seed) < 2:
        return {}
    out: dict[str, float] = {}
    for part, relative in ((0, False), (1, True)):
        names = set.intersection(*(set(f[part]) for f in by_seed.values()))
        for name in names:
            xs = [f[part][name] for f in by_seed.values()]
            sd, mean = sample_std(xs), sum(xs) / len(xs)
            if relative:
                sd = sd / abs(mean) if mean else 0.0
            out[name] = sd
    return out


def field_spreads(record: dict[str, Any], entry_records: list[dict[str, Any]]) -> dict[str, float]:
    """The seed spread of every field a cross-machine comparison checks, from the entry's records of
    the same task and tier. Curves early in training and uncompressed evaluations of models trained
    on codes vary more across seeds (and so across machines) than the final metric. A row with two or
    more seeds: the larger of its own std and the task's pooled std (its rows' variances averaged,
    a steadier estimate than 2-3 seeds give); a row with one seed: the largest std of that field
    among the task's rows (its own variability is unknown). Byte counts are relative (data-dependent
    payload sizes follow the values)."""
    rows = _task_rows(record, entry_records)
    own = _field_stds(list(rows.get(_group(record), {}).values()))
    largest: dict[str, float] = {}
    variances: dict[str, list[float]] = {}
    for seeds in rows.values():
        for name, sd in _field_stds(list(seeds.values())).items():
            largest[name] = max(largest.get(name, 0.0), sd)
            variances.setdefault(name, []).append(sd * sd)
    if own:
        pooled = {name: math.sqrt(sum(v) / len(v)) for name, v in variances.items()}
        largest = {name: max(own.get(name, 0.0), pooled.get(name, 0.0)) for name in set(own) | set(pooled)}
    # the headline keeps its own rule (:func:`_spread`): the row's seeds or the tier's
    largest.pop("final_metric", None)
    return largest


# --------------------------------------------------------------------------- comparison
IDENTITY_FIELDS = (
    "cell_key",
    "task",
    "tier",
    "seed",
    "compressor",
    "specs",
    "specs_resolved",
    "metric_name",
    "higher_is_better",
    "target",
    "run",
)
TIMING_STRUCTURE = ("schedule", "microbatches", "replicas", "warmup_steps")  # not measured times
# steps grouped by equal payload sizes: data-dependent sizes (ef(topk)) regroup them across machines,
# so there only their total (the step count) must agree
TIMING_BYTES = ("counts", "steps", "target_step")  # payload sizes per step and the interpolated target step
MEASURED_TIMES = ("step_s", "total_train_s")


def _setup(record: dict[str, Any]) -> dict[str, Any]:
    """A record's config without what a re-run sets itself (paths, limits, the data folder)."""
    drop = ("plugins", "data_dir", "time_limit_s", "node_rank", "rdzv_endpoint", "comm_timeout_s", "check_consistency")
    return {k: v for k, v in (record.get("config") or {}).items() if k not in drop}


def _short(v: Any) -> str:
    s = json.dumps(v, sort_keys=True, default=str)
    return s if len(s) <= 80 else s[:77] + "..."


def _modeled_now(record: dict[str, Any]) -> dict[str, dict[str, float | None]]:
    """The current network model's times of a record's own ``timing_inputs`` at every profile."""
    from suite.results import network

    timing = record.get("timing_inputs")
    if not isinstance(timing, dict) or not timing:
        return {}
    # as the runner and the board model it: time to target at the interpolated target step of the inputs
    return network.model_run(network.TimingInputs.from_dict(timing), network.PROFILES)


class _Diffs:
    def __init__(self, exact: bool, tol: float, field_std: Mapping[str, float] | None = None) -> None:
        self.exact, self.tol, self.out = exact, tol, []
        self.field_std = field_std or {}

    def _tol(self, name: str) -> float:
        """Across machines: the field's own seed spread (K sigma of a difference), never tighter than the final metric's."""
        return max(self.tol, K_SPREAD * math.sqrt(2) * self.field_std.get(name, 0.0))

    def same(self, name: str, a: Any, b: Any) -> None:
        if a != b:
            self.out.append(f"{name}: recorded {_short(a)}, re-run {_short(b)}")

    def quality(self, name: str, a: Any, b: Any) -> None:
        if self.exact or a is None or b is None:
            return self.same(name, a, b)
        tol = self._tol(name)
        if not (isinstance(a, (int, float)) and isinstance(b, (int, float))) or abs(a - b) > tol:
            self.out.append(f"{name}: recorded {_short(a)}, re-run {_short(b)} (|diff| > {tol:.4g})")

    def count(self, name: str, a: Any, b: Any) -> None:
        if self.exact or not (isinstance(a, (int, float)) and isinstance(b, (int, float))):
            return self.same(name, a, b)
        rtol = max(BYTES_RTOL, K_SPREAD * math.sqrt(2) * self.field_std.get(name, 0.0))  # a relative spread here
        if abs(a - b) > rtol * max(abs(a), abs(b), 1):
            self.out.append(f"{name}: recorded {a}, re-run {b} (more than {rtol:.1%} apart)")

    def counts(self, name: str, a: Any, b: Any) -> None:
        a, b = a if isinstance(a, dict) else {}, b if isinstance(b, dict) else {}
        if set(a) != set(b):
            return self.same(f"{name} keys", sorted(a), sorted(b))
        for k in sorted(a):
            if isinstance(a[k], dict) and isinstance(b[k], dict):
                self.counts(f"{name}.{k}", a[k], b[k])
            elif isinstance(a[k], list) and isinstance(b[k], list) and not self.exact:
                if len(a[k]) != len(b[k]):
                    self.same(f"{name}.{k} length", len(a[k]), len(b[k]))
                else:
                    self.count(f"{name}.{k} total", sum(a[k]), sum(b[k]))
            else:
                self.count(f"{name}.{k}", a[k], b[k])

    def time(self, name: str, a: Any, b: Any, factor: float = TIME_FACTOR) -> None:
        if a is None or b is None:
            return self.same(f"{name} (reached or not)", a is None, b is None)
        if not (isinstance(a, (int, float)) and isinstance(b, (int, float))):
            return self.same(name, a, b)
        if a <= 0 or b <= 0:
            if (a <= 0) != (b <= 0):
                self.out.append(f"{name}: recorded {a:.4g}, re-run {b:.4g}")
            return
        if not 1 / factor <= b / a <= factor:
            self.out.append(f"{name}: recorded {a:.4g} s, re-run {b:.4g} s (more than {factor:.3g}x apart)")


def _overload(record: dict[str, Any]) -> float:
    """How many runnable processes shared each core when the run started (>= 1, the 1-minute load
    average per core): times are compared within :data:`TIME_FACTOR` times this of both runs."""
    prov = record.get("provenance") or {}
    try:
        load = float((prov.get("load") or {}).get("load_avg")[0])
        cpus = float((prov.get("machine") or {}).get("cpu_affinity") or (prov.get("machine") or {}).get("cpu_count"))
        return max(1.0, min(load / cpus, 64.0)) if math.isfinite(load) and cpus > 0 else 1.0
    except (TypeError, ValueError, IndexError):
        return 1.0


def field_diffs(
    old: dict[str, Any],
    new: dict[str, Any],
    *,
    exact: bool,
    tol: float = 0.0,
    field_std: Mapping[str, float] | None = None,
) -> list[str]:
    """Every difference between a record and its re-run in the fields the board shows or derives from
    (a field of a type the comparison cannot read is itself a difference, never an exception).
    ``field_std``: across machines, the seed spread of each field by its name (:func:`field_spreads`;
    byte counts relative); a field without one is held to ``tol``, byte counts to :data:`BYTES_RTOL`."""
    try:
        return _field_diffs(old, new, _Diffs(exact, tol, field_std))
    except Exception as e:  # noqa: BLE001 - the record is untrusted: an unreadable field is a mismatch
        return [f"a field cannot be compared ({type(e).__name__}: {' '.join(str(e).split())[:120]})"]


def _field_diffs(old: dict[str, Any], new: dict[str, Any], d: _Diffs) -> list[str]:
    exact = d.exact
    for k in IDENTITY_FIELDS:
        if k == "cell_key" and (old.get("config") or {}).get("plugins"):
            # the key hashes the plugin's path, and the re-run loads a checked copy of the pinned file:
            # compare the configs without where the plugin lies (its content is pinned by hash)
            d.same("config (without plugin paths)", _setup(old), _setup(new))
            continue
        d.same(k, old.get(k), new.get(k))
    for k in ("final_metric", "final_metric_uncompressed"):
        d.quality(k, old.get(k), new.get(k))
    oc = [p for p in old.get("curve") or [] if isinstance(p, dict)]
    nc = [p for p in new.get("curve") or [] if isinstance(p, dict)]
    d.same("curve steps", [p.get("step") for p in oc], [p.get("step") for p in nc])
    if len(oc) == len(nc):
        for a, b in zip(oc, nc):
            for k in ("metric", "metric_uncompressed", "train_loss"):
                d.quality(f"curve[step {a.get('step')}].{k}", a.get(k), b.get(k))
    ra, rb = old.get("reached_target_step"), new.get("reached_target_step")
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (ra, rb))
    target = old.get("target")
    one_side = False  # the target reached on one machine only, within the spread: no time to target to compare
    if not exact and (ra is None) != (rb is None) and isinstance(target, (int, float)):
        # across machines a run ending near its target may reach it on one machine only: equal when the
        # run that did not reach it ended within the final metric's spread of the target
        last = new.get("final_metric") if rb is None else old.get("final_metric")
        one_side = isinstance(last, (int, float)) and abs(last - target) <= d._tol("final_metric")
        if not one_side:
            d.same("reached_target_step", ra, rb)
    elif exact or not numbers:
        d.same("reached_target_step", ra, rb)
    else:  # across machines the crossing may move by one evaluation
        steps = [p.get("step") for p in oc if isinstance(p.get("step"), int)]
        interval = min((b - a for a, b in zip(steps, steps[1:]) if b > a), default=0)
        if abs(ra - rb) > interval:
            d.same("reached_target_step", ra, rb)
    for k in ("bytes", "bytes_per_boundary", "eval_bytes", "wire_bytes_by_step"):
        d.counts(k, old.get(k), new.get(k))
    d.count("compressor_state_bytes", old.get("compressor_state_bytes"), new.get("compressor_state_bytes"))
    to, tn = old.get("timing_inputs") or {}, new.get("timing_inputs") or {}
    for k in TIMING_STRUCTURE:
        d.same(f"timing_inputs.{k}", to.get(k), tn.get(k))
    ca, cb = to.get("counts"), tn.get("counts")
    if not exact and isinstance(ca, list) and isinstance(cb, list):
        d.same("timing_inputs.counts total (steps)", sum(ca), sum(cb))
    if exact:
        for k in TIMING_BYTES:
            d.same(f"timing_inputs.{k}", to.get(k), tn.get(k))
    ot, nt = old.get("time") or {}, new.get("time") or {}
    # time follows the machine's load (even per-thread CPU time: shared caches and cores): the factor grows with it
    wall = TIME_FACTOR * _overload(old) * _overload(new)
    for k in MEASURED_TIMES:
        d.time(f"time.{k}", ot.get(k), nt.get(k), wall)
    try:
        mo, mn = _modeled_now(old), _modeled_now(new)
    except Exception as e:  # noqa: BLE001 - the record's inputs are untrusted
        d.out.append(f"timing_inputs: the network model cannot read them ({type(e).__name__})")
        return d.out
    for prof in sorted(set(mo) | set(mn)):
        for k in ("step_s", "total_s") if one_side else ("step_s", "total_s", "time_to_target_s"):
            d.time(f"modeled {prof} {k}", (mo.get(prof) or {}).get(k), (mn.get(prof) or {}).get(k), wall)
    from suite.results.network import MODEL_VERSION

    if old.get("model_version") == MODEL_VERSION:  # older versions are re-modeled by the board anyway
        for prof, times in (old.get("modeled") or {}).items():
            for k, v in (times or {}).items():
                m = (mo.get(prof) or {}).get(k)
                if k in ("step_s", "total_s", "time_to_target_s") and (
                    (v is None) != (m is None) or (v is not None and abs(v - m) > MODEL_RTOL * max(abs(m), 1e-12))
                ):
                    d.out.append(f"modeled.{prof}.{k}: recorded {v!r}, but its own timing inputs give {m!r}")
    return d.out


def compare(
    old: dict[str, Any], new: dict[str, Any], *, exact: bool, std: float = math.nan, why: str = ""
) -> tuple[str, str]:
    """(status, one-line detail) of a re-run ``new`` against the recorded ``old`` (module docstring)."""
    status, detail, _ = compare_all(old, new, exact=exact, std=std, why=why)
    return status, detail


def compare_all(
    old: dict[str, Any],
    new: dict[str, Any],
    *,
    exact: bool,
    std: float = math.nan,
    why: str = "",
    field_std: Mapping[str, float] | None = None,
) -> tuple[str, str, list[str]]:
    """(status, one-line detail, every difference) of a re-run against its record."""
    if new.get("status") != "ok":
        return "rerun failed", f"the re-run ended {new.get('status')}: {new.get('error')}", []
    tol = 0.0 if exact else K_SPREAD * math.sqrt(2) * std
    diffs = field_diffs(old, new, exact=exact, tol=tol, field_std=field_std)
    name = old.get("metric_name", "metric")
    if diffs:
        more = f" (+{len(diffs) - 1} more)" if len(diffs) > 1 else ""
        return "mismatch", diffs[0] + more + ("" if exact else f" ({why})"), diffs[:50]
    if exact:
        return (
            "match",
            f"identical {name} {new.get('final_metric')!r}, bytes, curve and labels; times agree",
            [],
        )
    return (
        "within spread",
        f"{name} recorded {old.get('final_metric')}, re-run {new.get('final_metric')}: within {tol:.4f}; "
        f"bytes within their seed spread (at least {BYTES_RTOL:.0%}); curve within each point's; times agree ({why})",
        [],
    )


def _time_ratio(old: dict[str, Any], new: dict[str, Any]) -> float | None:
    with contextlib.suppress(Exception):
        a, b = _modeled_now(old)["1Gbps"]["step_s"], _modeled_now(new)["1Gbps"]["step_s"]
        return round(b / a, 3) if a and b else None
    return None


def check_cell(
    record: dict[str, Any],
    entry_dir: Path,
    entry_records: list[dict[str, Any]],
    trees: CodeTrees,
    time_limit_s: float,
    threads: int,
    box: Containment,
    rerun: dict[str, Any] | None = None,
) -> tuple[CellCheck, dict[str, Any] | None]:
    """Re-run one record's cell with the base branch's code at its commit and compare (never raises).
    Returns the check and the re-run record (None when it did not run). ``rerun``: a re-run of this
    record made earlier by this verifier (``--resume``), compared instead of running the cell again."""
    prov = record.get("provenance") or {}
    commit = prov.get("git_commit") or ""
    check = CellCheck(
        record["cell_id"],
        record["record_id"],
        "cannot verify",
        "",
        commit=str(commit)[:12],
        recorded_metric=record.get("final_metric"),
        recorded_bytes=_bytes(record),
    )
    new = None
    t0 = time.perf_counter()
    try:
        full, tree = trees.tree(commit)
        new = rerun if rerun is not None else _rerun(record, tree, full, entry_dir, time_limit_s, threads, box)
        check.rerun_metric, check.rerun_bytes = new.get("final_metric"), _bytes(new)
        exact, why_not = _same_environment(record, new, prov.get("git_dirty") is False)
        if exact:
            check.mode = "exact"
            check.status, check.detail, check.diffs = compare_all(record, new, exact=True)
        else:
            std, source = _spread(record, entry_records)
            check.mode = "spread"
            check.status, check.detail, check.diffs = compare_all(
                record,
                new,
                exact=False,
                std=std,
                why=f"{source}; not exact: {why_not}",
                field_std=field_spreads(record, entry_records),
            )
        check.time_ratio = _time_ratio(record, new)
    except VerifyError as e:
        check.detail = str(e)
    except subprocess.TimeoutExpired:
        check.status, check.detail = "rerun failed", f"the re-run did not finish within {time_limit_s:g} s"
    except Exception as e:  # noqa: BLE001 - one cell's surprise is that cell's verdict, not the whole run's
        check.detail = f"{type(e).__name__}: {' '.join(str(e).split())[:200]}"
    check.seconds = round(time.perf_counter() - t0, 1)
    return check, new


# --------------------------------------------------------------------------- an entry
def _status(checks: list[CellCheck]) -> str:
    if any(c.status in ("mismatch", "rerun failed") for c in checks):
        return "failed"
    if checks and all(c.ok for c in checks):
        return "verified"
    return "not verified"


def _kept_path(resume: str | Path | None, record: dict[str, Any]) -> Path | None:
    if resume is None:
        return None
    commit = str((record.get("provenance") or {}).get("git_commit") or "")
    key = hashlib.sha256(json.dumps([record.get("record_id"), commit], sort_keys=True).encode()).hexdigest()[:24]
    return Path(resume) / f"rerun-{key}.json"


def _kept_rerun(resume: str | Path | None, record: dict[str, Any]) -> dict[str, Any] | None:
    """A re-run of ``record`` kept by an earlier, interrupted verification (None if there is none)."""
    path = _kept_path(resume, record)
    if path is None or not path.is_file():
        return None
    with contextlib.suppress(ValueError, OSError):
        kept = json.loads(path.read_text())
        if isinstance(kept, dict) and kept.get("cell_key") == record.get("cell_key") and kept.get("status") == "ok":
            return kept
    return None


def _keep_rerun(resume: str | Path | None, record: dict[str, Any], new: dict[str, Any]) -> None:
    path = _kept_path(resume, record)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(new))
        tmp.replace(path)  # whole or absent: an interrupted write is never read back


def verify_entry(
    entry_dir: str | Path,
    *,
    seed: int | None = None,
    fraction: float = FRACTION,
    base: str = "main",
    time_limit_s: float = 3600.0,
    threads: int = 1,
    jobs: int = 1,
    write: bool = True,
    progress: Callable[[str], None] | None = None,
    resume: str | Path | None = None,
) -> dict[str, Any]:
    """Verify a random sample of one entry folder's cells; write and return the verification report.
    ``resume``: a folder keeping each finished re-run (by record id and commit), so that a verification
    stopped part-way and started again with the same ``seed`` re-runs only the cells it has not yet
    run; every kept re-run is compared again with the current rules."""
    from leaderboard.submissions import RERUN_FIELDS, RERUNS_FILE, VERIFICATION_FILE, entry_file_hashes, load_entry

    entry_dir = Path(entry_dir)
    records, problems = load_entry(entry_dir)
    if not records:
        raise VerifyError(f"{entry_dir}: no valid records to verify" + (f" ({problems[0]})" if problems else ""))
    seed = secrets.randbits(63) if seed is None else seed
    files_before = entry_file_hashes(entry_dir)
    repo = Path(_git(entry_dir.resolve(), "rev-parse", "--show-toplevel") or Path(__file__).resolve().parents[2])
    trees = CodeTrees(repo, base)
    home = Path(os.path.expanduser("~"))
    from tasks.api import default_data_dir

    box = containment(home, needed=(Path(sys.executable), repo, default_data_dir(), Path(tempfile.gettempdir())))
    if progress and box.missing:
        progress("containment missing here: " + "; ".join(box.missing))
    sample = sample_records(records, seed, fraction)
    results: list[tuple[CellCheck, dict[str, Any] | None]] = []
    try:
        for rec in sample:  # extract each commit's tree once, before the cells run in parallel
            with contextlib.suppress(VerifyError):
                trees.tree((rec.get("provenance") or {}).get("git_commit"))

        def one(rec: dict[str, Any]) -> tuple[CellCheck, dict[str, Any] | None]:
            kept = _kept_rerun(resume, rec)
            if progress:
                progress(f"{'comparing the kept re-run of' if kept else 're-running'} {rec['cell_id']} ...")
            c, new = check_cell(rec, entry_dir, records, trees, time_limit_s, threads, box, rerun=kept)
            if kept is None and new is not None and new.get("status") == "ok":  # a failed re-run runs again
                _keep_rerun(resume, rec, new)
            if progress:
                progress(f"  {c.status}: {c.cell_id}: {c.detail} ({c.seconds:g} s)")
            return c, new

        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            results = list(pool.map(one, sample))
    finally:
        trees.close()
    checks = [c for c, _ in results]
    reruns = [
        {"record_id": c.record_id, **{k: new[k] for k in RERUN_FIELDS if k in new}}
        for c, new in results
        if c.ok and new is not None
    ]
    reruns_text = "".join(json.dumps(r, sort_keys=True) + "\n" for r in reruns)
    if entry_file_hashes(entry_dir) != files_before:
        raise VerifyError(f"{entry_dir}: the entry's files changed while it was being verified; run it again")
    report = {
        "schema": SCHEMA,
        "entry": entry_dir.name,
        "status": _status(checks),
        "verified_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "verifier_commit": _git(repo, "rev-parse", "HEAD"),
        "base": base,
        "base_commit": trees.base_commit,
        "seed": seed,
        "sampling": inclusion_probabilities(records, fraction),
        "containment": box.to_dict(),
        "files": files_before,
        "reruns_sha256": hashlib.sha256(reruns_text.encode()).hexdigest(),
        "cells": [asdict(c) for c in checks],
    }
    if write:
        (entry_dir / RERUNS_FILE).write_text(reruns_text)
        (entry_dir / VERIFICATION_FILE).write_text(json.dumps(report, indent=1) + "\n")
    return report


def reproducible_part(report: dict[str, Any]) -> dict[str, Any]:
    """What two runs of the same verification (same seed, files and code) must agree on."""
    return {
        "schema": report.get("schema"),
        "entry": report.get("entry"),
        "status": report.get("status"),
        "seed": report.get("seed"),
        "files": report.get("files"),
        "sampling": report.get("sampling"),
        "cells": [(c.get("cell_id"), c.get("record_id"), c.get("status")) for c in report.get("cells") or []],
    }


def check_verification(entry_dir: str | Path, **kw: Any) -> list[str]:
    """Re-run the committed ``verification.json`` of an entry with its own seed; the differences
    (empty: it is what the maintainers' check gives). The CI check on the base branch."""
    from leaderboard.submissions import VERIFICATION_FILE

    path = Path(entry_dir) / VERIFICATION_FILE
    try:
        committed = json.loads(path.read_text())
        seed = committed["seed"]
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise TypeError("seed is not an integer")
    except (OSError, ValueError, KeyError, TypeError) as e:
        return [f"{path}: not a verification this command wrote ({type(e).__name__}: {e})"]
    fraction = (committed.get("sampling") or {}).get("fraction_of_rest", FRACTION)
    ours = verify_entry(entry_dir, seed=seed, fraction=fraction, write=False, **kw)
    a, b = reproducible_part(committed), reproducible_part(ours)
    return [
        f"{path}: {k} differs from a re-run of the check: committed {_short(a[k])}, ours {_short(b[k])}"
        for k in a
        if a[k] != b[k]
    ]


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("verify", help="re-run a random sample of a records/<entry> folder's cells and compare")
    p.add_argument("entry", nargs="+", help="entry folder(s), e.g. records/mpcbench-baselines")
    p.add_argument(
        "--seed", type=int, default=None, help="the sample's seed (default: a fresh random one, stored in the output)"
    )
    p.add_argument(
        "--fraction",
        type=float,
        default=FRACTION,
        help=f"share of the cells beyond one per setup that is re-run (default {FRACTION})",
    )
    p.add_argument("--base", default="main", help="base branch: record commits must be on its first-parent history")
    p.add_argument("--jobs", type=int, default=1, help="re-runs at a time (default 1)")
    p.add_argument(
        "--cell-timeout", type=float, default=3600.0, help="time limit of one re-run in seconds (default 3600)"
    )
    p.add_argument(
        "--threads", type=int, default=1, help="torch threads per re-run (default 1, as the baselines were run)"
    )
    p.add_argument("--no-write", action="store_true", help="do not write <entry>/verification.json")
    p.add_argument(
        "--resume",
        metavar="DIR",
        default=None,
        help="keep each finished re-run in DIR; run again with the same --seed to re-run only the cells not yet run",
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="re-run the committed verification.json with its seed; fail if the result differs (the CI check)",
    )
    p.set_defaults(func=cmd_verify)


def cmd_verify(args: argparse.Namespace) -> int:
    from leaderboard.safe_text import plain

    from .options import check_cell_timeout

    if not 0.0 <= args.fraction <= 1.0:
        raise VerifyError(f"--fraction must be in [0, 1], got {args.fraction}")
    if not 1 <= args.threads <= 256:
        raise VerifyError(f"--threads must be in [1, 256], got {args.threads}")
    if not 1 <= args.jobs <= 64:
        raise VerifyError(f"--jobs must be in [1, 64], got {args.jobs}")
    check_cell_timeout(args.cell_timeout, "--cell-timeout")
    kw = dict(base=args.base, time_limit_s=args.cell_timeout, threads=args.threads, jobs=args.jobs)
    say = lambda m: print(plain(m), file=sys.stderr, flush=True)  # noqa: E731
    worst = 0
    for entry in args.entry:
        if args.check:
            diffs = check_verification(entry, progress=say, **kw)
            for d in diffs:
                print(plain(d))
            print(plain(f"{entry}: verification.json {'differs from' if diffs else 'equals'} a re-run of the check"))
            worst = max(worst, 1 if diffs else 0)
            continue
        report = verify_entry(
            entry,
            seed=args.seed,
            fraction=args.fraction,
            write=not args.no_write,
            progress=say,
            resume=args.resume,
            **kw,
        )
        n_ok = sum(1 for c in report["cells"] if c["status"] in ("match", "within spread"))
        s = report["sampling"]
        print(
            plain(
                f"{entry}: {report['status']} ({n_ok} of {len(report['cells'])} re-run cells agree; "
                f"k = {s['sampled']} of {s['cells']} cells, {s['setups']} setups, seed {report['seed']}; "
                f"a single forged cell is re-run with probability >= {s['p_min']})"
            )
        )
        if report["containment"]["missing"]:
            print(plain(f"{entry}: containment missing: " + "; ".join(report["containment"]["missing"])))
        worst = max(worst, {"verified": 0, "not verified": 1, "failed": 1}[report["status"]])
    return worst


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="mpcbench")
    add_parser(ap.add_subparsers(dest="command", required=True))
    args = ap.parse_args(argv)
    try:
        return args.func(args)
    except VerifyError as e:
        print(f"mpcbench: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
