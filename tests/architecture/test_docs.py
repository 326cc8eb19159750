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


def test_code_comments_say_why_not_which_issue():
    """An "issue N" in a comment sends the reader to a tracker they may not have; the reason
    itself belongs in the comment."""
    import re

    pattern = re.compile(r"\bissues? #?\d+", re.I)
    found = [
        f"{p.relative_to(ROOT)}:{i}"
        for pkg in ("compressors", "suite", "leaderboard", "tasks", "ci")
        for p in sorted((ROOT / pkg).rglob("*"))
        if p.suffix in (".py", ".sh", ".yaml")
        for i, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
        if pattern.search(line)
    ]
    assert not found, "say the reason instead of the issue number:\n" + "\n".join(found)


def test_the_architecture_page_names_files_and_modules_that_exist():
    import re

    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    missing = [
        p for p in sorted(set(re.findall(r"`([\w./-]+/[\w.-]+\.(?:py|yaml|sh))`", text))) if not (ROOT / p).exists()
    ]
    for mod in sorted(set(re.findall(r"`((?:suite|leaderboard|compressors|tasks)(?:\.\w+)+)`", text))):
        parts = mod.split(".")
        if (
            not any(
                (ROOT / Path(*parts[:i])).with_suffix(".py").exists()
                or (ROOT / Path(*parts[:i]) / "__init__.py").exists()
                for i in range(len(parts), 1, -1)
            )
            and parts[1] not in (ROOT / parts[0] / "__init__.py").read_text()
        ):  # a name the package exports
            missing.append(mod)
    assert not missing, f"docs/ARCHITECTURE.md names what the code no longer has: {missing}"
