"""Planning: a :class:`~suite.bench.options.Selection` and the matrix file -> the cells to run.

:func:`plan_cells` turns a selection (tier, filters, user specs from the command line) into
:class:`PlannedCell` s. Every name and parameter is checked here, before any training; a
problem raises :class:`MatrixError` with one line naming it. Two things are not errors: a
compressor that ``requires`` a model feature the task lacks makes the cell *not applicable*
(skipped, with the reason), and a plugin that fails to import fails only the cells that need
it (recorded as failed, with the import error).

The matrix file itself is read by :mod:`suite.bench.matrix_file`, the options by
:mod:`suite.bench.options`, the plugins by :mod:`suite.bench.plugins`; their public names are
re-exported here for the runners.
"""

from __future__ import annotations

import contextlib
import itertools
from dataclasses import dataclass, replace

from compressors.api import CompressorError, did_you_mean
from compressors.spec import parse_spec, spec_names
from suite.pipeline.config import MODES, CellConfig, CompressionPlan, ConfigError

from .matrix_file import MATRIX_PATH, Entry, Matrix, MatrixError, Tier, load_matrix, parse_seeds
from .options import MAX_CELLS, RUN_OPTIONS, Selection, check_cell_timeout
from .plugins import Plugins

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

# the options that override one CellConfig field in every selected cell (--stages, --device, ...)
CELL_OPTIONS = tuple((o.field, o.cell) for o in RUN_OPTIONS if o.field is not None and o.cell is not None)


@dataclass(frozen=True)
class PlannedCell:
    """One cell to run. ``skip``: not applicable (reason). ``error``: fails without running.
    ``round``: its place in the breadth-first order (0: seed 0 of the headline entries)."""

    config: CellConfig
    skip: str | None = None
    error: str | None = None
    test_id: str = ""
    round: int = 0

    @property
    def runnable(self) -> bool:
        return self.skip is None and self.error is None


def _user_plans(sel: Selection) -> list[Entry]:
    """Plans from the command line: ``--compressor S`` (forward = backward = S unless
    ``--backward``), or ``--forward F`` (backward ``none`` unless ``--backward``)."""
    if sel.forward is not None and sel.compressors:
        raise MatrixError("give either --compressor (forward and backward) or --forward, not both")
    dp = sel.dp or "none"
    tp = {"tp_forward": sel.tp_forward or "none", "tp_backward": sel.tp_backward or "none"}
    if sel.forward is not None:
        return [Entry(CompressionPlan(forward=sel.forward, backward=sel.backward or "none", dp=dp, **tp))]
    return [
        Entry(CompressionPlan(forward=s, backward=sel.backward if sel.backward is not None else s, dp=dp, **tp))
        for s in sel.compressors
    ]


def _spec_names(spec: str) -> set[str]:
    """Names in a spec (the parser caches per text: resolving the plan later does not parse again)."""
    return spec_names(parse_spec(spec))


def _submitted(names: set[str]) -> bool:
    """Whether any of these registered compressors comes from a plugin (not ``compressors.*``)."""
    from compressors.registry import get_class

    return any(not get_class(n).__module__.startswith("compressors.") for n in names)


