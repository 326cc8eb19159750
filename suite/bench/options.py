"""The run options, declared once: ``mpcbench run``, ``pytest suite`` and :class:`Selection` come from this table.

Each :class:`Option` row is one command-line option. :func:`add_to_argparse` adds the rows
to ``mpcbench run``; :func:`add_to_pytest` adds the same rows to pytest as
``--mpcbench-<name>`` (the plugin, in every pytest session of the environment), and
:func:`add_short_pytest_aliases` as ``--<name>`` too (this checkout's ``conftest.py`` only); :class:`Selection` (what to run) has one field per row that
has a ``field``; :func:`selection_from` turns either front end's parsed values into it.

To add an option, add one row:

- a cell setting (a ``CellConfig`` field every selected cell gets), e.g.
  ``Option("--warmup", "compress_warmup_steps", int, help=..., cell="compress_warmup_steps")``:
  the planner applies ``cell`` options generically, nothing else changes;
- a selection filter: a row with ``field``, then read ``sel.<field>`` in the planner;
- a front-end switch (``--dry-run``): a row with ``field=None``, read by the front ends.

Allowed values come from the registries they belong to (:class:`Choices`, read on first use
so ``--help`` and pytest start-up do not import torch). Tiers are checked against the chosen
matrix file by the planner (``--matrix`` may name another one).
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from suite.results import DEFAULT_STORE
from suite.schedules import DEFAULT_SCHEDULE

__all__ = [
    "Choices",
    "Option",
    "RUN_OPTIONS",
    "Selection",
    "selection_from",
    "add_to_argparse",
    "add_to_pytest",
    "add_short_pytest_aliases",
    "pytest_flag",
    "values_from_pytest",
    "PYTEST_DEST_PREFIX",
    "DEFAULT_STORE",
]

PYTEST_DEST_PREFIX = "mpcbench_"  # pytest's namespace is shared with other plugins
PYTEST_PREFIX = "--mpcbench-"  # the plugin's spelling of every option (pytest_flag)
# Bounds on what one command may ask for (each refused with one line before anything runs):
MAX_SEEDS = 1000  # seeds per run (a seed itself is at most suite.results.records.MAX_SEED)
MAX_CELLS = 10_000  # cells one run plans (the full matrix is a few hundred)
MAX_CELL_TIMEOUT_S = 7 * 24 * 3600.0  # a finite limit: nan or inf would silently mean "no limit"


class Choices:
    """Allowed values read from their registry on first use (``in``, iteration, ``%(choices)s`` in help)."""

    def __init__(self, load: Callable[[], Any]) -> None:
        self._load = load
        self._values: tuple[str, ...] | None = None

    def values(self) -> tuple[str, ...]:
        if self._values is None:
            self._values = tuple(self._load())
        return self._values

    def __contains__(self, value: object) -> bool:
        return value in self.values()

    def __iter__(self) -> Iterator[str]:
        return iter(self.values())

    def __len__(self) -> int:
        return len(self.values())


def _schedules() -> tuple[str, ...]:
    from suite.schedules import SCHEDULES  # the schedule registry (name -> ScheduleKind)

    return tuple(SCHEDULES)


def _modes() -> tuple[str, ...]:
    from suite.pipeline.config import MODES

    return ("auto", *MODES)


def _devices() -> tuple[str, ...]:
    from suite.pipeline.config import DEVICES

    return DEVICES


def _path(value: str, base: Path) -> str:
    """A path relative to where the command started, made absolute (cells run elsewhere)."""
    return str((base / value).resolve())


def _plugin(value: str, base: Path) -> str:
    """A ``.py`` file or a path is made absolute; a module name stays a module name."""
    return _path(value, base) if (value.endswith(".py") or "/" in value) else value


@dataclass(frozen=True)
class Option:
    """One option of ``mpcbench run`` and ``pytest suite``.

    ``field``: the :class:`Selection` field it fills (None: a front-end switch). ``type``:
    ``str``, ``int``, ``float`` or ``bool`` (a flag). ``repeat``: may be given more than once
    (a tuple). ``convert(value, base)`` turns the given value into the field's (``base``: the
    directory relative paths start from). ``field_default``: the field's default when it
    differs from the option's (``--no-baseline`` fills ``baseline``). ``cell``: the
    ``CellConfig`` field the value overrides in every selected cell.
    """

    flag: str
    field: str | None
    type: type = str
    help: str = ""
    default: Any = None
    choices: Choices | None = None
    repeat: bool = False
    convert: Callable[[Any, Path], Any] | None = None
    field_default: Any = None  # None: the option's default (False for a flag)
    cell: str | None = None
    metavar: str | None = None

    @property
    def dest(self) -> str:
        """argparse's name for the value (``--cell-timeout`` -> ``cell_timeout``)."""
        return self.flag[2:].replace("-", "_")

    def add_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``add_argument`` / pytest's ``addoption`` (without ``dest``)."""
        if self.type is bool:
            return {"action": "store_true", "default": False, "help": self.help}
        kw: dict[str, Any] = {"default": [] if self.repeat else self.default, "help": self.help}
        if self.repeat:
            kw["action"] = "append"
        if self.type is not str:
            kw["type"] = self.type
        if self.choices is not None:
            # an explicit metavar: argparse would otherwise read the choices when the option is added
            kw["choices"] = self.choices
            kw["metavar"] = self.metavar or self.dest.upper()
        elif self.metavar:
            kw["metavar"] = self.metavar
        return kw

    def to_field(self, value: Any, base: Path) -> Any:
        if self.repeat:
            return tuple(self.convert(v, base) if self.convert else v for v in value)
        if value is None or self.convert is None:
            return value
        return self.convert(value, base)


