"""The matrix file: read ``suite/bench/matrix.yaml`` (or another), validate its structure.

A tier lists tasks, compressor entries and seeds. An entry is a spec string (the same
compressor forward and backward) or a mapping::

    - topk(ratio=0.1)                                  # forward = backward
    - {forward: quant(bits=4), backward: quant(bits=8)}
    - {both: none, dp: powersgd(rank=4), dp_size: 2}   # + cell settings
    - {forward: subspace, backward: subspace, tasks: [shakespeare]}
    - {entries: *shared_list, except_tasks: [cola, stsb]}   # a group: these entries, not on these tasks

Entry keys besides the plan (``forward``, ``backward``, ``dp``, ``both``, ``per_boundary``,
``tp_forward``, ``tp_backward``): ``tasks`` (only these tasks) or ``except_tasks`` (all but
these: a task added with ``--task``, a plugin's, still gets the entry), and the cell settings of
:data:`SETTING_KEYS` (``tp``: tensor-parallel ranks per stage). A tier may set
the same settings for all its cells under ``settings``. A *group* (``entries`` with ``tasks``
or ``except_tasks``, nothing else) applies that restriction to each of a list of entries, e.g.
a YAML alias of a shared list; an entry's own restriction applies too. Task names in these
lists must be the tier's (a misspelt one would silently add or drop cells). Names (tasks,
compressors) are resolved later, by :func:`suite.bench.matrix.plan_cells`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping

import yaml

from compressors.api import did_you_mean
from suite.pipeline.config import CompressionPlan, ConfigError

__all__ = ["MATRIX_PATH", "MatrixError", "Entry", "Tier", "Matrix", "load_matrix", "parse_seeds", "SETTING_KEYS"]

MATRIX_PATH = Path(__file__).with_name("matrix.yaml")
SCHEMA = "mpcbench.matrix/1"
PLAN_KEYS = ("forward", "backward", "dp", "both", "per_boundary", "tp_forward", "tp_backward")
# entry / tier setting -> CellConfig field
SETTING_KEYS = {
    "stages": "stages",
    "dp_size": "dp",
    "tp": "tp",  # tensor-parallel ranks per stage
    "schedule": "schedule",
    "microbatches": "microbatches",
    "compress_warmup_steps": "compress_warmup_steps",
    "eval_uncompressed": "eval_uncompressed",
    "steps": "steps",
    "sync": "sync",  # data-parallel synchronization: step or outer(h=8, ...) (suite.pipeline.sync)
    "optimizer": "optimizer",  # None: the task's own; sgd(momentum=M, clip=C) (suite.pipeline.optimizer)
    "lr": "lr",  # the cell's peak learning rate (None: the tier's)
    "device": "device",  # a tier's default device (the gpu tier: cuda); --device overrides it
    "model_size": "model_size",  # one of the task's named model sizes (the scale ladder)
}
TIER_KEYS = ("description", "tasks", "seeds", "compressors", "cell_timeout_s", "settings", "rounds", "budget")


class MatrixError(ConfigError):
    """The matrix file or a command-line selection is invalid (one line, names the problem)."""


@dataclass(frozen=True)
class Entry:
    """One compressor entry of a tier: a plan, optional task restriction and cell settings."""

    plan: CompressionPlan
    tasks: tuple[str, ...] | None = None  # only these tasks (None: every task)
    settings: tuple[tuple[str, Any], ...] = ()  # (CellConfig field, value)
    except_tasks: tuple[str, ...] = ()  # never these tasks

    def runs_on(self, task: str) -> bool:
        return (self.tasks is None or task in self.tasks) and task not in self.except_tasks

    @property
    def name(self) -> str:
        """The plan's label and its cell settings: ``topk``, ``none [tp=2]`` (how ``rounds`` name entries)."""
        extra = ", ".join(f"{k}={v}" for k, v in self.settings)
        return f"{self.plan.label} [{extra}]" if extra else self.plan.label


