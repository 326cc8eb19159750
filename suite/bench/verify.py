"""``mpcbench verify records/<entry> [--sample N]``: re-run sampled cells of a submission and compare.

A record says what was run (``config``: task, tier, seed, specs, placement), with which code
(``provenance.git_commit``, ``plugin_hashes``) and where (``provenance.machine``). Verification
re-runs a sample of an entry's ``ok`` cells from exactly that config, with the recorded code:

- the recorded commit is checked out with ``git archive <commit>`` into a temporary folder and
  the cell runs there (``PYTHONPATH`` = that folder; the runner script copes with the package
  layouts before and after the ``suite/`` split); a commit this repository does not have, or no
  commit, makes the cell "cannot verify" with the reason, never a silent pass;
- a ``.py`` plugin runs from the entry folder, and its hash must equal the entry's ``plugin_hash``;
- one torch thread per cell (``--threads``), as the committed baselines were measured.

Comparison (:func:`compare`):

- **exact** when the re-run's machine class (:func:`leaderboard.frame.machine_label`), torch build
  and code (same commit, recorded tree not dirty) equal the record's: quality and the bytes of
  every direction must be identical (two runs at one commit on one CPU class give identical numbers);
- otherwise **within the seed spread**: quality may differ by at most ``K_SPREAD * sqrt(2) * std``
  with ``std`` the task's measured seed spread (the entry's own seeds when it has >= 2 for the cell's
  row, else :data:`leaderboard.statistics.MEASURED_SPREAD`), and bytes by at most 1 % (data-dependent
  payload sizes follow the values); a cross-machine check cannot be exact (the same cifar10 ``none``
  seed-0 cell gives 0.3477 on an Intel Xeon and 0.3223 on an AMD EPYC).

The result goes to ``records/<entry>/verification.json`` (:data:`leaderboard.submissions.VERIFICATION_FILE`):
``status`` ``verified`` (every sampled cell matched), ``failed`` (one did not) or ``not verified``
(a cell could not be run), one entry per cell, and the sha256 of every results file checked, so the
leaderboard shows the entry as verified only while those files are unchanged. Only this command
writes that file; a pull request that adds or edits one is refused by CI.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator

__all__ = ["CellCheck", "VerifyError", "compare", "sample_records", "verify_entry", "main", "K_SPREAD"]

K_SPREAD = 3.0  # re-run within 3 standard deviations of a difference of two seeds
BYTES_RTOL = 0.01  # across machines: data-dependent payload sizes follow the values
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


class VerifyError(RuntimeError):
    """The entry cannot be verified at all (one line)."""


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
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status in ("match", "within spread")


# --------------------------------------------------------------------------- sampling
def sample_records(records: list[dict[str, Any]], per_task: int, seed: int = 0) -> list[dict[str, Any]]:
    """``per_task`` ``ok`` records per task (the latest record of each cell), chosen reproducibly."""
    latest: dict[str, dict[str, Any]] = {}
    for r in sorted(records, key=lambda r: r.get("created", "")):
        if r.get("status") == "ok":
            latest[r["cell_key"]] = r
    by_task: dict[str, list[dict[str, Any]]] = {}
    for r in sorted(latest.values(), key=lambda r: r["cell_id"]):
        by_task.setdefault(r["task"], []).append(r)
    rng = random.Random(seed)
    out = []
    for task in sorted(by_task):
        rows = by_task[task]
        out += rng.sample(rows, min(per_task, len(rows)))
    return out


# --------------------------------------------------------------------------- code trees
def _git(repo: Path, *args: str) -> str | None:
    try:
        r = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout.strip() if r.returncode == 0 else None


@contextlib.contextmanager
def code_tree(commit: str | None, repo: Path, cache: dict[str, Path]) -> Iterator[Path]:
    """A folder with the code of ``commit`` (``git archive``), extracted once per commit into ``cache``."""
    if not commit:
        raise VerifyError("the record names no git commit: its code cannot be recovered")
    full = _git(repo, "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}")
    if not full:
        raise VerifyError(f"commit {commit[:12]} is not in this repository (git fetch it, or the code is unpublished)")
    if full not in cache:
        dest = Path(tempfile.mkdtemp(prefix=f"mpcbench-verify-{full[:12]}-"))
        archive = subprocess.run(
            ["git", "-C", str(repo), "archive", "--format=tar", full], capture_output=True, check=False
        )
        if archive.returncode != 0:
            shutil.rmtree(dest, ignore_errors=True)
            raise VerifyError(
                f"git archive {full[:12]} failed: {archive.stderr.decode(errors='replace').strip()[:200]}"
            )
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
        cache[full] = dest
    yield cache[full]


# --------------------------------------------------------------------------- one cell
def _config_for_rerun(record: dict[str, Any], entry_dir: Path, time_limit_s: float) -> dict[str, Any]:
    """The recorded config, with local paths replaced: no data dir (the verifier's default), the
    entry's own plugin file, and the verifier's time limit."""
    cfg = dict(record["config"])
    cfg["data_dir"] = None
    cfg["time_limit_s"] = time_limit_s
    plugins = []
    for p in cfg.get("plugins") or []:
        if str(p).endswith(".py"):
            local = entry_dir / Path(str(p)).name
            if not local.is_file():
                raise VerifyError(f"plugin {Path(str(p)).name} used by {record['cell_id']} is not in {entry_dir}")
            plugins.append(str(local.resolve()))
        else:
            plugins.append(p)
    cfg["plugins"] = plugins
    return cfg


def _rerun(
    record: dict[str, Any], tree: Path, commit: str, entry_dir: Path, time_limit_s: float, threads: int
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="mpcbench-verify-cell-") as tmp:
        cfg_path = Path(tmp) / "config.json"
        cfg_path.write_text(json.dumps(_config_for_rerun(record, entry_dir, time_limit_s)))
        env = {
            **os.environ,
            "PYTHONPATH": str(tree),
            "MPCBENCH_GIT_COMMIT": commit,
            "OMP_NUM_THREADS": str(threads),
            "MKL_NUM_THREADS": str(threads),
            "PYTHONUNBUFFERED": "1",
        }
        proc = subprocess.run(
            [sys.executable, "-c", RUNNER, str(cfg_path), str(Path(tmp) / "logs")],
            cwd=tree,
            env=env,
            capture_output=True,
            text=True,
            timeout=time_limit_s + 600,
            check=False,
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


def _spread(record: dict[str, Any], entry_records: list[dict[str, Any]]) -> tuple[float, str]:
    """The seed std to compare against: the entry's own seeds of this row (>= 2), else the measured one."""
    from leaderboard.statistics import MEASURED_SPREAD

    row = [
        r
        for r in entry_records
        if r.get("status") == "ok"
        and r["task"] == record["task"]
        and r["tier"] == record["tier"]
        and r.get("specs") == record.get("specs")
        and r.get("run") == record.get("run")
    ]
    vals = sorted({r["seed"]: r["final_metric"] for r in row}.items())
    if len(vals) >= 2:
        xs = [v for _, v in vals]
        mean = sum(xs) / len(xs)
        return math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1)), f"std of the entry's {len(xs)} seeds"
    measured = MEASURED_SPREAD.get((record["task"], record["tier"]))
    if measured is None:
        raise VerifyError(
            f"no measured seed spread for {record['task']} / {record['tier']}: cannot compare across machines"
        )
    return measured.seed_std, f"measured seed std of {record['task']} / {record['tier']}"


