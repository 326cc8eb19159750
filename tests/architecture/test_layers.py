"""The layers of the code base and the one direction their imports may go (docs/ARCHITECTURE.md).

    suite.bench ──> suite.pipeline ──> {compressors, tasks}
        │                │
        ├──> leaderboard ├──> suite.results ──> suite.schedules   (torch-free leaves: schema, network
        └────────────────┴──> suite.results                         model, reading; the action lists)

Checked on the source text with ``ast`` (every import statement, module level or inside a
function), so a forbidden arrow cannot hide behind a function-local import.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# package (dotted prefix) -> packages it must never import
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "suite.results": ("suite.pipeline", "suite.bench", "leaderboard", "compressors", "tasks", "torch"),
    "suite.schedules": (
        "suite.pipeline",
        "suite.bench",
        "suite.results",
        "suite.settings",
        "leaderboard",
        "compressors",
        "tasks",
        "torch",
    ),
    "suite.settings": (
        "suite.pipeline",
        "suite.bench",
        "suite.results",
        "leaderboard",
        "compressors",
        "tasks",
        "torch",
    ),
    "suite.pipeline": ("suite.bench", "leaderboard"),
    "leaderboard": ("suite.pipeline", "suite.bench", "torch"),
    "compressors": ("suite", "tasks", "leaderboard"),
    "tasks": ("suite", "compressors", "leaderboard"),
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, package: str | None = None) -> list[tuple[int, str]]:
    """Every module an import statement in ``path`` names (relative imports resolved)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    if package is None:
        me = _module_name(path)
        package = me if path.name == "__init__.py" else me.rsplit(".", 1)[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            found.append((node.lineno, name))
    return found


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _files(pkg: str) -> list[Path]:
    """A package's sources, or the one file of a module (``suite.settings``)."""
    path = ROOT / pkg.replace(".", "/")
    return [path.with_suffix(".py")] if path.with_suffix(".py").is_file() else list(path.rglob("*.py"))


SOURCES = sorted(p for pkg in FORBIDDEN for p in _files(pkg))


def test_every_layer_has_sources():
    for pkg in FORBIDDEN:
        assert any(_within(_module_name(p), pkg) for p in SOURCES), f"no sources found for {pkg}"


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_go_one_way(path: Path):
    me = _module_name(path)
    rules = [banned for pkg, banned in FORBIDDEN.items() if _within(me, pkg)]
    bad = [
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for line, name in _imports(path)
        for banned in rules
        for b in banned
        if _within(name, b)
    ]
    assert not bad, "forbidden import across layers (see docs/ARCHITECTURE.md):\n" + "\n".join(bad)


def test_the_checker_sees_function_local_and_relative_imports(tmp_path):
    # an import hidden inside a function, or spelled relative, is still an arrow
    src = tmp_path / "x.py"
    src.write_text("def f():\n    from suite.bench import cli\n\nfrom ..bench import runner\n")
    assert sorted(_imports(src, package="suite.pipeline")) == [(2, "suite.bench"), (4, "suite.bench")]