@dataclass(frozen=True)
class Tier:
    name: str
    description: str
    tasks: tuple[str, ...]
    seeds: tuple[int, ...]
    entries: tuple[Entry, ...]
    cell_timeout_s: float | None = None
    settings: tuple[tuple[str, Any], ...] = ()
    # the first rounds of the breadth-first order: entry labels, seed 0 of each round on every task
    # (then the rest of seed 0, then one round per further seed); ``--core`` runs these rounds only
    rounds: tuple[tuple[str, ...], ...] = ()
    # the task tier whose budget the cells train on (``budget: quick``: a matrix tier of quick-tier
    # cells, e.g. the scale ladder); None: the task tier of the same name
    budget: str | None = None

    @property
    def task_tier(self) -> str:
        """The task tier every cell of this matrix tier runs (``CellConfig.tier``)."""
        return self.budget or self.name

    def round_of(self, entry: Entry, seed_index: int) -> int:
        """The round (0-based) of a cell: its entry's listed round at the first seed, else the round
        after the listed ones (the rest of the first seed), then one per further seed."""
        if seed_index == 0:
            for i, labels in enumerate(self.rounds):
                if entry.name in labels:
                    return i
            return len(self.rounds)
        return len(self.rounds) + seed_index


@dataclass(frozen=True)
class Matrix:
    tiers: Mapping[str, Tier]
    source: str

    def tier(self, name: str) -> Tier:
        if name not in self.tiers:
            raise MatrixError(
                f"unknown tier {name!r}{did_you_mean(name, self.tiers)}; valid tiers: {', '.join(self.tiers)}"
            )
        return self.tiers[name]


# --------------------------------------------------------------------------- loading
def parse_seeds(value: Any, where: str = "seeds") -> tuple[int, ...]:
    """Seeds as a count (``3`` -> 0, 1, 2), a list (``[0, 4]``, ``"0,4"``) or a range (``"2:5"``);
    at most ``MAX_SEEDS`` of them, each at most ``MAX_SEED`` (checked before any list is built)."""
    from suite.results.records import MAX_SEED

    from .options import MAX_SEEDS

    def bounded(n: int) -> None:
        if n > MAX_SEEDS:
            raise MatrixError(f"{where}: {value!r} asks for {n} seeds; at most {MAX_SEEDS} per run (split the run)")

    try:
        if isinstance(value, bool):
            raise ValueError
        if isinstance(value, int):
            if value < 1:
                raise ValueError
            bounded(value)
            return tuple(range(value))
        if isinstance(value, (list, tuple)):
            bounded(len(value))
            seeds = [int(s) if not isinstance(s, bool) and float(s) == int(s) else _bad() for s in value]
        elif isinstance(value, str):
            text = value.strip()
            if len(text) > 20 * MAX_SEEDS:
                bounded(text.count(",") + 1)
            if ":" in text:
                lo, hi = (int(x) for x in text.split(":"))
                bounded(hi - lo)
                seeds = list(range(lo, hi))
            elif "," in text:
                seeds = [int(x) for x in text.split(",") if x.strip()]
            else:
                n = int(text)
                if n < 1:
                    raise ValueError
                bounded(n)
                return tuple(range(n))
        else:
            raise ValueError
        if not seeds or any(s < 0 for s in seeds) or len(set(seeds)) != len(seeds):
            raise ValueError
        bounded(len(seeds))
        if max(seeds) > MAX_SEED:
            raise MatrixError(f"{where}: seed {max(seeds)} is over the limit of {MAX_SEED}")
        return tuple(seeds)
    except MatrixError:
        raise
    except (ValueError, TypeError):
        raise MatrixError(
            f"{where}: {value!r} is not a seed count (3 = seeds 0,1,2), a list (0,4,7) or a range (2:5) "
            "of distinct non-negative integers"
        ) from None


def _bad() -> int:
    raise ValueError


def _settings(d: Mapping[str, Any], where: str) -> tuple[tuple[str, Any], ...]:
    out = []
    for k, v in d.items():
        if k not in SETTING_KEYS:
            raise MatrixError(f"{where}: unknown setting {k!r}; valid settings: {', '.join(SETTING_KEYS)}")
        out.append((SETTING_KEYS[k], v))
    return tuple(out)


RESTRICT_KEYS = ("tasks", "except_tasks")


