"""The benchmark matrix as pytest tests: ``pytest suite --tier quick``.

One test per cell (parametrized by ``suite.bench.pytest_plugin``). A cell

- with ``--dry-run``, is skipped with its state (to run, already in store, not applicable, broken);
- is skipped when its compressor does not apply to the task (reason given), when it needs
  a GPU the machine does not have, or when the results store already holds an ``ok`` record
  with the same cell key ("already in store": rerunning an interrupted matrix finishes only
  the missing cells);
- otherwise runs in an isolated child process (``suite.bench.cell.run_cell``; under
  pytest-xdist, ``-n N``, pinned to its worker's share of the cores and GPUs) timed by
  pytest-benchmark (one round, one iteration: a training run is not a microbenchmark), and
  its record is appended to the store whatever happened (xdist workers append side by side:
  the store's lock keeps every line whole);
- fails if the run failed, timed out, or produced non-finite metrics, with the one-line
  reason from the record.

Quality, bytes and modeled times go into ``benchmark.extra_info`` so ``--benchmark-json``
carries everything the store has for the cell.
"""

from __future__ import annotations

import pytest

from suite.bench.cell import run_cell
from suite.bench.matrix import missing_device
from suite.bench.pytest_plugin import CELL_KEY_PROPERTY
from suite.bench.runner import ALREADY_IN_STORE, cell_state, summarize_record


def test_cell(mpcbench_cell, mpcbench_store, mpcbench_dry_run, mpcbench_slot_env, benchmark, record_property) -> None:
    cell = mpcbench_cell
    if mpcbench_dry_run:
        pytest.skip(f"dry run: {cell_state(cell, mpcbench_store.done_keys())}")
    if cell.skip is not None:
        pytest.skip(cell.skip)
    if (missing := missing_device(cell)) is not None:
        pytest.skip(missing)
    # the session's closing summary (suite.bench.pytest_plugin) reads the keys back, from xdist workers too
    record_property(CELL_KEY_PROPERTY, cell.config.key())
    if cell.config.key() in mpcbench_store.done_keys():
        pytest.skip(ALREADY_IN_STORE)
    benchmark.extra_info["cell_id"] = cell.config.cell_id
    record = benchmark.pedantic(
        run_cell,
        args=(cell,),
        kwargs={"log_dir": mpcbench_store.log_dir, "env": mpcbench_slot_env},
        rounds=1,
        iterations=1,
        warmup_rounds=0,
    )
    mpcbench_store.append(record)
    benchmark.extra_info.update(summarize_record(record))
    if record["status"] != "ok":
        pytest.fail(f"{record['status']}: {record['error']}", pytrace=False)