def _not(value: bool, base: Path) -> bool:
    return not value


def _seeds(value: str, base: Path) -> tuple[int, ...]:
    from .matrix_file import parse_seeds  # here, not at the top: the matrix file's module imports torch

    return parse_seeds(value, "--seeds")


def _cell_timeout(value: float, base: Path) -> float:
    return check_cell_timeout(value, "--cell-timeout")


def check_cell_timeout(value: Any, where: str) -> float:
    """A per-cell time limit: a finite number of seconds in (0, MAX_CELL_TIMEOUT_S] (nan and inf refused:
    either would disable the limit without saying so); raises ``MatrixError`` with one line."""
    import math

    from .matrix_file import MatrixError

    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or not 0 < value <= MAX_CELL_TIMEOUT_S:
        raise MatrixError(f"{where} must be a finite number of seconds in (0, {MAX_CELL_TIMEOUT_S:g}], got {value!r}")
    return float(value)


SCHEDULE_CHOICES, MODE_CHOICES, DEVICE_CHOICES = Choices(_schedules), Choices(_modes), Choices(_devices)

RUN_OPTIONS: tuple[Option, ...] = (
    Option(
        "--tier",
        "tier",
        default="smoke",
        help="matrix tier (default smoke; the shipped matrix has smoke, quick, "
        "plateau, gpu, full: mpcbench list tiers; checked against the --matrix file)",
    ),
    Option(
        "--task",
        "tasks",
        repeat=True,
        help="only this task (repeatable; default: the tier's); may name a plugin's task",
    ),
    Option(
        "--compressor",
        "compressors",
        repeat=True,
        help="run this spec forward and backward (repeatable) instead "
        "of the tier's list, plus the 'none' baseline; e.g. --compressor 'topk(ratio=0.1)'",
    ),
    Option("--forward", "forward", help="forward (activation) spec, with --backward for an asymmetric plan"),
    Option("--backward", "backward", help="backward (activation-gradient) spec of the selected cells"),
    Option(
        "--dp",
        "dp",
        help="data-parallel gradient spec of the selected cells (with --dp-size 1: the one replica's "
        "gradient through it; with --sync outer(...): the pseudo-gradient)",
    ),
    Option(
        "--tp-forward", "tp_forward", help="tensor-parallel activation spec of the selected cells (needs --tp >= 2)"
    ),
    Option(
        "--tp-backward", "tp_backward", help="tensor-parallel gradient spec of the selected cells (needs --tp >= 2)"
    ),
    Option(
        "--seeds",
        "seeds",
        convert=_seeds,
        help="seed count (3 = 0,1,2), list (0,4) or range (2:5); default: the tier's",
    ),
    Option(
        "--mode",
        "mode",
        default="auto",
        choices=MODE_CHOICES,
        help="%(choices)s: one process, or one per stage (and replica) via torchrun; auto (default): torchrun "
        "for cells whose plan uses a submitted (non built-in) compressor, so its receiving end sees only the "
        "payload, else single",
    ),
    Option(
        "--device",
        "device",
        choices=DEVICE_CHOICES,
        cell="device",
        help="%(choices)s: where cells train (default: the tier's device setting, cpu unless the tier says cuda)",
    ),
    Option("--stages", "stages", int, cell="stages", help="pipeline stages (default: the task's)"),
    Option("--dp-size", "dp_size", int, cell="dp", help="data-parallel replicas per cell (>= 2 runs through torchrun)"),
    Option(
        "--tp",
        "tp_size",
        int,
        cell="tp",
        help="tensor-parallel ranks per stage (transformer tasks; single mode simulates them in one process)",
    ),
    Option(
        "--schedule",
        "schedule",
        choices=SCHEDULE_CHOICES,
        cell="schedule",
        help=f"%(choices)s: the pipeline schedule (default: the tier's, else {DEFAULT_SCHEDULE})",
    ),
    Option(
        "--microbatches",
        "microbatches",
        int,
        cell="microbatches",
        help="micro-batches per step (default: the tier's; must divide the batch size)",
    ),
    Option("--steps", "steps", int, cell="steps", help="override the tier's step count"),
    Option(
        "--optimizer",
        "optimizer",
        cell="optimizer",
        help="the optimizer instead of the task's own: 'sgd(momentum=0.9, clip=1.0)' (momentum SGD, gradient "
        "clipped to that 2-norm; with dgc as the --dp code the momentum and clip move into the code)",
    ),
    Option("--lr", "lr", float, cell="lr", help="the peak learning rate (default: the tier's)"),
    Option(
        "--model-size",
        "model_size",
        cell="model_size",
        help="one of the task's named model sizes (`mpcbench tasks`; default: the tier's model)",
    ),
    Option(
        "--sync",
        "sync",
        cell="sync",
        help="how data-parallel replicas synchronize: step (every step, DDP hook; default) or "
        "'outer(h=8)' (DiLoCo: h local steps, then the --dp compressor on the pseudo-gradient and an outer "
        "Nesterov SGD; also lr=0.7, momentum=0.9, nesterov=true)",
    ),
    Option(
        "--nnodes",
        "nnodes",
        int,
        cell="nnodes",
        help="hosts the torchrun job spans (implies --mode torchrun; must "
        "divide stages x dp-size); with --link: emulated hosts (default one per process)",
    ),
    Option(
        "--node-rank",
        "node_rank",
        int,
        cell="node_rank",
        help="this host's index among --nnodes real hosts "
        "(0 serves the rendezvous); run the same command on every host",
    ),
    Option(
        "--rdzv-endpoint",
        "rdzv_endpoint",
        cell="rdzv_endpoint",
        metavar="HOST:PORT",
        help="node 0's address and a free port, for the c10d rendezvous of --nnodes real hosts",
    ),
    Option(
        "--link",
        "link",
        cell="link",
        metavar="LINK",
        help="emulate the hosts on this machine, one network "
        "namespace each, every node's traffic limited to LINK both ways: a network profile (100Mbps, 1Gbps, ...) "
        "or a rate (250mbit, 20Mbps); bandwidth only, no added latency; needs root, ip and tc",
    ),
    Option("--results", None, default=DEFAULT_STORE, help=f"results store (JSON Lines; default {DEFAULT_STORE})"),
    Option(
        "--plugin",
        "plugins",
        repeat=True,
        convert=_plugin,
        help="plugin module or .py file to import first (repeatable)",
    ),
    Option(
        "--data-dir", "data_dir", convert=_path, help="data directory (default $MPCBENCH_DATA_DIR, else ../shared/data)"
    ),
    Option(
        "--cell-timeout",
        "cell_timeout_s",
        float,
        convert=_cell_timeout,
        help="per-cell time limit in seconds, finite and at most 7 days (default: the tier's)",
    ),
    Option(
        "--no-baseline",
        "baseline",
        bool,
        convert=_not,
        field_default=True,
        help="with --compressor/--forward: do not add the 'none' baseline",
    ),
    Option("--matrix", "matrix_path", convert=_path, help="matrix YAML (default suite/bench/matrix.yaml)"),
    Option(
        "--check-consistency",
        "check_consistency",
        bool,
        help="debug a plugin: a twin receiver re-decodes every payload and the cell fails if the two differ "
        "(same as MPCBENCH_CHECK_CONSISTENCY=1; not part of the cell key; cells already in the store are skipped)",
    ),
    Option(
        "--core",
        "core",
        bool,
        help="only the tier's core matrix: seed 0 of the entries its 'rounds' list (ci/main.sh's default; "
        "the rest of the tier resumes from there)",
    ),
    Option("--dry-run", None, bool, help="list the cells and their state, run nothing"),
)