def _restriction(
    raw: dict[str, Any], where: str, tier_tasks: tuple[str, ...] | None
) -> tuple[tuple[str, ...] | None, tuple[str, ...]]:
    """Pop ``tasks`` / ``except_tasks`` from an entry or group: (only these or None, never these)."""
    if all(k in raw for k in RESTRICT_KEYS):
        raise MatrixError(f"{where}: give 'tasks' (only these) or 'except_tasks' (all but these), not both")
    lists: dict[str, tuple[str, ...]] = {}
    for key in RESTRICT_KEYS:
        if key not in raw:
            continue
        value = raw.pop(key)
        names = [value] if isinstance(value, str) else value
        if not isinstance(names, list) or not names or not all(isinstance(t, str) for t in names):
            raise MatrixError(f"{where}.{key} must be a non-empty list of task names")
        stray = [t for t in names if tier_tasks is not None and t not in tier_tasks]
        if stray and tier_tasks is not None:
            raise MatrixError(
                f"{where}.{key}: {', '.join(map(repr, stray))} not among the tier's tasks ({', '.join(tier_tasks)}); "
                "add it to the tier's tasks or fix the name"
            )
        lists[key] = tuple(names)
    return lists.get("tasks"), lists.get("except_tasks", ())


def _entries(raw: Any, where: str, tier_tasks: tuple[str, ...]) -> list[Entry]:
    """One entry, or a group's entries (``{entries: [...], tasks: [...]}``) with the group's restriction."""
    if not (isinstance(raw, dict) and "entries" in raw):
        return [_entry(raw, where, tier_tasks)]
    raw = dict(raw)
    members = raw.pop("entries")
    only, never = _restriction(raw, where, tier_tasks)
    if raw:
        raise MatrixError(
            f"{where}: unknown key(s) {sorted(map(str, raw))} in a group; a group has only 'entries' and "
            "'tasks' or 'except_tasks' (put settings on its entries)"
        )
    if only is None and not never:
        raise MatrixError(f"{where}: a group needs 'tasks' or 'except_tasks' (list the entries directly otherwise)")
    if not isinstance(members, list) or not members:
        raise MatrixError(f"{where}.entries must be a non-empty list of entries")
    out = []
    for i, m in enumerate(members):
        if isinstance(m, dict) and "entries" in m:
            raise MatrixError(f"{where}.entries[{i}]: groups do not nest; list the entries in one group")
        e = _entry(m, f"{where}.entries[{i}]", tier_tasks)
        tasks = only if e.tasks is None else e.tasks if only is None else tuple(t for t in e.tasks if t in only)
        out.append(replace(e, tasks=tasks, except_tasks=tuple(dict.fromkeys(e.except_tasks + never))))
    return out


def _entry(raw: Any, where: str, tier_tasks: tuple[str, ...] | None = None) -> Entry:
    """One entry (its task names checked against ``tier_tasks`` when given)."""
    if isinstance(raw, str):
        return Entry(CompressionPlan.from_dict(raw))
    if not isinstance(raw, dict):
        raise MatrixError(f"{where}: a compressor entry must be a spec string or a mapping, got {type(raw).__name__}")
    raw = dict(raw)
    for k in raw:
        if not isinstance(k, str):
            raise MatrixError(f"{where}: key {k!r} must be a string")
    tasks, except_tasks = _restriction(raw, where, tier_tasks)
    unknown = set(raw) - set(PLAN_KEYS) - set(SETTING_KEYS)
    if unknown:
        raise MatrixError(
            f"{where}: unknown key(s) {sorted(unknown)}; valid keys: "
            f"{', '.join([*PLAN_KEYS, *RESTRICT_KEYS, *SETTING_KEYS])}"
        )
    settings = _settings({k: v for k, v in raw.items() if k in SETTING_KEYS}, where)
    plan_d = {k: v for k, v in raw.items() if k in PLAN_KEYS}
    for k, v in plan_d.items():
        if k != "per_boundary" and not isinstance(v, str):
            raise MatrixError(f"{where}.{k}: a spec must be a string, got {type(v).__name__} ({v!r})")
    if not plan_d:
        raise MatrixError(f"{where}: the entry names no compressor (set forward/backward/dp or both)")
    try:
        plan = CompressionPlan.from_dict(plan_d)
    except (ConfigError, ValueError, TypeError) as e:
        raise MatrixError(f"{where}: {e}") from None
    return Entry(plan, tasks, settings, except_tasks)


