"""Who may change an entry: signed state, not signed commits.

An entry is **keyed** by the key its ``entry.yaml`` names **on the base branch** (an ssh-ed25519 public
key, :mod:`suite.results.signing_key`), or, for a maintainers' entry, by the maintainers' key of the one
list (:mod:`suite.results.maintainers`). A pull request may change a keyed entry's folder only when the
folder carries a manifest (:mod:`.manifest`) that names the folder, the digest of exactly the files it
now holds, and a version above the base branch's manifest's, signed by that key. So:

- a state the owner signed earlier (a lower version) replayed in a later pull request is refused;
- a change by anyone without the private key is refused, whatever commits it is made of (merge,
  fast-forward, commits signed by the owner on another branch: a signature binds a state, not a commit);
- a keyed folder may not be deleted, nor moved away (CI lists changed folders with renames off, so a
  ``git mv`` shows as the old folder deleted: :func:`changed_folders`);
- a new third-party entry must name a key and carry a manifest signed by it (a maintainers' entry is
  keyed by the list instead); records stamped with a key load only into the entry that names that key
  (:func:`leaderboard.submissions.load_entry`), so copying a pending entry's records gains nothing.

The base tree's key judges, never the pull request's: a pull request that swaps the key must be signed
with the old one. What this does and does not prevent: docs/reliability.md, "Identity".
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from suite.results.maintainers import MAINTAINER_KEYS
from suite.results.signing_key import MANIFEST, SIGNATURE, fingerprint, parse_key

from .code import git
from .errors import VerifyError
from .manifest import content_digest, hashes_at, manifest_at, read_manifest, signature_ok

__all__ = ["base_key", "check_identity", "changed_folders", "sign"]

_SIGN_HOW = "sign the new state with the entry's key: mpcbench verify records/<entry> --sign <private key file>"


def _folder(repo: Path, entry_dir: Path) -> str:
    try:
        return entry_dir.resolve().relative_to(repo.resolve()).as_posix()
    except ValueError:
        raise VerifyError(f"{entry_dir} is not inside the git checkout {repo}") from None


def _key_of(text: str | None, where: str) -> str:
    if text is None:
        return ""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        raise VerifyError(f"{where} is not valid YAML") from None
    key = data.get("key") if isinstance(data, dict) else None
    if not key:
        return ""
    try:
        return parse_key(str(key))
    except ValueError as e:
        raise VerifyError(f"{where}: field 'key' {e}") from None


def base_key(repo: Path, base_commit: str, folder: str) -> str:
    """The key the entry is held to: the maintainers' list's for a maintainers' entry, else the one the base
    tree's ``<folder>/entry.yaml`` names ("" when the entry or its key is not there)."""
    name = folder.rsplit("/", 1)[-1]
    if name in MAINTAINER_KEYS and MAINTAINER_KEYS[name]:
        return parse_key(MAINTAINER_KEYS[name])
    return _key_of(git(repo, "show", f"{base_commit}:{folder}/entry.yaml"), f"{folder}/entry.yaml on the base branch")


def _check_manifest(entry_dir: Path, folder: str, key: str, above: int, hashes: dict[str, str]) -> int:
    """The version of ``entry_dir``'s manifest when it is ``key``'s signature of this very state with a version
    above ``above``; else VerifyError (one line)."""
    path, sig = entry_dir / MANIFEST, entry_dir / SIGNATURE
    if not path.is_file() or not sig.is_file():
        raise VerifyError(f"{folder}: changed without a signed manifest ({MANIFEST}, {SIGNATURE}); {_SIGN_HOW}")
    text = path.read_bytes()
    m = read_manifest(text, f"{folder}/{MANIFEST}")
    if not signature_ok(text, sig.read_bytes()[:65536], key):
        raise VerifyError(f"{folder}/{MANIFEST} is not signed by the entry's key {fingerprint(key)}; {_SIGN_HOW}")
    if m.entry != entry_dir.name:
        raise VerifyError(f"{folder}/{MANIFEST} was signed for entry {m.entry[:80]!r}, not this folder")
    if m.digest != content_digest(hashes):
        raise VerifyError(f"{folder}: its files are not the state {MANIFEST} signed (version {m.version}); {_SIGN_HOW}")
    if m.version <= above:
        raise VerifyError(
            f"{folder}/{MANIFEST} is version {m.version}, not above the base branch's {above}: an older signed "
            f"state is not a new one; {_SIGN_HOW}"
        )
    return m.version


