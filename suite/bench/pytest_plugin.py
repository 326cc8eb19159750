"""pytest plugin (entry point ``pytest11: mpcbench``): the matrix as tests.

``pytest suite --tier quick`` collects ``suite/test_matrix.py``, whose single test is
parametrized here with one cell per (task, compressor plan, seed), ids like
``cifar10-topk(ratio=0.1)-seed0``. The options only register themselves; they do nothing
unless a test asks for the ``mpcbench_cell`` fixture, so other pytest runs are unaffected.
The plugin registers every option as ``--mpcbench-<name>`` only (``--mpcbench-tier``): it is
loaded in every pytest session of the environment, whose ``--device`` or ``--tier`` belong to
that project. Inside this checkout the root ``conftest.py`` adds the short spellings used below.

Examples::

    pytest suite --tier quick                                   # the quick matrix
    pytest suite --tier quick --task cifar10 --seeds 3          # one task, seeds 0,1,2
    pytest suite --tier quick --compressor "mine(k=4)" --plugin my_comp.py
    pytest suite --tier smoke --benchmark-json bench.json       # timings + extra_info
    pytest suite --tier quick --dry-run                         # each cell skipped with its state
    pytest suite --tier quick -n 2                              # 2 cells at once (pytest-xdist), pinned
    pytest --pyargs suite --mpcbench-tier quick                 # outside the checkout: the prefixed spelling
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .options import RUN_OPTIONS, add_short_pytest_aliases, add_to_pytest, selection_from, values_from_pytest

__all__ = ["selection_from_pytest", "OPTIONS", "add_short_aliases", "CELL_KEY_PROPERTY"]

OPTIONS = RUN_OPTIONS  # the same table as ``mpcbench run`` (suite.bench.options)
CELL_KEY_PROPERTY = "mpcbench_cell_key"  # a matrix test's user property: the key of the cell it ran or found stored


def _taken(parser: pytest.Parser) -> set[str]:
    names: set[str] = set()
    for group in [*getattr(parser, "_groups", []), getattr(parser, "_anonymous", None)]:
        for opt in getattr(group, "options", []) if group is not None else []:
            names.update(opt.names())
    return names


GROUP = ("mpcbench", "mpcbench matrix (pytest suite --mpcbench-tier quick; --tier in the mpcbench checkout)")


def pytest_addoption(parser: pytest.Parser) -> None:
    add_to_pytest(parser.getgroup(*GROUP), _taken(parser))


def add_short_aliases(parser: pytest.Parser) -> None:
    """The unprefixed spellings (``--tier``), for this checkout's ``conftest.py``."""
    add_short_pytest_aliases(parser.getgroup(*GROUP), _taken(parser))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "mpcbench_cell: one cell of the mpcbench matrix")


def selection_from_pytest(config: pytest.Config):
    """The :class:`suite.bench.options.Selection` the command line asks for (relative paths
    start where pytest was started)."""
    return selection_from(values_from_pytest(config.option), config.invocation_params.dir)


def _store_path(config: pytest.Config) -> Path:
    path = Path(config.option.mpcbench_results)
    return path if path.is_absolute() else Path(config.invocation_params.dir) / path


_PLAN_KEY = pytest.StashKey[list]()


def _planned(config: pytest.Config) -> list:
    if _PLAN_KEY not in config.stash:
        from suite.pipeline.errors import ConfigError

        from .matrix import plan_cells
        from .plugins import refuse_unimportable
        from .provenance import check_signing_key

        try:
            check_signing_key()  # a bad MPCBENCH_SIGNING_KEY: one line, not a failure per cell
            selection = selection_from_pytest(config)
            refuse_unimportable(selection.plugins)  # one line, before any cell trains
            config.stash[_PLAN_KEY] = plan_cells(selection)
        except ConfigError as e:  # MatrixError is one
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
def mpcbench_dry_run(request: pytest.FixtureRequest) -> bool:
    """``--dry-run``: every cell is skipped with its state (to run, already in store, ...)."""
    return bool(request.config.option.mpcbench_dry_run)


@pytest.fixture(scope="session")
def mpcbench_store(request: pytest.FixtureRequest):
    """The results store named by ``--results`` (relative to where pytest was started)."""
    from .store import ResultsStore, StoreError

    try:
        store = ResultsStore(_store_path(request.config))
        if not request.config.option.mpcbench_dry_run:
            store.check_writable()  # a read-only location: one line per cell, before any cell runs
    except StoreError as e:
        pytest.fail(str(e), pytrace=False)
    return store


@pytest.fixture(scope="session")
def mpcbench_slot_env() -> dict[str, str] | None:
    """Under pytest-xdist (``pytest suite -n N``): the environment that pins this worker's cells
    to its share of the cores and GPUs (``suite.bench.resources.xdist_slot``); else None."""
    import os

    from .resources import xdist_slot

    slot = xdist_slot(os.environ.get("PYTEST_XDIST_WORKER"), os.environ.get("PYTEST_XDIST_WORKER_COUNT"))
    return slot.env() if slot else None


def _cell_keys(terminalreporter) -> set[str]:
    """The cell keys the matrix tests of this session recorded (their ``user_properties``)."""
    keys = set()
    for reports in terminalreporter.stats.values():
        for r in reports:
            for name, value in getattr(r, "user_properties", ()):
                if name == CELL_KEY_PROPERTY:
                    keys.add(str(value))
    return keys


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    """After a matrix run: quality vs none, ratio and time-to-target of its cells; where the records are."""
    keys = _cell_keys(terminalreporter)
    if _PLAN_KEY not in config.stash and not keys:  # not a matrix session (an xdist controller plans nothing)
        return
    path = _store_path(config)
    if path.exists():
        terminalreporter.write_sep("-", "mpcbench")
        if keys:
            import io

            from leaderboard.index import load_index
            from leaderboard.report import write_summary

            text = io.StringIO()
            try:
                write_summary(load_index([str(path)], []).frame, keys, text)
            except Exception as e:  # noqa: BLE001 - the records are stored; only the summary is lost
                text.write(f"no summary ({type(e).__name__}: {' '.join(str(e).split())[:200]})\n")
            for line in text.getvalue().strip("\n").splitlines():
                terminalreporter.write_line(line)
        terminalreporter.write_line(f"results store: {path}  (cell logs: {path.with_name(path.stem + '.logs')})")
        terminalreporter.write_line(f"ranking: mpcbench report --results {path}")