def _tier(name: str, raw: Any, where: str) -> Tier:
    if not isinstance(raw, dict):
        raise MatrixError(f"{where}: a tier must be a mapping with keys {', '.join(TIER_KEYS)}")
    unknown = set(raw) - set(TIER_KEYS)
    if unknown:
        raise MatrixError(f"{where}: unknown key(s) {sorted(map(str, unknown))}; valid keys: {', '.join(TIER_KEYS)}")
    for k in ("tasks", "seeds", "compressors"):
        if k not in raw:
            raise MatrixError(f"{where}: missing {k!r}")
    tasks = raw["tasks"]
    if not isinstance(tasks, list) or not tasks or not all(isinstance(t, str) for t in tasks):
        raise MatrixError(f"{where}.tasks must be a non-empty list of task names")
    comps = raw["compressors"]
    if not isinstance(comps, list) or not comps:
        raise MatrixError(f"{where}.compressors must be a non-empty list of entries")
    entries = tuple(e for i, c in enumerate(comps) for e in _entries(c, f"{where}.compressors[{i}]", tuple(tasks)))
    timeout = raw.get("cell_timeout_s")
    if timeout is not None:
        from .options import check_cell_timeout

        check_cell_timeout(timeout, f"{where}.cell_timeout_s")
    settings = raw.get("settings") or {}
    if not isinstance(settings, dict):
        raise MatrixError(f"{where}.settings must be a mapping")
    desc = raw.get("description", "")
    rounds = _rounds(raw.get("rounds") or [], entries, f"{where}.rounds")
    budget = raw.get("budget")
    if budget is not None and (not isinstance(budget, str) or not budget):
        raise MatrixError(f"{where}.budget must be a task tier's name (e.g. quick), got {budget!r}")
    return Tier(
        name=name,
        description=str(desc).strip(),
        tasks=tuple(tasks),
        seeds=parse_seeds(raw["seeds"], f"{where}.seeds"),
        entries=entries,
        cell_timeout_s=None if timeout is None else float(timeout),
        settings=_settings(settings, f"{where}.settings"),
        rounds=rounds,
        budget=budget,
    )


def _rounds(raw: Any, entries: tuple[Entry, ...], where: str) -> tuple[tuple[str, ...], ...]:
    """A tier's ``rounds``: a list of lists of entry labels, each label an entry of the tier, listed once."""
    if not isinstance(raw, list) or not all(isinstance(r, list) and r for r in raw):
        raise MatrixError(f"{where} must be a list of non-empty lists of entry labels, e.g. [[none, topk], [quant]]")
    labels = {e.name for e in entries}
    seen: set[str] = set()
    for r in raw:
        for label in r:
            if not isinstance(label, str) or label not in labels:
                raise MatrixError(
                    f"{where}: {label!r} is not an entry of the tier{did_you_mean(str(label), labels)}; "
                    f"entries: {', '.join(sorted(labels))}"
                )
            if label in seen:
                raise MatrixError(f"{where}: {label!r} is listed in two rounds")
            seen.add(label)
    return tuple(tuple(r) for r in raw)


def load_matrix(path: str | Path | None = None) -> Matrix:
    """Read and structurally validate a matrix file (names are resolved in :func:`plan_cells`)."""
    p = Path(path) if path else MATRIX_PATH
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise MatrixError(f"cannot read matrix file {p}: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise MatrixError(f"cannot read matrix file {p}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or type(e).__name__
        raise MatrixError(f"{p}: malformed YAML{at}: {problem}") from None
    if not isinstance(raw, dict):
        raise MatrixError(f"{p}: the matrix must be a mapping with 'schema' and 'tiers'")
    if raw.get("schema") != SCHEMA:
        raise MatrixError(f"{p}: 'schema' must be {SCHEMA!r}, got {raw.get('schema')!r}")
    unknown = set(raw) - {"schema", "tiers", "defaults"}
    if unknown:
        raise MatrixError(f"{p}: unknown top-level key(s) {sorted(map(str, unknown))}; valid: schema, tiers, defaults")
    tiers_raw = raw.get("tiers")
    if not isinstance(tiers_raw, dict) or not tiers_raw:
        raise MatrixError(f"{p}: 'tiers' must map tier names to tiers")
    tiers = {str(n): _tier(str(n), t, f"{p.name}: tiers.{n}") for n, t in tiers_raw.items()}
    return Matrix(tiers=tiers, source=str(p))
