"""An entry's identity: the ssh-ed25519 public key its ``entry.yaml`` may name (``key:``).

Torch-free and git-free: the loader (``leaderboard.submissions``) checks the field with it, ``mpcbench
run`` stamps its fingerprint into each record's provenance when ``MPCBENCH_SIGNING_KEY`` names it,
and the verifier (``suite.bench.verify.identity``) builds git's allowed-signers file from it. What binding an entry
to a key prevents, and what not: docs/reliability.md, "Identity".
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import struct

__all__ = ["KEY_TYPE", "MANIFEST", "SIGNATURE", "parse_key", "fingerprint"]

KEY_TYPE = "ssh-ed25519"
# an entry's signed state (suite/bench/verify/manifest.py): the manifest and its ssh signature, in the folder
MANIFEST = "manifest.json"
SIGNATURE = "manifest.json.sig"


def _blob(text: str) -> bytes:
    """The key blob of ``ssh-ed25519 <base64> [comment]``, or ValueError naming what is wrong."""
    parts = text.strip().split()
    if len(parts) < 2 or parts[0] != KEY_TYPE:
        raise ValueError(
            f"must be an {KEY_TYPE} public key line ('{KEY_TYPE} AAAA... [comment]', e.g. ~/.ssh/id_ed25519.pub)"
        )
    try:
        blob = base64.b64decode(parts[1], validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"is not an {KEY_TYPE} public key: its key part is not base64") from None
    name = KEY_TYPE.encode()
    want = struct.pack(">I", len(name)) + name + struct.pack(">I", 32)
    if len(blob) != len(want) + 32 or not blob.startswith(want):
        raise ValueError(f"is not an {KEY_TYPE} public key: its key part does not hold one 32-byte key")
    return blob


def parse_key(text: str) -> str:
    """``text`` as the canonical key line ``ssh-ed25519 <base64>`` (comment dropped), or ValueError."""
    return f"{KEY_TYPE} {base64.b64encode(_blob(text)).decode()}"


def fingerprint(text: str) -> str:
    """The key's fingerprint as ``ssh-keygen -l`` prints it (``SHA256:<base64, unpadded>``)."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(_blob(text)).digest()).decode().rstrip("=")