def check_identity(entry_dir: Path, base: str) -> str:
    """Raise VerifyError (one line) when the entry's folder (possibly deleted) changed since ``base`` in a way
    its key did not sign (module docstring); return what was checked, for the progress line."""
    from leaderboard.submissions import entry_file_hashes

    top = entry_dir
    while not top.is_dir():
        top = top.parent
    repo = git(top.resolve(), "rev-parse", "--show-toplevel")
    if not repo:
        raise VerifyError(f"{entry_dir} is not inside a git checkout: its signatures cannot be checked")
    base_commit = git(Path(repo), "rev-parse", "--verify", "--quiet", f"{base}^{{commit}}")
    if not base_commit:
        raise VerifyError(f"base branch {base!r} is not in {repo} (name it with --base, e.g. origin/main)")
    folder = _folder(Path(repo), entry_dir.parent.resolve() / entry_dir.name)
    key = base_key(Path(repo), base_commit, folder)
    before = hashes_at(Path(repo), base_commit, folder)
    now = entry_file_hashes(entry_dir) if entry_dir.is_dir() else None
    if not key:
        if before is None and now is not None:  # a new third-party entry: keyed, its first state signed
            own = _key_of((entry_dir / "entry.yaml").read_text(errors="replace"), f"{folder}/entry.yaml")
            if not own:
                raise VerifyError(
                    f"{folder}: a new entry must name its key in entry.yaml (key: ssh-ed25519 AAAA..., your "
                    "~/.ssh/id_ed25519.pub) and carry a manifest signed by it; " + _SIGN_HOW
                )
            v = _check_manifest(entry_dir, folder, own, 0, now)
            return f"{folder}: a new entry keyed to {fingerprint(own)}, its state signed (manifest version {v})"
        return f"{folder}: its entry.yaml on {base} names no key (an entry from before keys; nothing to check)"
    if now == before:
        return f"{folder}: unchanged since {base}"
    if now is None:
        raise VerifyError(
            f"{folder} is keyed to {fingerprint(key)} and may not be deleted or moved by a pull request "
            "(a moved folder shows as deleted: renames are off); keep it, or ask the maintainers"
        )
    prior = manifest_at(Path(repo), base_commit, folder)
    v = _check_manifest(entry_dir, folder, key, prior.version if prior else 0, now)
    return f"{folder}: its new state is signed by {fingerprint(key)} (manifest version {v}, above {base}'s)"


def changed_folders(repo: Path, base: str, head: str = "HEAD") -> list[str]:
    """The ``records/<entry>`` folders ``base...head`` changes, renames off (a ``git mv`` lists the old
    folder too, so its key is checked)."""
    out = git(repo, "diff", "--no-renames", "--name-only", f"{base}...{head}", "--", "records/")
    if out is None:
        raise VerifyError(f"git diff {base}...{head} failed in {repo}")
    return sorted({"/".join(p.split("/")[:2]) for p in out.splitlines() if p.count("/") >= 2})


def sign(entry_dir: Path, key_file: Path, base: str) -> str:
    """Write and sign the entry's next manifest (version above ``base``'s); one line saying so."""
    from .manifest import sign_entry

    repo = git(entry_dir.resolve(), "rev-parse", "--show-toplevel")
    prior = None
    if repo:
        base_commit = git(Path(repo), "rev-parse", "--verify", "--quiet", f"{base}^{{commit}}")
        if base_commit:
            prior = manifest_at(Path(repo), base_commit, _folder(Path(repo), entry_dir))
    m = sign_entry(entry_dir, key_file, prior.version if prior else 0)
    return f"{entry_dir}: {MANIFEST} version {m.version} signed ({m.digest[:19]}...)"


if __name__ == "__main__":  # CI: the changed entry folders of a pull request, one a line
    for f in changed_folders(Path(sys.argv[1]), sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "HEAD"):
        print(f)
