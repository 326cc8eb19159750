"""The base branch judges: ``mpcbench verify`` runs the base branch's own code on a pull request's records.

A pull request can change anything in its checkout: the verifier, the tolerances' data
(``tier_spread.json``), the maintainers' records the tolerances come from. So the command
re-executes itself from a clean tree of the base commit (``git archive``, a private temporary
folder): that tree's verifier, references and sandbox decide, and the pull request's folder is
read as data only (its records, entry.yaml and the hash-pinned plugin, which runs sandboxed).
The report names the judging commit (``verifier_commit``) and ``judged_by``.

``--here`` skips this (development and tests: the report then says "this checkout").
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from .code import extract_tree, git
from .errors import VerifyError

__all__ = ["JUDGE_ENV", "judged", "run_judged"]

JUDGE_ENV = "VERIFY_JUDGE_COMMIT"  # set in the re-executed verifier: the base commit whose tree it is


def judged() -> bool:
    """Whether this process is the base branch's verifier (re-executed by :func:`run_judged`)."""
    return bool(os.environ.get(JUDGE_ENV))


def run_judged(argv: list[str], entries: list[str], base: str) -> int:
    """Run ``mpcbench verify <argv>`` with the base commit's tree; its exit status. ``entries`` are
    the entry folders named in ``argv`` (made absolute: the judge runs in another folder)."""
    first = Path(entries[0]).resolve() if entries else Path.cwd()
    repo = git(first if first.is_dir() else first.parent, "rev-parse", "--show-toplevel")
    if not repo:
        raise VerifyError(
            f"{entries[0] if entries else '.'} is not inside a git checkout: the base branch cannot judge"
        )
    commit = git(Path(repo), "rev-parse", "--verify", "--quiet", f"{base}^{{commit}}")
    if not commit:
        raise VerifyError(f"base branch {base!r} is not in {repo} (name it with --base, e.g. origin/main)")
    absolute = {e: str(Path(e).resolve()) for e in entries}
    args = [absolute.get(a, a) for a in argv]
    tree = extract_tree(Path(repo), commit, prefix="mpcbench-judge-")
    try:
        env = {**os.environ, JUDGE_ENV: commit, "PYTHONPATH": str(tree)}
        return subprocess.run(
            [sys.executable, "-m", "suite", "verify", *args], cwd=tree, env=env, check=False
        ).returncode
    finally:
        shutil.rmtree(tree, ignore_errors=True)
