"""The task matrix: load ``suite/bench/matrix.yaml``, validate it, and expand it into cells.

A tier lists tasks, compressor entries and seeds. An entry is a spec string (the same
compressor forward and backward) or a mapping::

    - topk(ratio=0.1)                                  # forward = backward
    - {forward: quant(bits=4), backward: quant(bits=8)}
    - {both: none, dp: powersgd(rank=4), dp_size: 2}   # + cell settings
    - {forward: subspace, backward: subspace, tasks: [shakespeare]}

Entry keys besides the plan (``forward``, ``backward``, ``dp``, ``both``, ``per_boundary``):
``tasks`` (restrict the entry), and the cell settings ``stages``, ``dp_size``, ``schedule``,
``microbatches``, ``compress_warmup_steps``, ``eval_uncompressed``, ``steps``. A tier may set
the same settings for all its cells under ``settings``.

:func:`plan_cells` turns a :class:`Selection` (tier, filters, user specs from the command
line) into :class:`PlannedCell` s. Every name and parameter is checked here, before any
training; a problem raises :class:`MatrixError` with one line naming it. Two things are not
errors: a compressor that ``requires`` a model feature the task lacks makes the cell *not
applicable* (skipped, with the reason), and a plugin that fails to import fails only the
cells that need it (recorded as failed, with the import error).
"""

from __future__ import annotations

import hashlib
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml

from compressors.api import CompressorError
from suite.pipeline.config import ROLE_OF_DIRECTION, CellConfig, CompressionPlan, ConfigError

__all__ = [
    "MATRIX_PATH",
    "MatrixError",
    "Entry",
    "Tier",
    "Matrix",
    "Selection",
    "PlannedCell",
    "load_matrix",
    "parse_seeds",
    "plan_cells",
    "missing_device",
]

MATRIX_PATH = Path(__file__).with_name("matrix.yaml")
SCHEMA = "mpcbench.matrix/1"
PLAN_KEYS = ("forward", "backward", "dp", "both", "per_boundary")
# entry / tier setting -> CellConfig field
SETTING_KEYS = {
    "stages": "stages",
    "dp_size": "dp",
    "schedule": "schedule",
    "microbatches": "microbatches",
    "compress_warmup_steps": "compress_warmup_steps",
    "eval_uncompressed": "eval_uncompressed",
    "steps": "steps",
    "device": "device",  # a tier's default device (the gpu tier: cuda); --device overrides it
}
TIER_KEYS = ("description", "tasks", "seeds", "compressors", "cell_timeout_s", "settings")


class MatrixError(ConfigError):
    """The matrix file or a command-line selection is invalid (one line, names the problem)."""


@dataclass(frozen=True)
class Entry:
    """One compressor entry of a tier: a plan, optional task restriction and cell settings."""

    plan: CompressionPlan
    tasks: tuple[str, ...] | None = None
    settings: tuple[tuple[str, Any], ...] = ()  # (CellConfig field, value)


@dataclass(frozen=True)
class Tier:
    name: str
    description: str
    tasks: tuple[str, ...]
    seeds: tuple[int, ...]
    entries: tuple[Entry, ...]
    cell_timeout_s: float | None = None
    settings: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class Matrix:
    tiers: Mapping[str, Tier]
    source: str

    def tier(self, name: str) -> Tier:
        if name not in self.tiers:
            raise MatrixError(f"unknown tier {name!r}; valid tiers: {', '.join(self.tiers)}")
        return self.tiers[name]


# --------------------------------------------------------------------------- loading
def parse_seeds(value: Any, where: str = "seeds") -> tuple[int, ...]:
    """Seeds as a count (``3`` -> 0, 1, 2), a list (``[0, 4]``, ``"0,4"``) or a range (``"2:5"``)."""
    try:
        if isinstance(value, bool):
            raise ValueError
        if isinstance(value, int):
            if value < 1:
                raise ValueError
            return tuple(range(value))
        if isinstance(value, (list, tuple)):
            seeds = [int(s) if not isinstance(s, bool) and float(s) == int(s) else _bad() for s in value]
        elif isinstance(value, str):
            text = value.strip()
            if ":" in text:
                lo, hi = (int(x) for x in text.split(":"))
                seeds = list(range(lo, hi))
            elif "," in text:
                seeds = [int(x) for x in text.split(",") if x.strip()]
            else:
                return parse_seeds(int(text), where)
        else:
            raise ValueError
        if not seeds or any(s < 0 for s in seeds) or len(set(seeds)) != len(seeds):
            raise ValueError
        return tuple(seeds)
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