def compare(
    old: dict[str, Any], new: dict[str, Any], *, exact: bool, std: float = math.nan, why: str = ""
) -> tuple[str, str]:
    """(status, one-line detail) of a re-run ``new`` against the recorded ``old`` (module docstring)."""
    if new.get("status") != "ok":
        return "rerun failed", f"the re-run ended {new.get('status')}: {new.get('error')}"
    if new.get("cell_key") != old.get("cell_key"):
        return (
            "mismatch",
            f"the recorded config gives cell key {new.get('cell_key')}, the record says {old.get('cell_key')}",
        )
    bo, bn = _bytes(old), _bytes(new)
    qo, qn = float(old["final_metric"]), float(new["final_metric"])
    if exact:
        if bo != bn:
            return "mismatch", f"wire bytes differ: recorded {bo}, re-run {bn}"
        if qo != qn:
            return (
                "mismatch",
                f"{old['metric_name']} differs: recorded {qo!r}, re-run {qn!r} (same machine class, torch and code)",
            )
        return "match", f"identical {old['metric_name']} {qn!r} and wire bytes"
    for d in set(bo) | set(bn):
        a, b = bo.get(d, 0), bn.get(d, 0)
        if abs(a - b) > BYTES_RTOL * max(a, b, 1):
            return "mismatch", f"{d} wire bytes differ by more than {BYTES_RTOL:.0%}: recorded {a}, re-run {b}"
    tol = K_SPREAD * math.sqrt(2) * std
    if qo == qn and bo == bn:
        return (
            "within spread",
            f"identical {old['metric_name']} {qn!r} and wire bytes, though exactness was not required ({why})",
        )
    if abs(qo - qn) > tol:
        return (
            "mismatch",
            f"{old['metric_name']} recorded {qo:.4f}, re-run {qn:.4f}: |diff| {abs(qo - qn):.4f} > {tol:.4f} ({why})",
        )
    return (
        "within spread",
        f"{old['metric_name']} recorded {qo:.4f}, re-run {qn:.4f}: |diff| {abs(qo - qn):.4f} <= {tol:.4f} ({why})",
    )


