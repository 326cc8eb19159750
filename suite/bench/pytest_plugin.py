"""pytest plugin (entry point ``pytest11: mpcbench``): the matrix as tests.

``pytest suite --tier quick`` collects ``suite/test_matrix.py``, whose single test is
parametrized here with one cell per (task, compressor plan, seed), ids like
``cifar10-topk(ratio=0.1)-seed0``. The options only register themselves; they do nothing
unless a test asks for the ``mpcbench_cell`` fixture, so other pytest runs are unaffected.
Every option also has an ``--mpcbench-`` prefixed spelling (``--mpcbench-tier``), which is
the only spelling registered if another plugin already owns the short one.

Examples::

    pytest suite --tier quick                                   # the quick matrix
    pytest suite --tier quick --task cifar10 --seeds 3          # one task, seeds 0,1,2
    pytest suite --tier quick --compressor "mine(k=4)" --plugin my_comp.py
    pytest suite --tier smoke --benchmark-json bench.json       # timings + extra_info
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

__all__ = ["selection_from_pytest", "OPTIONS"]

# (name, dest, kwargs)
OPTIONS: list[tuple[str, str, dict[str, Any]]] = [
    ("--tier", "mpcbench_tier", dict(default="smoke", help="matrix tier: smoke, quick, gpu or full (default smoke)")),
    ("--task", "mpcbench_tasks", dict(action="append", default=[], help="run only this task (repeatable); may name a plugin's task")),
    (
        "--compressor",
        "mpcbench_compressors",
        dict(
            action="append",
            default=[],
            help="run this compressor spec (forward and backward; repeatable) instead of the tier's list, "
            "plus the 'none' baseline; e.g. --compressor 'topk(ratio=0.1)'",
        ),
    ),
    ("--backward", "mpcbench_backward", dict(default=None, help="backward (activation-gradient) spec for the selected cells")),
    ("--dp", "mpcbench_dp", dict(default=None, help="data-parallel gradient spec for the selected cells (needs --dp-size >= 2)")),
    ("--dp-size", "mpcbench_dp_size", dict(default=None, type=int, help="data-parallel replicas per cell")),
    ("--stages", "mpcbench_stages", dict(default=None, type=int, help="pipeline stages (default: the task's)")),
    ("--steps", "mpcbench_steps", dict(default=None, type=int, help="override the tier's step count")),
    ("--seeds", "mpcbench_seeds", dict(default=None, help="seed count (3 = 0,1,2), list (0,4) or range (2:5); default: the tier's")),
    ("--device", "mpcbench_device", dict(default=None, choices=["cpu", "cuda", "auto"], help="where cells train (default: the tier's device, cpu unless the tier says cuda)")),
    ("--mode", "mpcbench_mode", dict(default="single", choices=["single", "torchrun"], help="single process or one process per stage via torchrun")),
    ("--results", "mpcbench_results", dict(default="results/store.jsonl", help="results store (JSON Lines; default results/store.jsonl)")),
    ("--plugin", "mpcbench_plugins", dict(action="append", default=[], help="plugin module or .py file to import (repeatable)")),
    ("--data-dir", "mpcbench_data_dir", dict(default=None, help="data directory (default $MPCBENCH_DATA_DIR or ../shared/data)")),
    ("--cell-timeout", "mpcbench_cell_timeout", dict(default=None, type=float, help="per-cell time limit in seconds (default: the tier's)")),
    ("--no-baseline", "mpcbench_no_baseline", dict(action="store_true", default=False, help="with --compressor: do not add the 'none' baseline")),
    ("--matrix", "mpcbench_matrix", dict(default=None, help="matrix YAML (default suite/bench/matrix.yaml)")),
    (
        "--check-consistency",
        "mpcbench_check_consistency",
        dict(
            action="store_true",
            default=False,
            help="debug a plugin: a twin receiver re-decodes every payload and the cell fails if the two differ "
            "(same as MPCBENCH_CHECK_CONSISTENCY=1; not part of the cell key)",
        ),
    ),
]


def _taken(parser: pytest.Parser) -> set[str]:
    names: set[str] = set()
    for group in [*getattr(parser, "_groups", []), getattr(parser, "_anonymous", None)]:
        for opt in getattr(group, "options", []) if group is not None else []:
            names.update(opt.names())
    return names


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("mpcbench", "mpcbench matrix (pytest suite --tier quick)")
    taken = _taken(parser)
    for name, dest, kwargs in OPTIONS:
        long = "--mpcbench-" + name[2:]
        names = [n for n in (name, long) if n not in taken]
        group.addoption(*names, dest=dest, **kwargs)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "mpcbench_cell: one cell of the mpcbench matrix")


def selection_from_pytest(config: pytest.Config):
    """The :class:`suite.bench.matrix.Selection` the command line asks for."""
    from .matrix import Selection, parse_seeds

    opt = config.option
    seeds = parse_seeds(opt.mpcbench_seeds, "--seeds") if opt.mpcbench_seeds is not None else None
    base = Path(config.invocation_params.dir)

    def absolute(p: str) -> str:
        # relative plugin paths and data dirs are relative to where pytest was started
        return str((base / p).resolve()) if (p.endswith(".py") or "/" in p) else p

    return Selection(
        tier=opt.mpcbench_tier,
        tasks=tuple(opt.mpcbench_tasks),
        compressors=tuple(opt.mpcbench_compressors),
        backward=opt.mpcbench_backward,
        dp=opt.mpcbench_dp,
        seeds=seeds,
        mode=opt.mpcbench_mode,
        device=opt.mpcbench_device,
        stages=opt.mpcbench_stages,
        dp_size=opt.mpcbench_dp_size,
        steps=opt.mpcbench_steps,
        plugins=tuple(absolute(p) for p in opt.mpcbench_plugins),
        data_dir=str((base / opt.mpcbench_data_dir).resolve()) if opt.mpcbench_data_dir else None,
        cell_timeout_s=opt.mpcbench_cell_timeout,
        baseline=not opt.mpcbench_no_baseline,
        matrix_path=str(base / opt.mpcbench_matrix) if opt.mpcbench_matrix else None,
        check_consistency=opt.mpcbench_check_consistency,
    )


_PLAN_KEY = pytest.StashKey[list]()


def _planned(config: pytest.Config) -> list:
    if _PLAN_KEY not in config.stash:
        from .matrix import MatrixError, plan_cells

        try:
            config.stash[_PLAN_KEY] = plan_cells(selection_from_pytest(config))
        except MatrixError as e:
            problem = str(e)
        else:
            return config.stash[_PLAN_KEY]
        pytest.fail(f"mpcbench: {problem}", pytrace=False)  # one line, outside the except: no chained traceback
    return config.stash[_PLAN_KEY]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "mpcbench_cell" not in metafunc.fixturenames:
        return
    cells = _planned(metafunc.config)
    metafunc.parametrize("mpcbench_cell", cells, ids=[c.test_id for c in cells])


@pytest.fixture(scope="session")
def mpcbench_store(request: pytest.FixtureRequest):
    """The results store named by ``--results`` (relative to where pytest was started)."""
    from .store import ResultsStore

    path = Path(request.config.option.mpcbench_results)
    if not path.is_absolute():
        path = Path(request.config.invocation_params.dir) / path
    return ResultsStore(path)


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    """After a matrix run: where the records are and how to look at them."""
    if _PLAN_KEY not in config.stash:
        return
    path = Path(config.option.mpcbench_results)
    if not path.is_absolute():
        path = Path(config.invocation_params.dir) / path
    if path.exists():
        terminalreporter.write_sep("-", "mpcbench")
        terminalreporter.write_line(f"results store: {path}  (cell logs: {path.with_name(path.stem + '.logs')})")
        terminalreporter.write_line(f"ranking: mpcbench report --results {path}")