def _entry(raw: Any, where: str) -> Entry:
    if isinstance(raw, str):
        return Entry(CompressionPlan.from_dict(raw))
    if not isinstance(raw, dict):
        raise MatrixError(f"{where}: a compressor entry must be a spec string or a mapping, got {type(raw).__name__}")
    raw = dict(raw)
    for k in raw:
        if not isinstance(k, str):
            raise MatrixError(f"{where}: key {k!r} must be a string")
    tasks = raw.pop("tasks", None)
    if tasks is not None:
        if isinstance(tasks, str):
            tasks = [tasks]
        if not isinstance(tasks, list) or not all(isinstance(t, str) for t in tasks):
            raise MatrixError(f"{where}.tasks must be a list of task names")
        tasks = tuple(tasks)
    unknown = set(raw) - set(PLAN_KEYS) - set(SETTING_KEYS)
    if unknown:
        raise MatrixError(
            f"{where}: unknown key(s) {sorted(unknown)}; valid keys: "
            f"{', '.join([*PLAN_KEYS, 'tasks', *SETTING_KEYS])}"
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
    return Entry(plan, tasks, settings)


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
    entries = tuple(_entry(c, f"{where}.compressors[{i}]") for i, c in enumerate(comps))
    timeout = raw.get("cell_timeout_s")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0):
        raise MatrixError(f"{where}.cell_timeout_s must be a positive number of seconds, got {timeout!r}")
    settings = raw.get("settings") or {}
    if not isinstance(settings, dict):
        raise MatrixError(f"{where}.settings must be a mapping")
    desc = raw.get("description", "")
    return Tier(
        name=name,
        description=str(desc).strip(),
        tasks=tuple(tasks),
        seeds=parse_seeds(raw["seeds"], f"{where}.seeds"),
        entries=entries,
        cell_timeout_s=None if timeout is None else float(timeout),
        settings=_settings(settings, f"{where}.settings"),
    )


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


# --------------------------------------------------------------------------- selection
@dataclass(frozen=True)
class Selection:
    """What to run, from the command line (``mpcbench run`` or ``pytest suite``).

    ``compressors`` are user specs; each becomes a plan with ``forward = backward = spec``
    unless ``backward`` / ``dp`` override it. ``forward`` alone (no ``compressors``) adds one
    plan. Without user specs the tier's entries run (with ``backward`` / ``dp`` overriding
    every entry when given). ``baseline`` adds the ``none`` plan next to user specs so the
    report has something to compare with (already-stored cells are skipped anyway).
    """

    tier: str = "smoke"
    tasks: tuple[str, ...] = ()
    compressors: tuple[str, ...] = ()
    forward: str | None = None
    backward: str | None = None
    dp: str | None = None
    seeds: tuple[int, ...] | None = None
    mode: str = "single"
    device: str | None = None  # None: the tier's device setting, else cpu
    stages: int | None = None
    dp_size: int | None = None
    schedule: str | None = None
    microbatches: int | None = None
    steps: int | None = None
    plugins: tuple[str, ...] = ()
    data_dir: str | None = None
    cell_timeout_s: float | None = None
    baseline: bool = True
    matrix_path: str | None = None
    check_consistency: bool = False  # debug check of every boundary (not part of the cell key)


@dataclass(frozen=True)
class PlannedCell:
    """One cell to run. ``skip``: not applicable (reason). ``error``: fails without running."""

    config: CellConfig
    skip: str | None = None
    error: str | None = None
    test_id: str = ""

    @property
    def runnable(self) -> bool:
        return self.skip is None and self.error is None


_FAILED_PLUGINS: dict[str, str] = {}  # plugin -> one-line import error (this process)


def _plugin_module(target: str) -> str:
    """The module name ``compressors.registry.load_plugin`` imports ``target`` as."""
    if target.endswith(".py") or "/" in target:
        return "mpcbench_plugin_" + hashlib.sha1(str(Path(target).resolve()).encode()).hexdigest()[:10]
    return target


def _spec_names(spec: str) -> set[str]:
    from compressors.registry import _names_in, parse_spec

    return _names_in(parse_spec(spec))