def plan_cells(sel: Selection, matrix: Matrix | None = None) -> list[PlannedCell]:
    """Expand a selection into cells, validating everything first (raises :class:`MatrixError`)."""
    from compressors.registry import available, plugin_errors
    from tasks import TaskError, available_tasks, get_task_class

    matrix = matrix or load_matrix(sel.matrix_path)
    tier = matrix.tier(sel.tier)
    if sel.mode not in ("auto", *MODES):
        raise MatrixError(f"unknown mode {sel.mode!r}; valid modes: auto, {', '.join(MODES)}")
    if sel.cell_timeout_s is not None:
        check_cell_timeout(sel.cell_timeout_s, "--cell-timeout")  # also for a Selection built by hand
    plugins = Plugins.load(sel.plugins)

    # tasks: the tier's, or the user's (which may come from a plugin)
    tasks = tuple(dict.fromkeys(sel.tasks)) or tier.tasks
    broken_task: dict[str, str] = {}
    for t in tasks:
        if t not in available_tasks():
            if plugins.failed:
                broken_task[t] = next(iter(plugins.failed.values()))
                continue
            raise MatrixError(
                f"unknown task {t!r}{did_you_mean(t, available_tasks())}; valid tasks: {', '.join(available_tasks())}"
            )
        try:
            get_task_class(t)
        except Exception as e:  # noqa: BLE001 - a task module that does not import
            raise MatrixError(f"task {t!r} cannot be loaded: {type(e).__name__}: {' '.join(str(e).split())}") from None

    # compressor entries: user specs (+ baseline) or the tier's
    user = _user_plans(sel)
    if sel.core and (user or not tier.rounds):
        raise MatrixError(
            "--core runs the tier's listed rounds; it cannot be combined with --compressor/--forward"
            if user
            else f"tier {tier.name} lists no rounds, so it has no core matrix; drop --core"
        )
    if user:
        entries = ([Entry(CompressionPlan())] if sel.baseline else []) + user
        # a user spec equal to a tier entry keeps that entry's settings (its budget), the first such
        # entry only, and never a tensor-parallel group's layout: `--compressor none` is not a tp=2 cell
        # (`--tp N` asks for one)
        matched: set[int] = set()
        for listed in tier.entries:
            if "tp" in listed.settings:
                continue
            for i, u in enumerate(entries):
                if i not in matched and _same_plan(u.plan, listed.plan):
                    entries[i] = Entry(listed.plan, None, listed.settings)
                    matched.add(i)
    else:
        entries = list(tier.entries)
        if any(v is not None for v in (sel.backward, sel.dp, sel.tp_forward, sel.tp_backward)):
            entries = [
                Entry(
                    replace(
                        e.plan,
                        backward=sel.backward if sel.backward is not None else e.plan.backward,
                        dp=sel.dp if sel.dp is not None else e.plan.dp,
                        tp_forward=sel.tp_forward if sel.tp_forward is not None else e.plan.tp_forward,
                        tp_backward=sel.tp_backward if sel.tp_backward is not None else e.plan.tp_backward,
                    ),
                    e.tasks,
                    e.settings,
                    e.except_tasks,
                )
                for e in entries
            ]
    if sel.core:
        core_names = {name for r in tier.rounds for name in r}
        entries = [e for e in entries if e.name in core_names]
    seeds = sel.seeds if sel.seeds is not None else (tier.seeds[:1] if sel.core else tier.seeds)
    timeout = sel.cell_timeout_s if sel.cell_timeout_s is not None else tier.cell_timeout_s
    if len(tasks) * len(entries) * len(seeds) > MAX_CELLS:  # before building any of them
        raise MatrixError(
            f"{len(tasks)} task(s) x {len(entries)} compressor entries x {len(seeds)} seed(s) is more than "
            f"{MAX_CELLS} cells; select fewer (--task, --compressor, --seeds) or split the run"
        )
    known = set(available())
    entry_point_errors = plugin_errors()

    cells: list[PlannedCell] = []
    seen: set[str] = set()
    # the none baseline added next to user specs runs in each mode its specs run in: a plugin's cells
    # go through torchrun, and a baseline in one process would not be theirs to compare with
    modes: set[str] = set()
    for spec_entry in entries[1:] if user and sel.baseline else []:
        with contextlib.suppress(CompressorError):  # a bad spec is reported with its place below
            modes.add(_mode(sel, spec_entry, tier, known))
    for task in tasks:
        for n_entry, entry in enumerate(entries):
            if not entry.runs_on(task):
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
            for field, cell_field in CELL_OPTIONS:
                if (v := getattr(sel, field)) is not None:
                    settings[cell_field] = v
            entry_modes = sorted(modes) if (user and sel.baseline and n_entry == 0 and modes) else []
            for (seed_index, seed), mode in itertools.product(
                enumerate(seeds), entry_modes or [_mode(sel, entry, tier, known)]
            ):
                cfg = CellConfig(
                    task=task,
                    tier=tier.task_tier,
                    seed=seed,
                    plan=entry.plan,
                    mode=mode,
                    plugins=needed,
                    data_dir=sel.data_dir,
                    time_limit_s=timeout,
                    check_consistency=sel.check_consistency,
                    **settings,
                )
                round_ = seed_index if user else tier.round_of(entry, seed_index)
                if broken:
                    cells.append(PlannedCell(cfg, error=broken, round=round_))
                    continue
                try:
                    # the one check of the plan (roles on instances, features, overrides); plugins are
                    # already imported in this process, so resolve without importing them again
                    valid, resolved = replace(cfg, plugins=()).resolve()
                except (ConfigError, CompressorError, TaskError) as e:
                    raise MatrixError(f"{where}: {e}") from None
                valid = replace(valid, plugins=cfg.plugins)
                if valid.key() in seen:
                    continue
                seen.add(valid.key())
                cells.append(PlannedCell(valid, skip=resolved.not_applicable, round=round_))
    # breadth-first: every task's round 0 (seed 0 of the headline entries) before any round 1 cell, so a
    # ranking across tasks exists minutes in; within a round, the tier's task order, then its entry order
    cells.sort(key=lambda c: c.round)
    return _with_test_ids(cells)


def _mode(sel: Selection, entry: Entry, tier: Tier, known: set[str]) -> str:
    """``single`` or ``torchrun`` for ``entry``'s cells: torchrun where several processes are needed or a
    submitted compressor runs (unless ``--mode`` says otherwise)."""
    from compressors.registry import compressor_names

    settings = dict(tier.settings) | dict(entry.settings)
    for field, cell_field in CELL_OPTIONS:
        if (v := getattr(sel, field)) is not None:
            settings[cell_field] = v
    # data parallelism, several hosts and emulated links need one process per stage / replica: torchrun
    multi = int(settings.get("dp", 1) or 1) > 1 or int(settings.get("nnodes", 1) or 1) > 1 or settings.get("link")
    # a submitted compressor's two ends run in separate processes unless a mode was asked for:
    # in one process the receiver could reach the sender's objects (docs/reliability.md)
    mode = (
        "torchrun"
        # every compressor the plan builds, also a bare word a wrapper takes (``ef(mycomp)``)
        if multi
        or (sel.mode == "auto" and _submitted(set().union(*map(compressor_names, entry.plan.all_specs())) & known))
        else sel.mode
    )
    return "single" if mode == "auto" else mode


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
    one clear line instead of one failed record per cell. Emulated links (``--link``) need root and
    ``ip``/``tc`` (``suite.pipeline.netns.missing_requirements``)."""
    if cell.config.link is not None:
        from suite.pipeline.netns import missing_requirements

        if (problem := missing_requirements()) is not None:
            return problem
    if cell.config.device != "cuda":
        return None
    import torch

    if torch.cuda.is_available():
        return None
    return f"tier {cell.config.tier} runs on cuda but no CUDA device is available here; pass --device cpu to run it on the CPU (slowly)"
