"""One re-run of a recorded cell: the recorded commit's code, the pinned plugin, inside the sandbox.

The verifier, not the re-run, says on which machine and under which load it ran (its own
``machine_info`` and ``os.getloadavg`` around the re-run); a re-run whose machine was contended
(load above one runnable process per core, or the re-run's own measurement says so) runs again,
up to ``attempts`` times, and the least loaded attempt is kept: its times are what the board shows,
flagged as measured under load if every attempt was. The record's own times are never used. Every
attempt's loopback is audited (:mod:`.loopback`), and every process of a torchrun attempt is replayed
alone from the bytes it was counted receiving (:mod:`.replay`): a process that does not reproduce its
outputs fails the row ("not reproducible from its bytes").
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from suite.settings import usable_cpus

from .errors import VerifyError
from .loopback import audit
from .replay import RUNNER_WIRE, check_wire, needs_replay, replay_all, wire_lines
from .sandbox import ENV_ALLOW, JAIL_DIR, Containment, Loopback, contained_run, sanitise

__all__ = [
    "Rerun",
    "SideChannel",
    "NoRecord",
    "run_cell_contained",
    "config_for_rerun",
    "rerun_environment",
    "submitted_compressors",
    "RUNNER",
]

RECORD_TAG = "mpcbench-verify-record: "
# Runs one cell in a code tree of any version (before and after the suite/ split); prints its record.
# The layout is read from the tree's files, not by trying imports: an editable install of another
# checkout would answer an import the tree cannot (its finder maps missing subpackages elsewhere).
RUNNER = (
    f"""
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
        sys.exit("the re-run would import a module outside the recorded code's tree")
cfg = CellConfig.from_dict(json.load(open(sys.argv[1])))
rec = run_cell(cfg, log_dir=sys.argv[2])
print({RECORD_TAG!r} + json.dumps(rec), flush=True)
"""
    + RUNNER_WIRE
)
CONTENDED_PER_CORE = 1.0  # 1-minute load per core above which a re-run's times are taken under load


@dataclass
class Rerun:
    """A re-run's record and what the verifier itself saw around it."""

    record: dict[str, Any]
    machine: dict[str, Any]  # the verifier's machine_info()
    load: list[float]  # the verifier's 1-minute load before and after, per core
    attempts: int = 1
    contended: bool = False
    notes: list[str] = field(default_factory=list)
    loopback: dict[str, Any] = field(default_factory=dict)  # the loopback audit (:mod:`.loopback`)


class SideChannel(VerifyError):
    """The re-run's loopback carried more than its counted wire and gloo's overhead (:mod:`.loopback`)."""


class NoRecord(VerifyError):
    """The re-run ended without an ``ok`` record of its cell: nothing to compare (and no count to audit)."""


def _pinned_plugin(entry_dir: Path) -> tuple[str, str]:
    """(file name, hash) of the entry's hash-pinned ``.py`` plugin, or ("", "")."""
    from leaderboard.submissions import read_entry_info

    try:
        info = read_entry_info(entry_dir)
    except ValueError as e:
        raise VerifyError(f"{entry_dir.name}: entry.yaml: {e}") from None
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
        except Exception:  # noqa: BLE001 - the record is untrusted
            raise VerifyError(f"{record.get('cell_id')}: a spec cannot be read") from None
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


def config_for_rerun(record: dict[str, Any], entry_dir: Path, time_limit_s: float, work: Path) -> dict[str, Any]:
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
                f"{record['cell_id']}: a plugin the record names is not the .py file entry.yaml pins "
                f"({pinned or 'none'}); only the hash-pinned plugin runs"
            )
        local = entry_dir / pinned
        if plugin_file_hash(local) != pinned_hash:  # recomputed here, whatever the record says
            raise VerifyError(f"{record['cell_id']}: {pinned} does not match entry.yaml's plugin_hash")
        copy = work / "plugin" / name
        copy.parent.mkdir(exist_ok=True)
        shutil.copyfile(local, copy)
        plugins.append(str(copy))
    cfg["plugins"] = plugins
    return cfg