@dataclass
class _Plugins:
    """What each ``--plugin`` registered (compressor names, task names) or why it failed."""

    provides: dict[str, set[str]] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)

    @classmethod
    def load(cls, plugins: Iterable[str]) -> "_Plugins":
        import tasks as tasks_pkg
        from compressors.registry import available, get_class, load_plugin
        from tasks import available_tasks, get_task_class

        out = cls()
        for p in plugins:
            mod = _plugin_module(p)
            if p in _FAILED_PLUGINS:
                out.failed[p] = _FAILED_PLUGINS[p]
                continue
            if mod not in sys.modules:  # import once per process: re-running a module re-registers
                try:
                    load_plugin(p)
                except CompressorError as e:
                    out.failed[p] = _FAILED_PLUGINS[p] = str(e)
                    continue

            def ours(module: str) -> bool:
                return module == mod or module.startswith(mod + ".")

            # built-in tasks are never a plugin's (and importing them all here would be slow)
            plugin_tasks = set(available_tasks()) - set(getattr(tasks_pkg, "_TASK_MODULES", {}))
            out.provides[p] = {n for n in available() if ours(get_class(n).__module__)} | {
                f"task:{t}" for t in plugin_tasks if ours(get_task_class(t).__module__)
            }
        return out

    def needed_by(self, names: set[str]) -> tuple[str, ...]:
        return tuple(p for p, provided in self.provides.items() if provided & names)


def _user_plans(sel: Selection) -> list[Entry]:
    """Plans from the command line: ``--compressor S`` (forward = backward = S unless
    ``--backward``), or ``--forward F`` (backward ``none`` unless ``--backward``)."""
    if sel.forward is not None and sel.compressors:
        raise MatrixError("give either --compressor (forward and backward) or --forward, not both")
    dp = sel.dp or "none"
    if sel.forward is not None:
        return [Entry(CompressionPlan(forward=sel.forward, backward=sel.backward or "none", dp=dp))]
    return [
        Entry(CompressionPlan(forward=s, backward=sel.backward if sel.backward is not None else s, dp=dp))
        for s in sel.compressors
    ]


def _check_roles(plan: CompressionPlan, dp_size: int, where: str) -> None:
    """Every spec must handle its direction's role (checked on an instance: wrappers take their inner's)."""
    from compressors.registry import build

    for direction in ("forward", "backward", "dp"):
        specs = [plan.spec_for(direction)] + [s for _, d, s in plan.per_boundary if d == direction]
        role = ROLE_OF_DIRECTION[direction]
        for spec in specs:
            roles = build(spec).roles
            if role not in roles:
                handled = ", ".join(sorted(r.value for r in roles)) or "nothing"
                flag = {"forward": "--forward", "backward": "--backward", "dp": "--dp"}[direction]
                raise MatrixError(
                    f"{where}: compressor {spec!r} cannot compress the {direction} direction ({role.value}); "
                    f"it handles: {handled}. Give that direction another spec (e.g. {flag} none)"
                )
    if plan.dp != "none" and dp_size < 2:
        raise MatrixError(
            f"{where}: dp compressor {plan.dp!r} needs data-parallel replicas; set dp_size >= 2 (--dp-size 2)"
        )


def _not_applicable(plan: CompressionPlan, task_cls: Any) -> str | None:
    from compressors.registry import get_class

    have = set(getattr(task_cls, "features", ()))
    for spec in sorted(set(plan.all_specs())):
        for name in sorted(_spec_names(spec)):
            missing = set(get_class(name).requires) - have
            if missing:
                return (
                    f"not applicable: {name} requires model feature(s) {', '.join(sorted(missing))} "
                    f"that task {task_cls.name} does not provide"
                )
    return None