@dataclass(frozen=True)
class Selection:
    """What to run, from the command line (``mpcbench run`` or ``pytest suite``): one field per
    row of :data:`RUN_OPTIONS` that has a ``field``, in the table's order (checked at import).

    ``compressors`` are user specs; each becomes a plan with ``forward = backward = spec``
    unless ``backward`` / ``dp`` override it. ``forward`` alone (no ``compressors``) adds one
    plan. Without user specs the tier's entries run (with ``backward`` / ``dp`` overriding
    every entry when given). ``baseline`` adds the ``none`` plan next to user specs so the
    report has something to compare with (already-stored cells are skipped anyway). Seeds
    arrive parsed (a tuple of ints); paths absolute.
    """

    tier: str = "smoke"
    tasks: tuple[str, ...] = ()
    compressors: tuple[str, ...] = ()
    forward: str | None = None
    backward: str | None = None
    dp: str | None = None
    tp_forward: str | None = None
    tp_backward: str | None = None
    seeds: tuple[int, ...] | None = None
    mode: str = "auto"
    device: str | None = None
    stages: int | None = None
    dp_size: int | None = None
    tp_size: int | None = None
    schedule: str | None = None
    microbatches: int | None = None
    steps: int | None = None
    optimizer: str | None = None
    lr: float | None = None
    model_size: str | None = None
    sync: str | None = None
    nnodes: int | None = None
    node_rank: int | None = None
    rdzv_endpoint: str | None = None
    link: str | None = None
    plugins: tuple[str, ...] = ()
    data_dir: str | None = None
    cell_timeout_s: float | None = None
    baseline: bool = True
    matrix_path: str | None = None
    check_consistency: bool = False
    core: bool = False