def rerun_environment(
    tree: Path, commit: str, threads: int, home: Path, jail: dict[str, Any] | None = None
) -> dict[str, str]:
    """The whole environment of a re-run: the allow-list, a fresh home, the data folder, threads and,
    where the stage layer works, the stage jail's settings (:data:`.sandbox.JAIL_DIR` first on the path)."""
    from tasks.api import default_data_dir

    env = {k: v for k, v in os.environ.items() if k in ENV_ALLOW}
    env.setdefault("PATH", "/usr/bin:/bin")
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env["PATH"]])
    env.update(
        HOME=str(home),
        TMPDIR=str(home),
        PYTHONPATH=str(tree) if jail is None else os.pathsep.join([str(JAIL_DIR), str(tree)]),
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
    if jail is not None:
        env["VERIFY_STAGE_JAIL"] = json.dumps(jail)
    env["MPCBENCH_WIRE_RECORD"] = "1"  # each process records its wire, for the replay (:mod:`.replay`)
    return env


def _jail_reads(tree: Path) -> list[str]:
    """What a re-run may read: the code tree, the interpreter and its packages, the data."""
    from tasks.api import default_data_dir

    paths = {str(tree), str(JAIL_DIR), sys.prefix, sys.base_prefix, str(Path(sys.executable).resolve().parent)}
    paths |= {p for p in sys.path if p and os.path.isdir(p) and ("site-packages" in p or "dist-packages" in p)}
    paths.add(str(Path(os.__file__).parent))  # the standard library
    paths.add(str(default_data_dir()))
    return sorted(p for p in paths if p)


def _status_word(record: dict[str, Any]) -> str:
    s = record.get("status")
    return s if s in ("failed", "timeout") else "without a status"


def _load_per_core() -> float:
    return round(os.getloadavg()[0] / max(1, usable_cpus()), 2)


def _once(record: dict[str, Any], tree: Path, commit: str, entry_dir: Path, time_limit_s: float, threads: int,
          box: Containment, log: Path | None) -> tuple[dict[str, Any], Loopback | None, dict[int, bytes]]:  # fmt: skip
    """(the re-run's record, what its loopback carried, each process's recorded wire by rank)."""
    with tempfile.TemporaryDirectory(prefix="mpcbench-verify-cell-") as tmp:
        work = Path(tmp)
        os.chmod(work, 0o755)
        home = work / "home"
        home.mkdir()
        cfg_path = work / "config.json"
        cfg_path.write_text(json.dumps(config_for_rerun(record, entry_dir, time_limit_s, work)))
        # every process reads the code, the interpreter, the data and the staged plugin copy; writes the folder
        jail = {"read": [*_jail_reads(tree), str(work / "plugin")], "work": str(work)} if box.stage_jail else None
        proc = contained_run(
            [sys.executable, "-c", RUNNER, str(cfg_path), str(work / "logs")],
            cwd=tree,
            env=rerun_environment(tree, commit, threads, home, jail),
            box=box,
            timeout_s=time_limit_s + 600,
            cpu_s=(time_limit_s + 600) * max(1, threads) * 2,
            writable=(work,),
        )
        for line in proc.stdout.splitlines():
            if line.startswith(RECORD_TAG):
                return json.loads(line[len(RECORD_TAG) :]), getattr(proc, "loopback", None), wire_lines(proc.stdout)
        raise NoRecord(
            sanitise(f"the re-run produced no record (exit {proc.returncode})", proc.stderr or proc.stdout, log)
        )


def _replay(record: dict[str, Any], new: dict[str, Any], lo: Loopback | None, wire: dict[int, bytes], tree: Path,
            commit: str, entry_dir: Path, time_limit_s: float, threads: int, box: Containment,
            log: Path | None) -> dict[str, Any]:  # fmt: skip
    """Every process of the re-run replayed alone from its recorded input (:mod:`.replay`): what the report
    keeps; NotReproducible when one did not reproduce its outputs; VerifyError when a row with a submitted
    compressor cannot be replayed."""
    why_not = needs_replay(new)
    if not why_not and not (tree / "suite" / "pipeline" / "wire_log.py").is_file():
        why_not = "the recorded commit's code predates the wire replay"
    if why_not:
        if submitted_compressors(record) and not why_not.startswith("one process"):
            raise VerifyError(f"a submitted compressor's re-run is not replayed ({why_not}): cannot verify")
        return {"replayed": False, "why": why_not}
    inputs = check_wire(new, wire, lo)
    with tempfile.TemporaryDirectory(prefix="mpcbench-verify-replay-cfg-") as tmp:
        os.chmod(tmp, 0o755)
        cfg = config_for_rerun(record, entry_dir, time_limit_s, Path(tmp))
        return replay_all(new, wire, inputs, cfg, tree, commit, threads, box, time_limit_s, log)


def run_cell_contained(
    record: dict[str, Any],
    tree: Path,
    commit: str,
    entry_dir: Path,
    time_limit_s: float,
    threads: int,
    box: Containment,
    *,
    attempts: int = 2,
    log: Path | None = None,
) -> Rerun:
    """Re-run ``record``'s cell (module docstring): again while contended, up to ``attempts`` times."""
    from suite.bench.provenance import machine_info

    best: Rerun | None = None
    for n in range(1, max(1, attempts) + 1):
        before = _load_per_core()
        new, lo, wire = _once(record, tree, commit, entry_dir, time_limit_s, threads, box, log)
        after = _load_per_core()
        if new.get("status") != "ok":  # its count stopped early: lo's traffic is no side channel's evidence
            raise NoRecord(
                sanitise(f"the re-run produced no ok record (its cell ended {_status_word(new)})",
                         str(new.get("error") or ""), log)
            )  # fmt: skip
        side, seen = audit(new, lo)
        if side:
            raise SideChannel(side)
        seen["replay"] = _replay(record, new, lo, wire, tree, commit, entry_dir, time_limit_s, threads, box, log)
        measured = ((new.get("timing_inputs") or {}).get("measurement") or {}).get("contended")
        contended = bool(measured) or max(before, after) > CONTENDED_PER_CORE
        got = Rerun(new, machine_info(), [before, after], n, contended, loopback=seen)
        if best is None or (best.contended and (not contended or max(got.load) < max(best.load))):
            best = got
        if not contended or new.get("status") != "ok":
            break
        time.sleep(min(60.0, 5.0 * n))  # let the machine settle before the next attempt
    assert best is not None
    best.attempts = n
    return best
