"""The README is short and true: every count in it is computed here from the code, every measured
figure is the one docs/performance.md records with its load, every link resolves.

When a test here fails after a change (a tier gained entries, a command was added), update the
README's number, not the test: the failure message names the line.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
MAX_LINES = 250


def _find(pattern: str) -> re.Match:
    m = re.search(pattern, README, re.S)
    assert m, f"the README no longer says {pattern!r}: update this test with the new wording"
    return m


def test_the_readme_is_short():
    n = len(README.splitlines())
    assert n <= MAX_LINES, f"README.md has {n} lines; move detail to docs/ (at most {MAX_LINES})"


def test_the_command_count_and_names_are_the_clis():
    from suite.bench.cli import build_parser

    sub = next(a for a in build_parser()._subparsers._group_actions)  # noqa: SLF001 - argparse keeps them here
    m = _find(r"`mpcbench` has (\d+) commands: ([a-z, ]+?)\s+\(")
    names = [n.strip() for n in m[2].split(",")]
    assert int(m[1]) == len(sub.choices) and names == list(sub.choices), (m[0], list(sub.choices))


def test_task_and_compressor_counts():
    from compressors.registry import available, get_class
    from tasks import available_tasks, get_task_class

    # the project's own (a test's plugin may have registered more in this process)
    builtins = [n for n in available() if get_class(n).__module__.startswith("compressors.builtins")]
    own_tasks = [t for t in available_tasks() if get_task_class(t).__module__.startswith("tasks.")]
    m = _find(r"It has (\d+) tasks \(`mpcbench list tasks`\) and (\d+) built-in compressors")
    assert (int(m[1]), int(m[2])) == (len(own_tasks), len(builtins)), m[0]


@pytest.fixture(scope="module")
def matrix():
    from suite.bench.matrix import load_matrix

    return load_matrix()


def test_the_core_matrix_and_its_rounds(matrix):
    from suite.bench.matrix import Selection, plan_cells

    core = plan_cells(Selection(tier="quick", core=True), matrix)
    m = _find(r"\*\*core matrix\*\* \((\d+) cells: seed 0\s+of (\d+) compressors on (\d+) tasks\)")
    compressors = {c.config.plan.label for c in core}
    tasks = {c.config.task for c in core}
    assert (int(m[1]), int(m[2]), int(m[3])) == (len(core), len(compressors), len(tasks)), m[0]
    rounds = matrix.tier("quick").rounds
    r1 = _find(r"round 1 is ([^\n]+?) on\s+every task")
    assert re.findall(r"`([^`]+)`", r1[1]) == list(rounds[0]), r1[0]
    r2 = _find(r"round 2 adds (.+?), and a ranking")
    assert re.findall(r"`([^`]+)`", r2[1]) == list(rounds[1]), r2[0]


def test_the_tier_cell_counts(matrix):
    from suite.bench.matrix import Selection, plan_cells

    rows = dict(re.findall(r"^\| `(\w+)` \| (\d+) \|", README, re.M))
    assert set(rows) == set(matrix.tiers), (
        f"the README's tier table lists {sorted(rows)}, the matrix {list(matrix.tiers)}"
    )
    for tier, n in rows.items():
        assert int(n) == len(plan_cells(Selection(tier=tier), matrix)), f"tier {tier}: the README says {n} cells"
    quick = _find(r"\*\*whole quick tier\*\* \((\d+) cells")
    assert quick[1] == rows["quick"]


def test_the_measured_times_are_the_recorded_ones():
    """The README's minutes are the measurement docs/performance.md records with its command and load."""
    perf = (ROOT / "docs" / "performance.md").read_text()
    section = perf[perf.index("## The main job on a fresh clone") :]
    end = section.find("\n## ", 1)
    section = section if end < 0 else section[:end]
    table = _find(r"\| `bash ci/main.sh` \| minutes from its start \|\n\|---\|---\|\n((?:\|[^\n]+\n){3})")
    for line in table[1].splitlines():
        minutes = line.rsplit("|", 2)[1].strip()
        assert re.fullmatch(r"\d+(\.\d)?", minutes), f"not a measured figure: {line}"
        assert f"| {minutes} |" in section, f"{minutes} min is not in docs/performance.md's measurement: {line}"
    assert "load" in section and "uptime" in section  # the load it was taken at, and how


def test_the_links_resolve():
    for target in re.findall(r"\]\(([^)#]+)\)", README):
        if not target.startswith("http"):
            assert (ROOT / target).exists(), f"README links to {target}, which does not exist"
