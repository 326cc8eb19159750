"""The docs read once: no page repeats a section (two copies drift apart, as the compressor guide's
"Running it" / "How bytes are counted" / "The generic tests" once did)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_docs_have_one_copy_of_each_section():
    for page in sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md", ROOT / "CONTRIBUTING.md"]:
        heads = Counter(ln for ln in page.read_text().splitlines() if ln.startswith("## "))
        twice = [h for h, k in heads.items() if k > 1]
        assert not twice, f"{page.relative_to(ROOT)} has these sections twice: {twice}"
