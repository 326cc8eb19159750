"""The task descriptions, read from the task modules without importing them (torch-free).

A task is one description: the ``DESCRIPTION`` dict literal at the top level of its module
(``tasks/<name>.py``, or a module in a ``$MPCBENCH_TASK_PATH`` folder). The results schema
(``records.task_metrics`` and the metric ranges), the leaderboard page, ``mpcbench report``,
the seed-spread tool and the ``Task`` class itself (its metric and per-tier targets) all read
it, so adding a task touches its module and the matrix, nothing else. The literal is read
with ``ast.literal_eval`` (never executed), so this module stays torch-free and a record reader
never runs task code. Example::

    DESCRIPTION = {
        "name": "cola",                        # = the module's file name
        "family": "GLUE fine-tuning",
        "metric": "matthews_corr", "higher_is_better": True,
        "metrics": ["matthews_corr"],          # + secondary metrics, recorded in curve points
        "metric_range": [-1.0, 1.0],           # optional; records outside it are rejected
        "chance": 0.0, "chance_note": "any constant predictor",
        "trivial": 0.0, "trivial_note": "...",  # the strongest trivial predictor (majority class,
                                               # unigram frequencies): what a target must beat
        "targets": {"smoke": 0.05, "quick": 0.1, "gpu": 0.3, "full": 0.35},
        "page": "GLUE CoLA grammatical acceptability: ...",   # one paragraph for the page
        "cpu_note": "",                        # what the CPU (quick) tier cannot resolve
    }
"""

from __future__ import annotations

import ast
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from suite import settings

__all__ = ["TaskDescription", "CatalogError", "task_dirs", "read_description", "catalog", "describe"]

TASKS_DIR = Path(__file__).resolve().parents[2] / "tasks"
REQUIRED = ("name", "family", "metric", "higher_is_better", "chance", "targets", "page")
OPTIONAL = (
    "metrics",
    "metric_range",
    "chance_note",
    "cpu_note",
    "unit",
    "trivial",
    "trivial_note",
    "superseded_targets",
)


class CatalogError(ValueError):
    """A task module's ``DESCRIPTION`` is missing or malformed; the message names the file."""


@dataclass(frozen=True)
class TaskDescription:
    """One task's description (see the module docstring for the fields)."""

    name: str
    family: str
    metric: str
    higher_is_better: bool
    chance: float
    targets: Mapping[str, float]
    page: str
    metrics: tuple[str, ...] = ()
    metric_range: tuple[float, float] | None = None
    chance_note: str = ""
    cpu_note: str = ""
    unit: str = ""
    trivial: float | None = None
    trivial_note: str = ""
    # tier -> targets this tier had before a revision: records written under one of them are
    # read under the current target (leaderboard.frame.board_target)
    superseded_targets: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    source: str = field(default="", compare=False)

    @property
    def trivial_score(self) -> float:
        """The metric of the strongest trivial predictor (``trivial``; ``chance`` when not stated)."""
        return self.chance if self.trivial is None else self.trivial

    @property
    def direction(self) -> str:
        return "higher is better" if self.higher_is_better else "lower is better"

    def page_text(self) -> str:
        """The task's paragraph for the page and the report: text, chance level, CPU caveat."""
        chance = f"{self.metric} of a trivial predictor: {self.chance:g}" + (
            f" ({self.chance_note})" if self.chance_note else ""
        )
        if self.trivial is not None:
            chance += f"; the strongest trivial predictor: {self.trivial:g}" + (
                f" ({self.trivial_note})" if self.trivial_note else ""
            )
        page = self.page.strip()
        # a page text that names its metric already is not told it again ("Metric:" twice on the page)
        metric = "" if "Metric:" in page else f"Metric: {self.metric} ({self.direction}); "
        parts = [page, f"{metric}{chance}."]
        if self.cpu_note:
            parts.append(f"CPU tier: {self.cpu_note.strip()}")
        return " ".join(parts)


def task_dirs() -> list[Path]:
    """``tasks/`` and the folders of ``$MPCBENCH_TASK_PATH`` (os.pathsep-separated)."""
    extra = [Path(p).expanduser() for p in settings.get("MPCBENCH_TASK_PATH").split(os.pathsep) if p]
    return [TASKS_DIR, *extra]


