"""The maintainers' entries: the one list that decides which ``records/<entry>`` folders are the
maintainers', with the key their state is signed by.

It drives the loader's ``is_maintainer`` (``leaderboard.submissions.MAINTAINER_ENTRIES``), hence the
board's "maintainers" mark and the records the claims judge; the verifier's identity check (a
maintainers' entry is keyed by :data:`MAINTAINERS_KEY` whatever its ``entry.yaml`` says:
``suite.bench.verify.identity``); and CODEOWNERS, which must name each folder
(``tests/architecture/test_maintainers_list.py`` fails when they differ). The private key is the
maintainers' (``mpcbench verify records/<entry> --sign KEY`` signs a new state); it is never committed.
"""

from __future__ import annotations

__all__ = ["MAINTAINERS_KEY", "MAINTAINER_KEYS", "MAINTAINER_ENTRIES"]

# ssh-ed25519 public key (suite.results.signing_key); comment dropped
MAINTAINERS_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAmxa/rj9ar5xHagf46QS2hDdT2ibEtPJzCLUVvIsERC"

MAINTAINER_KEYS: dict[str, str] = {
    "mpcbench-baselines": MAINTAINERS_KEY,  # the built-in compressors on the calibrated quick tier
    "mpcbench-plateau": MAINTAINERS_KEY,  # the plateau tier's runs (claims read them)
}
MAINTAINER_ENTRIES = frozenset(MAINTAINER_KEYS)
