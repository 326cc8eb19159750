"""An entry's signed state: ``manifest.json`` and its ssh signature ``manifest.json.sig``.

The manifest names the entry's folder, a **version** that only grows, and the **digest** of the folder's
content (every file but the verification's two and the manifest's own, by sha256:
:func:`leaderboard.submissions.entry_file_hashes`). It is signed with ``ssh-keygen -Y sign`` in the
namespace :data:`NAMESPACE` by the entry's key. A signature on a commit binds that commit; a signed
manifest binds the state the owner meant to land, so a commit the owner signed on an abandoned branch
replayed in someone else's pull request, or an older signed state, is refused once a higher version has
landed (:mod:`.identity`). ``mpcbench verify records/<entry> --sign KEY`` writes and signs the next one.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from suite.results.signing_key import MANIFEST, SIGNATURE

from .errors import VerifyError

__all__ = [
    "MANIFEST",
    "SIGNATURE",
    "NAMESPACE",
    "Manifest",
    "content_digest",
    "hashes_at",
    "read_manifest",
    "manifest_at",
    "signature_ok",
    "sign_entry",
]

NAMESPACE = "mpcbench-entry"  # ssh signatures are bound to a namespace: a git commit signature is not one
SCHEMA = "mpcbench.manifest/1"
MAX_MANIFEST_BYTES = 4096
_PRINCIPAL = "entry-key"


@dataclass(frozen=True)
class Manifest:
    entry: str
    version: int
    digest: str


def content_digest(hashes: dict[str, str]) -> str:
    """The digest a manifest names, of an entry's file hashes (name -> sha256)."""
    return "sha256:" + hashlib.sha256(json.dumps(hashes, sort_keys=True).encode()).hexdigest()


def _git_bytes(repo: Path, *args: str) -> bytes | None:
    try:
        r = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, timeout=120, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout if r.returncode == 0 else None


def hashes_at(repo: Path, commit: str, folder: str) -> dict[str, str] | None:
    """:func:`leaderboard.submissions.entry_file_hashes` of ``folder`` as ``commit`` holds it (None: absent)."""
    from leaderboard.submissions import RERUNS_FILE, VERIFICATION_FILE

    listing = _git_bytes(repo, "ls-tree", "-z", f"{commit}:{folder}")
    if listing is None:
        return None
    out: dict[str, str] = {}
    for item in listing.split(b"\0"):
        if not item:
            continue
        meta, _, name_b = item.partition(b"\t")
        mode, kind, sha = meta.decode().split()
        name = name_b.decode("utf-8", "replace")
        if name in (VERIFICATION_FILE, RERUNS_FILE, MANIFEST, SIGNATURE):
            continue
        if kind != "blob" or mode == "120000":
            out[name] = "not a regular file"
            continue
        blob = _git_bytes(repo, "cat-file", "blob", sha)
        out[name] = hashlib.sha256(blob or b"").hexdigest()
    return dict(sorted(out.items()))


def read_manifest(text: bytes, where: str) -> Manifest:
    """The manifest in ``text``, or VerifyError naming ``where``."""
    try:
        data = json.loads(text[:MAX_MANIFEST_BYTES])
        entry, version, digest = data["entry"], data["version"], data["digest"]
        if data.get("schema") != SCHEMA or not isinstance(entry, str) or not isinstance(digest, str):
            raise TypeError("fields")
        if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version < 2**53:
            raise TypeError("version")
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise VerifyError(f"{where}: not a manifest this command wrote ({type(e).__name__})") from None
    return Manifest(entry, version, digest)


def manifest_at(repo: Path, commit: str, folder: str) -> Manifest | None:
    """The manifest ``commit`` holds for ``folder`` (None: none there)."""
    text = _git_bytes(repo, "cat-file", "blob", f"{commit}:{folder}/{MANIFEST}")
    return None if text is None else read_manifest(text, f"{folder}/{MANIFEST} at {commit[:12]}")


def signature_ok(message: bytes, signature: bytes, key: str) -> bool:
    """Whether ``signature`` is ``key``'s ssh signature of ``message`` in :data:`NAMESPACE`."""
    with tempfile.TemporaryDirectory(prefix="mpcbench-manifest-") as tmp:
        signers, sig = Path(tmp) / "allowed_signers", Path(tmp) / "sig"
        signers.write_text(f"{_PRINCIPAL} {key}\n")
        sig.write_bytes(signature)
        try:
            r = subprocess.run(
                ["ssh-keygen", "-Y", "verify", "-f", str(signers), "-I", _PRINCIPAL, "-n", NAMESPACE, "-s", str(sig)],
                input=message, capture_output=True, timeout=60, check=False,
            )  # fmt: skip
        except (OSError, subprocess.SubprocessError):
            raise VerifyError("ssh-keygen is needed to check an entry's signed manifest") from None
        return r.returncode == 0


def sign_entry(entry_dir: Path, key_file: Path, base_version: int = 0) -> Manifest:
    """Write ``entry_dir``'s next manifest (version above ``base_version`` and the folder's own) and sign it
    with the private key ``key_file``; the new manifest."""
    from leaderboard.submissions import entry_file_hashes

    own = 0
    if (entry_dir / MANIFEST).is_file():
        try:
            own = read_manifest((entry_dir / MANIFEST).read_bytes(), str(entry_dir / MANIFEST)).version
        except VerifyError:
            own = 0
    m = Manifest(entry_dir.name, max(own, base_version) + 1, content_digest(entry_file_hashes(entry_dir)))
    text = json.dumps({"schema": SCHEMA, "entry": m.entry, "version": m.version, "digest": m.digest}, indent=1)
    (entry_dir / MANIFEST).write_text(text + "\n")
    r = subprocess.run(
        ["ssh-keygen", "-q", "-Y", "sign", "-f", str(key_file), "-n", NAMESPACE],
        input=(entry_dir / MANIFEST).read_bytes(), capture_output=True, timeout=60, check=False,
    )  # fmt: skip
    if r.returncode != 0:
        raise VerifyError(
            f"ssh-keygen could not sign with {key_file}: {r.stderr.decode(errors='replace').strip()[:200]}"
        )
    (entry_dir / SIGNATURE).write_bytes(r.stdout)
    return m
