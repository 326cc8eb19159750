"""Issue 45: one list of the maintainers' entries (suite/results/maintainers.py) drives the loader's
``is_maintainer`` (the board's mark and the records the claims judge), the keys the verifier holds them to,
and CODEOWNERS. Before, records/mpcbench-plateau was judged as the maintainers' (claims read it) but had
neither a CODEOWNERS line nor a key: deleting 4 of 5 seeds of one arm changed a plateau verdict."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from suite.results.maintainers import MAINTAINER_ENTRIES, MAINTAINER_KEYS, MAINTAINERS_KEY
from suite.results.signing_key import parse_key

REPO = Path(__file__).resolve().parents[2]


def _codeowned_entries() -> set[str]:
    text = (REPO / ".github" / "CODEOWNERS").read_text()
    return {m.group(1) for m in re.finditer(r"^/records/([^/*\s]+)/\s+@mpcbench/maintainers\s*$", text, re.M)}


def test_the_list_codeowners_the_loader_and_the_keys_agree():
    from leaderboard import frame, submissions
    from leaderboard.submissions import load_entry

    assert "mpcbench-plateau" in MAINTAINER_ENTRIES and "mpcbench-baselines" in MAINTAINER_ENTRIES
    assert submissions.MAINTAINER_ENTRIES == MAINTAINER_ENTRIES == set(MAINTAINER_KEYS)
    assert _codeowned_entries() == set(MAINTAINER_ENTRIES)
    assert frame.MAINTAINERS in MAINTAINER_ENTRIES  # the fallback baseline is one of them
    for name, key in MAINTAINER_KEYS.items():
        folder = REPO / "records" / name
        assert (folder / "entry.yaml").is_file(), f"{name}: listed but not in records/"
        assert parse_key(key) == parse_key(MAINTAINERS_KEY)
        own = yaml.safe_load((folder / "entry.yaml").read_text()).get("key")
        assert own is None or parse_key(own) == parse_key(key), f"{name}: entry.yaml names another key"
        records, _ = load_entry(folder)
        assert records and all(r["is_maintainer"] for r in records)


def test_no_folder_calls_itself_the_maintainers_outside_the_list():
    for folder in sorted((REPO / "records").iterdir()):
        if not (folder / "entry.yaml").is_file():
            continue
        info = yaml.safe_load((folder / "entry.yaml").read_text())
        if str(info.get("submitter", "")).startswith("mpcbench"):
            assert folder.name in MAINTAINER_ENTRIES, f"{folder.name}: the maintainers' folder is not in the list"


def test_the_claims_name_no_entry_outside_the_list():
    text = (REPO / "leaderboard" / "claims.py").read_text()
    named = set(re.findall(r"mpcbench-[a-z0-9-]+", text))
    assert named <= set(MAINTAINER_ENTRIES), named - set(MAINTAINER_ENTRIES)