def check_cell(
    record: dict[str, Any],
    entry_dir: Path,
    entry_records: list[dict[str, Any]],
    repo: Path,
    trees: dict[str, Path],
    time_limit_s: float,
    threads: int,
) -> CellCheck:
    """Re-run one record's cell with its recorded code and compare (never raises)."""
    prov = record.get("provenance") or {}
    commit = prov.get("git_commit") or ""
    check = CellCheck(
        record["cell_id"],
        record["record_id"],
        "cannot verify",
        "",
        commit=commit[:12],
        recorded_metric=record.get("final_metric"),
        recorded_bytes=_bytes(record),
    )
    t0 = time.perf_counter()
    try:
        with code_tree(commit, repo, trees) as tree:
            new = _rerun(record, tree, commit, entry_dir, time_limit_s, threads)
        check.rerun_metric, check.rerun_bytes = new.get("final_metric"), _bytes(new)
        exact, why_not = _same_environment(record, new, prov.get("git_dirty") is False)
        if exact:
            check.mode = "exact"
            check.status, check.detail = compare(record, new, exact=True)
        else:
            std, source = _spread(record, entry_records)
            check.mode = "spread"
            check.status, check.detail = compare(
                record, new, exact=False, std=std, why=f"{source}; not exact: {why_not}"
            )
    except VerifyError as e:
        check.detail = str(e)
    except subprocess.TimeoutExpired:
        check.status, check.detail = "rerun failed", f"the re-run did not finish within {time_limit_s:g} s"
    check.seconds = round(time.perf_counter() - t0, 1)
    return check


# --------------------------------------------------------------------------- an entry
def _file_hashes(entry_dir: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(entry_dir.glob("*.jsonl"))}


def verify_entry(
    entry_dir: str | Path,
    *,
    sample: int = 1,
    seed: int = 0,
    time_limit_s: float = 3600.0,
    threads: int = 1,
    write: bool = True,
    progress=None,
) -> dict[str, Any]:
    """Verify ``sample`` cells per task of one entry folder; write and return the verification report."""
    from leaderboard.submissions import VERIFICATION_FILE, load_entry

    entry_dir = Path(entry_dir)
    records, problems = load_entry(entry_dir)
    if not records:
        raise VerifyError(f"{entry_dir}: no valid records to verify" + (f" ({problems[0]})" if problems else ""))
    repo = Path(_git(entry_dir.resolve(), "rev-parse", "--show-toplevel") or Path(__file__).resolve().parents[2])
    trees: dict[str, Path] = {}
    checks = []
    try:
        for rec in sample_records(records, sample, seed):
            if progress:
                progress(
                    f"re-running {rec['cell_id']} at {str((rec.get('provenance') or {}).get('git_commit'))[:12]} ..."
                )
            c = check_cell(rec, entry_dir, records, repo, trees, time_limit_s, threads)
            checks.append(c)
            if progress:
                progress(f"  {c.status}: {c.cell_id}: {c.detail} ({c.seconds:g} s)")
    finally:
        for t in trees.values():
            shutil.rmtree(t, ignore_errors=True)
    if any(c.status in ("mismatch", "rerun failed") for c in checks):
        status = "failed"
    elif checks and all(c.ok for c in checks):
        status = "verified"
    else:
        status = "not verified"
    report = {
        "schema": "mpcbench.verification/1",
        "entry": entry_dir.name,
        "status": status,
        "verified_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "verifier_commit": _git(repo, "rev-parse", "HEAD"),
        "sample_per_task": sample,
        "files": _file_hashes(entry_dir),
        "cells": [asdict(c) for c in checks],
    }
    if write:
        (entry_dir / VERIFICATION_FILE).write_text(json.dumps(report, indent=1) + "\n")
    return report


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("verify", help="re-run sampled cells of a records/<entry> folder and compare with its records")
    p.add_argument("entry", nargs="+", help="entry folder(s), e.g. records/mpcbench-baselines")
    p.add_argument("--sample", type=int, default=1, help="cells re-run per task (default 1)")
    p.add_argument("--seed", type=int, default=0, help="which cells are sampled (default 0)")
    p.add_argument(
        "--cell-timeout", type=float, default=3600.0, help="time limit of one re-run in seconds (default 3600)"
    )
    p.add_argument(
        "--threads", type=int, default=1, help="torch threads per re-run (default 1, as the baselines were run)"
    )
    p.add_argument("--no-write", action="store_true", help="do not write <entry>/verification.json")
    p.set_defaults(func=cmd_verify)


def cmd_verify(args: argparse.Namespace) -> int:
    from leaderboard.safe_text import plain

    from .options import check_cell_timeout

    if not 1 <= args.sample <= 100:
        raise VerifyError(f"--sample must be in [1, 100], got {args.sample}")
    if not 1 <= args.threads <= 256:
        raise VerifyError(f"--threads must be in [1, 256], got {args.threads}")
    check_cell_timeout(args.cell_timeout, "--cell-timeout")
    worst = 0
    for entry in args.entry:
        report = verify_entry(
            entry,
            sample=args.sample,
            seed=args.seed,
            time_limit_s=args.cell_timeout,
            threads=args.threads,
            write=not args.no_write,
            progress=lambda m: print(plain(m), file=sys.stderr, flush=True),
        )
        n_ok = sum(1 for c in report["cells"] if c["status"] in ("match", "within spread"))
        print(plain(f"{entry}: {report['status']} ({n_ok} of {len(report['cells'])} re-run cells agree)"))
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