def _check_selection_matches_the_table() -> None:
    """Every option row with a ``field`` is a :class:`Selection` field of the same default, in
    order, and the other way round: a row added without its field fails at import, not in a run."""
    fields = dataclasses.fields(Selection)
    rows = [o for o in RUN_OPTIONS if o.field is not None]
    if [f.name for f in fields] != [o.field for o in rows]:
        raise TypeError(
            f"Selection's fields {[f.name for f in fields]} != the option table's {[o.field for o in rows]}"
        )
    for f, o in zip(fields, rows):
        want = (
            ()
            if o.repeat
            else (o.field_default if o.field_default is not None else (False if o.type is bool else o.default))
        )
        if f.default != want:
            raise TypeError(f"Selection.{f.name} defaults to {f.default!r}, the option table's {o.flag} to {want!r}")


_check_selection_matches_the_table()


def selection_from(values: Mapping[str, Any], base: Path | str = ".") -> Selection:
    """The :class:`Selection` for parsed option values keyed by :attr:`Option.dest`;
    relative paths start at ``base`` (where the command was started)."""
    base = Path(base)
    return Selection(**{o.field: o.to_field(values[o.dest], base) for o in RUN_OPTIONS if o.field is not None})


def add_to_argparse(parser: argparse.ArgumentParser, options: tuple[Option, ...] = RUN_OPTIONS) -> None:
    for o in options:
        parser.add_argument(o.flag, dest=o.dest, **o.add_kwargs())


def pytest_flag(option: Option) -> str:
    """The spelling every pytest session of the environment gets: ``--mpcbench-<name>``
    (pytest's option namespace is shared by every installed plugin, as pytest-benchmark's
    ``--benchmark-*`` are)."""
    return PYTEST_PREFIX + option.flag[2:]


def add_to_pytest(group: Any, taken: set[str], options: tuple[Option, ...] = RUN_OPTIONS) -> None:
    """Each option as ``--mpcbench-<name>`` (the plugin's spelling, in every pytest session)."""
    for o in options:
        if pytest_flag(o) not in taken:
            group.addoption(pytest_flag(o), dest=PYTEST_DEST_PREFIX + o.dest, **o.add_kwargs())


def add_short_pytest_aliases(group: Any, taken: set[str], options: tuple[Option, ...] = RUN_OPTIONS) -> None:
    """Each option also as ``--<name>`` (``--tier``, ``--plugin``), the same destination: only this
    checkout's ``conftest.py`` calls it, so ``pytest suite --tier quick`` works here while other
    projects' pytest sessions keep their own ``--device`` or ``--tier``. A name another plugin
    already owns is left to it (the prefixed spelling still works)."""
    for o in options:
        if o.flag not in taken:
            group.addoption(o.flag, dest=PYTEST_DEST_PREFIX + o.dest, **o.add_kwargs())


def values_from_pytest(option_namespace: Any) -> dict[str, Any]:
    """The run options' values from pytest's ``config.option``, keyed by :attr:`Option.dest`."""
    return {o.dest: getattr(option_namespace, PYTEST_DEST_PREFIX + o.dest) for o in RUN_OPTIONS}
