"""Who may change an entry: the key its ``entry.yaml`` names **on the base branch**.

When the base branch's ``entry.yaml`` of an entry holds a ``key:`` (an ssh-ed25519 public key,
:mod:`suite.results.signing_key`), every commit on the pull request's path (``base..head``, every
commit, not only first parents: a fast-forward is covered too) that touches the entry's folder must
carry a good git ssh signature by that key. The allowed-signers file is built from the base tree's
``entry.yaml``, never the pull request's: a pull request that swaps the key must itself be signed with
the old one. A new entry's key binds at its first landing on the base branch (before that nothing
is checked: there is no identity yet to impersonate). What this does and does not prevent:
docs/reliability.md, "Identity".
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import yaml

from suite.results.signing_key import fingerprint, parse_key

from .code import git
from .errors import VerifyError

__all__ = ["base_key", "unsigned_commits", "check_identity", "PRINCIPAL"]

PRINCIPAL = "entry-key"  # the one principal of the allowed-signers file


def _folder(repo: Path, entry_dir: Path) -> str:
    try:
        return entry_dir.resolve().relative_to(repo.resolve()).as_posix()
    except ValueError:
        raise VerifyError(f"{entry_dir} is not inside the git checkout {repo}") from None


def base_key(repo: Path, base_commit: str, folder: str) -> str:
    """The key the base tree's ``<folder>/entry.yaml`` names ("" when the entry or its key is not there)."""
    text = git(repo, "show", f"{base_commit}:{folder}/entry.yaml")
    if text is None:
        return ""  # a new entry: its key binds when it lands
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        raise VerifyError(f"{folder}/entry.yaml on the base branch is not valid YAML") from None
    key = data.get("key") if isinstance(data, dict) else None
    if not key:
        return ""
    try:
        return parse_key(str(key))
    except ValueError as e:
        raise VerifyError(f"{folder}/entry.yaml on the base branch: field 'key' {e}") from None


def unsigned_commits(repo: Path, base_commit: str, head: str, folder: str, key: str) -> list[str]:
    """One line per commit of ``base..head`` touching ``folder`` that ``key`` did not sign (empty: all did)."""
    commits = git(repo, "rev-list", "--full-history", f"{base_commit}..{head}", "--", folder)
    if commits is None:
        raise VerifyError(f"git rev-list {base_commit[:12]}..{head} failed in {repo}")
    want = fingerprint(key)
    out: list[str] = []
    with tempfile.TemporaryDirectory(prefix="mpcbench-signers-") as tmp:
        signers = Path(tmp) / "allowed_signers"
        signers.write_text(f'{PRINCIPAL} namespaces="git" {key}\n')
        for c in commits.split():
            got = git(
                repo, "-c", "gpg.format=ssh", "-c", f"gpg.ssh.allowedSignersFile={signers}",
                "log", "-1", "--format=%G?%x00%GF", c,
            )  # fmt: skip
            status, _, fp = (got or "").partition("\x00")
            if status != "G" or fp.strip() != want:
                why = "not signed" if status in ("", "N") else f"signature status {status!r}"
                out.append(f"commit {c[:12]} touches {folder} but is not signed by its key {want} ({why})")
    return out


def check_identity(entry_dir: Path, base: str) -> str:
    """Raise VerifyError (one line) when a commit between ``base`` and the entry checkout's HEAD that
    touches the entry's folder is not signed by the key the base branch's ``entry.yaml`` names;
    return what was checked, for the progress line."""
    top = entry_dir if entry_dir.is_dir() else entry_dir.parent
    repo = git(top.resolve(), "rev-parse", "--show-toplevel")
    if not repo:
        raise VerifyError(f"{entry_dir} is not inside a git checkout: its signatures cannot be checked")
    base_commit = git(Path(repo), "rev-parse", "--verify", "--quiet", f"{base}^{{commit}}")
    if not base_commit:
        raise VerifyError(f"base branch {base!r} is not in {repo} (name it with --base, e.g. origin/main)")
    folder = _folder(Path(repo), entry_dir)
    key = base_key(Path(repo), base_commit, folder)
    if not key:
        return f"{folder}: its entry.yaml on {base} names no key (nothing to check; a key binds once it lands there)"
    bad = unsigned_commits(Path(repo), base_commit, "HEAD", folder, key)
    if bad:
        more = f" (+{len(bad) - 1} more)" if len(bad) > 1 else ""
        raise VerifyError(
            bad[0] + more + "; sign them with that key (git config gpg.format ssh; user.signingkey <key file>; "
            "git commit -S), or keep the entry's folder unchanged"
        )
    return f"{folder}: every commit since {base} that touches it is signed by {fingerprint(key)}"
