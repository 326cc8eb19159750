"""Which code re-runs a cell, and which code judges: only code that landed on the base branch.

A record's ``provenance.git_commit`` must be an ancestor of the base branch, and its code must not
have been taken back later: a commit whose change to the code (everything but ``records/`` and
``docs/``) is reverted by a later commit on the path to the base tip is refused. The path is every
commit, not the first-parent line only, so a fast-forward merge of a modify-then-revert history is
caught as well as a merge commit of one (the old first-parent check assumed merge commits: after a
fast-forward the modifying commit sat on the first-parent line and its code re-ran cells).

:func:`judge_tree` is the base branch's own tree: ``mpcbench verify`` re-executes itself from it
(:mod:`.trusted`), so a pull request's verifier, tolerances and data files never judge it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from .errors import VerifyError

__all__ = ["CodeTrees", "git", "extract_tree", "NOT_CODE"]

NOT_CODE = ("records", "docs")  # top-level folders whose changes are data or prose, not code


def git(repo: Path, *args: str, timeout: float = 60) -> str | None:
    try:
        r = subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=timeout, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout.strip() if r.returncode == 0 else None


def extract_tree(repo: Path, commit: str, prefix: str = "mpcbench-verify-") -> Path:
    """A clean copy of ``commit``'s tree (``git archive``) in a new private temporary folder."""
    dest = Path(tempfile.mkdtemp(prefix=f"{prefix}{commit[:12]}-"))
    archive = subprocess.run(
        ["git", "-C", str(repo), "archive", "--format=tar", commit], capture_output=True, check=False
    )
    if archive.returncode != 0:
        shutil.rmtree(dest, ignore_errors=True)
        raise VerifyError(f"git archive {commit[:12]} failed (exit {archive.returncode})")
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    os.chmod(dest, 0o755)  # read by the re-run (another process); written by no one
    return dest


def _code_paths(repo: Path, commit: str) -> dict[str, str]:
    """Top-level code entries of a commit's tree -> their object ids."""
    out = git(repo, "ls-tree", commit) or ""
    entries = {}
    for line in out.splitlines():
        meta, _, name = line.partition("\t")
        if name and name not in NOT_CODE:
            entries[name] = meta.split()[2]
    return entries


class CodeTrees:
    """Clean trees of base-branch commits, extracted once per commit."""

    def __init__(self, repo: Path, base: str) -> None:
        self.repo, self.base = repo, base
        base_commit = git(repo, "rev-parse", "--verify", "--quiet", f"{base}^{{commit}}")
        if not base_commit:
            raise VerifyError(f"base branch {base!r} is not in {repo} (name it with --base, e.g. origin/main)")
        self.base_commit: str = base_commit
        self.trees: dict[str, Path] = {}
        self._checked: dict[str, str] = {}  # commit -> "" (accepted) or why not

    def _reverted(self, full: str) -> str:
        """Why ``full``'s code change was taken back on the path to the base tip ("" if it was not)."""
        parent = git(self.repo, "rev-parse", "--verify", "--quiet", f"{full}^")
        if not parent:
            return ""
        before, after = _code_paths(self.repo, parent), _code_paths(self.repo, full)
        changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
        if not changed:
            return ""
        files = git(self.repo, "diff", "--name-only", "--no-renames", parent, full, "--", *sorted(changed)) or ""
        for f in files.splitlines()[:200]:
            was = git(self.repo, "rev-parse", "--verify", "--quiet", f"{parent}:{f}") or "(absent)"
            now = git(self.repo, "rev-parse", "--verify", "--quiet", f"{full}:{f}") or "(absent)"
            # every later commit on any path to the tip that touched the file (not only first parents)
            later = (
                git(self.repo, "log", "--format=%H", "--ancestry-path", f"{full}..{self.base_commit}", "--", f) or ""
            )
            for c in later.split()[:500]:
                there = git(self.repo, "rev-parse", "--verify", "--quiet", f"{c}:{f}") or "(absent)"
                if there == was and there != now:
                    return f"its change to {f} is reverted by {c[:12]} on the way to {self.base}"
        return ""

    def resolve(self, commit: str | None) -> str:
        """The full commit id, if it is on the base branch and its code change stands (else one line)."""
        if not commit:
            raise VerifyError("the record names no git commit: its code cannot be recovered")
        full = git(self.repo, "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}")
        if not full:
            raise VerifyError(
                f"commit {commit[:12]} is not in this repository (git fetch it, or the code is unpublished)"
            )
        if full not in self._checked:
            on_base = (
                subprocess.run(
                    ["git", "-C", str(self.repo), "merge-base", "--is-ancestor", full, self.base_commit], check=False
                ).returncode
                == 0
            )
            why = "" if on_base else f"is not on {self.base}: only code merged into the base branch re-runs cells"
            self._checked[full] = why or self._reverted(full)
        if self._checked[full]:
            raise VerifyError(f"commit {full[:12]} {self._checked[full]}")
        return full

    def tree(self, commit: str | None) -> tuple[str, Path]:
        full = self.resolve(commit)
        if full not in self.trees:
            self.trees[full] = extract_tree(self.repo, full)
        return full, self.trees[full]

    def close(self) -> None:
        for t in self.trees.values():
            shutil.rmtree(t, ignore_errors=True)