def _literal(path: Path) -> dict[str, Any] | None:
    """The ``DESCRIPTION`` literal of a module, or None when it has none."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (OSError, SyntaxError, ValueError) as e:
        raise CatalogError(f"{path}: cannot parse: {type(e).__name__}: {e}") from None
    for node in tree.body:
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        if not isinstance(node, (ast.Assign, ast.AnnAssign)):
            continue
        if any(isinstance(t, ast.Name) and t.id == "DESCRIPTION" for t in targets) and node.value is not None:
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                raise CatalogError(
                    f"{path}: DESCRIPTION must be a literal dict (strings, numbers, lists, dicts; no names or calls)"
                ) from None
            if not isinstance(value, dict):
                raise CatalogError(f"{path}: DESCRIPTION must be a dict, got {type(value).__name__}")
            return value
    return None


def read_description(path: Path) -> TaskDescription | None:
    """The validated description in ``path`` (None: the module defines no task)."""
    d = _literal(path)
    if d is None:
        return None
    missing = [k for k in REQUIRED if k not in d]
    unknown = sorted(set(d) - set(REQUIRED) - set(OPTIONAL))
    if missing or unknown:
        raise CatalogError(
            f"{path}: DESCRIPTION " + (f"lacks {missing}" if missing else "") + (" and " if missing and unknown else "")
            + (f"has unknown keys {unknown} (valid: {', '.join(REQUIRED + OPTIONAL)})" if unknown else "")
        )  # fmt: skip
    if d["name"] != path.stem:
        raise CatalogError(f"{path}: DESCRIPTION name {d['name']!r} must be the module's name {path.stem!r}")
    targets = d["targets"]
    if not isinstance(targets, dict) or not all(
        isinstance(v, (int, float)) and math.isfinite(v) for v in targets.values()
    ):
        raise CatalogError(f"{path}: DESCRIPTION targets must map tier names to finite numbers")
    if not isinstance(d["higher_is_better"], bool) or not isinstance(d["chance"], (int, float)):
        raise CatalogError(f"{path}: DESCRIPTION higher_is_better must be a bool and chance a number")
    trivial = d.get("trivial")
    if trivial is not None and not (isinstance(trivial, (int, float)) and math.isfinite(trivial)):
        raise CatalogError(f"{path}: DESCRIPTION trivial must be a finite number (the trivial predictor's metric)")
    superseded = d.get("superseded_targets") or {}
    if not isinstance(superseded, dict) or not all(
        isinstance(v, (list, tuple)) and all(isinstance(x, (int, float)) for x in v) for v in superseded.values()
    ):
        raise CatalogError(f"{path}: DESCRIPTION superseded_targets must map tier names to lists of numbers")
    rng = d.get("metric_range")
    if rng is not None and not (isinstance(rng, (list, tuple)) and len(rng) == 2 and rng[0] < rng[1]):
        raise CatalogError(f"{path}: DESCRIPTION metric_range must be [low, high]")
    metrics = tuple(d.get("metrics") or (d["metric"],))
    if metrics[0] != d["metric"]:
        raise CatalogError(f"{path}: DESCRIPTION metrics must start with the metric {d['metric']!r}")
    return TaskDescription(
        name=str(d["name"]),
        family=str(d["family"]),
        metric=str(d["metric"]),
        higher_is_better=bool(d["higher_is_better"]),
        chance=float(d["chance"]),
        targets={str(k): float(v) for k, v in targets.items()},
        page=str(d["page"]),
        metrics=metrics,
        metric_range=None if rng is None else (float(rng[0]), float(rng[1])),
        chance_note=str(d.get("chance_note", "")),
        cpu_note=str(d.get("cpu_note", "")),
        unit=str(d.get("unit", "")),
        trivial=None if trivial is None else float(trivial),
        trivial_note=str(d.get("trivial_note", "")),
        superseded_targets={str(k): tuple(float(x) for x in v) for k, v in superseded.items()},
        source=str(path),
    )


_CACHE: dict[tuple[str, int, int], TaskDescription | None] = {}
_LAST: list[Any] = [None, {}]  # (folders and their mtimes, catalog): records are validated by the thousand


def catalog() -> dict[str, TaskDescription]:
    """Every task's description, by name (modules in :func:`task_dirs` that define ``DESCRIPTION``).

    Re-read when a folder's listing changes, and each module when it changes (path, size, mtime).
    A malformed description raises :class:`CatalogError`; two modules with the same name: the
    first folder wins.
    """
    dirs = task_dirs()
    key = tuple((str(d), d.stat().st_mtime_ns if d.is_dir() else None) for d in dirs)
    if _LAST[0] == key:
        return dict(_LAST[1])
    out = _scan(dirs)
    _LAST[0], _LAST[1] = key, out
    return dict(out)


def _scan(dirs: list[Path]) -> dict[str, TaskDescription]:
    out: dict[str, TaskDescription] = {}
    for folder in dirs:
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*.py")):
            if path.name.startswith("_"):
                continue
            st = path.stat()
            key = (str(path), st.st_size, st.st_mtime_ns)
            if key not in _CACHE:
                _CACHE[key] = read_description(path)
            d = _CACHE[key]
            if d is not None and d.name not in out:
                out[d.name] = d
    return out


def describe(task: str) -> TaskDescription | None:
    """The description of ``task``, or None for a task no module here describes (a stranger's record)."""
    try:
        return catalog().get(task)
    except CatalogError:
        return None