def plan_cells(sel: Selection, matrix: Matrix | None = None) -> list[PlannedCell]:
    """Expand a selection into cells, validating everything first (raises :class:`MatrixError`)."""
    from compressors.registry import available, plugin_errors
    from tasks import TaskError, available_tasks, get_task_class

    matrix = matrix or load_matrix(sel.matrix_path)
    tier = matrix.tier(sel.tier)
    if sel.mode not in ("single", "torchrun"):
        raise MatrixError(f"unknown mode {sel.mode!r}; valid modes: single, torchrun")
    if sel.cell_timeout_s is not None and sel.cell_timeout_s <= 0:
        raise MatrixError(f"--cell-timeout must be a positive number of seconds, got {sel.cell_timeout_s!r}")
    plugins = _Plugins.load(sel.plugins)

    # tasks: the tier's, or the user's (which may come from a plugin)
    tasks = tuple(dict.fromkeys(sel.tasks)) or tier.tasks
    broken_task: dict[str, str] = {}
    for t in tasks:
        if t not in available_tasks():
            if plugins.failed:
                broken_task[t] = next(iter(plugins.failed.values()))
                continue
            raise MatrixError(f"unknown task {t!r}; valid tasks: {', '.join(available_tasks())}")
        try:
            get_task_class(t)
        except Exception as e:  # noqa: BLE001 - a task module that does not import
            raise MatrixError(f"task {t!r} cannot be loaded: {type(e).__name__}: {' '.join(str(e).split())}") from None

    # compressor entries: user specs (+ baseline) or the tier's
    user = _user_plans(sel)
    if user:
        entries = ([Entry(CompressionPlan())] if sel.baseline else []) + user
        for e in tier.entries:  # a user spec equal to a tier entry keeps the entry's settings
            for i, u in enumerate(entries):
                if _same_plan(u.plan, e.plan):
                    entries[i] = Entry(e.plan, None, e.settings)
    else:
        entries = list(tier.entries)
        if sel.backward is not None or sel.dp is not None:
            entries = [
                Entry(
                    replace(
                        e.plan,
                        backward=sel.backward if sel.backward is not None else e.plan.backward,
                        dp=sel.dp if sel.dp is not None else e.plan.dp,
                    ),
                    e.tasks,
                    e.settings,
                )
                for e in entries
            ]
    seeds = sel.seeds if sel.seeds is not None else tier.seeds
    timeout = sel.cell_timeout_s if sel.cell_timeout_s is not None else tier.cell_timeout_s
    known = set(available())
    entry_point_errors = plugin_errors()

    cells: list[PlannedCell] = []
    seen: set[str] = set()
    for task in tasks:
        for ei, entry in enumerate(entries):
            if entry.tasks is not None and task not in entry.tasks:
                continue
            where = f"tier {tier.name}, task {task}, compressor {entry.plan.label}"
            # names used by the entry; unknown ones may belong to a broken plugin
            try:
                names = set().union(*(_spec_names(s) for s in entry.plan.all_specs()))
            except CompressorError as e:
                raise MatrixError(f"{where}: {e}") from None
            broken = broken_task.get(task)
            for n in sorted(names - known):
                if n in entry_point_errors:
                    broken = broken or entry_point_errors[n]
                elif plugins.failed:
                    broken = broken or next(iter(plugins.failed.values()))
            needed = plugins.needed_by(names | {f"task:{task}"})
            settings = dict(tier.settings) | dict(entry.settings)
            for k, v in (
                ("stages", sel.stages),
                ("dp", sel.dp_size),
                ("schedule", sel.schedule),
                ("microbatches", sel.microbatches),
                ("steps", sel.steps),
                ("device", sel.device),
            ):
                if v is not None:
                    settings[k] = v
            # data parallelism needs one process per replica: such cells always go through torchrun
            mode = "torchrun" if int(settings.get("dp", 1) or 1) > 1 else sel.mode
            for seed in seeds:
                cfg = CellConfig(
                    task=task,
                    tier=tier.name,
                    seed=seed,
                    plan=entry.plan,
                    mode=mode,
                    plugins=needed,
                    data_dir=sel.data_dir,
                    time_limit_s=timeout,
                    check_consistency=sel.check_consistency,
                    **settings,
                )
                if broken:
                    cells.append(PlannedCell(cfg, error=broken))
                    continue
                try:
                    # plugins are already imported in this process: validate without re-importing
                    valid = replace(replace(cfg, plugins=()).validate(), plugins=cfg.plugins)
                    task_cls = get_task_class(task)
                    _check_roles(valid.plan, valid.dp, where)
                except MatrixError:
                    raise  # already names the cell
                except (ConfigError, CompressorError, TaskError) as e:
                    raise MatrixError(f"{where}: {e}") from None
                skip = _not_applicable(valid.plan, task_cls)
                if valid.key() in seen:
                    continue
                seen.add(valid.key())
                cells.append(PlannedCell(valid, skip=skip))
    return _with_test_ids(cells)


def _same_plan(a: CompressionPlan, b: CompressionPlan) -> bool:
    try:
        return a.canonical() == b.canonical()
    except ConfigError:
        return False


def _with_test_ids(cells: list[PlannedCell]) -> list[PlannedCell]:
    """Readable unique ids: ``cifar10-topk(ratio=0.1)-seed0`` (+ the key when two cells share one)."""
    counts: dict[str, int] = {}
    for c in cells:
        counts[c.config.cell_id] = counts.get(c.config.cell_id, 0) + 1
    out = []
    for c in cells:
        tid = c.config.cell_id
        if counts[tid] > 1:
            tid = f"{tid}-{c.config.key()[:8]}"
        out.append(replace(c, test_id=tid))
    return out


def missing_device(cell: PlannedCell) -> str | None:
    """Why ``cell`` cannot run on this machine's hardware (it wants CUDA and there is none), or None.

    Checked by the runners before starting cells, so a GPU tier on a CPU-only machine gives
    one clear line instead of one failed record per cell."""
    if cell.config.device != "cuda":
        return None
    import torch

    if torch.cuda.is_available():
        return None
    return f"tier {cell.config.tier} runs on cuda but no CUDA device is available here; pass --device cpu to run it on the CPU (slowly)"
