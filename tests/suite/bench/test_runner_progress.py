"""The runner's terminal progress bar counts the cells that run, not the ones a resume skips."""

from __future__ import annotations

import io

from suite.bench import executors, runner
from suite.bench.matrix import PlannedCell
from suite.bench.store import ResultsStore
from suite.pipeline.config import CellConfig


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_skipped_cells_do_not_count_in_the_bar(tmp_path, monkeypatch):
    skipped = [PlannedCell(CellConfig(task="tiny", seed=s), skip="not applicable") for s in range(5)]
    ran = PlannedCell(CellConfig(task="tiny", seed=9))
    record = {"status": "ok", "cell_key": ran.config.key(), "metric_name": "accuracy", "final_metric": 0.5}
    monkeypatch.setattr(executors, "run_cell", lambda cell, **_: record)  # the serial executor's
    monkeypatch.setattr(ResultsStore, "append", lambda self, r: None)
    stream = _Tty()
    outcomes = runner.run_cells([*skipped, ran], ResultsStore(tmp_path / "s.jsonl"), stream=stream)
    assert [o.status for o in outcomes] == ["skipped"] * 5 + ["ok"]
    bars = stream.getvalue()
    assert "1/1" in bars and "/6" not in bars and "6/" not in bars


class _OutOfOrder:
    """An executor that finishes its cells in a given order (as -j N does), one record each."""

    name, slots = "fake", 2

    def __init__(self, order: list[int]) -> None:
        self.order = order

    def run(self, cells, *, log_dir, runtime):
        for c in cells:
            yield "start", c, None
        for i in self.order:
            c = cells[i]
            yield "done", c, {"status": "ok", "cell_key": c.config.key(), "metric_name": "m", "final_metric": 0.5}


def test_a_round_is_reported_once_it_and_every_earlier_round_are_in(tmp_path, monkeypatch):
    cells = [PlannedCell(CellConfig(task="tiny", seed=s), round=r) for s, r in enumerate([0, 0, 1, 1, 3])]
    monkeypatch.setattr(ResultsStore, "append", lambda self, r: None)
    seen: list[tuple[int, int, int]] = []
    done: list[int] = []

    def on_outcome(o):
        done.append(o.cell.config.seed)

    # round 1's cells finish before round 0's last one: round 1 is reported only after round 0
    runner.run_cells(
        cells,
        ResultsStore(tmp_path / "s.jsonl"),
        stream=io.StringIO(),
        executor=_OutOfOrder([0, 2, 3, 1, 4]),
        on_outcome=on_outcome,
        on_round=lambda r, last: seen.append((r, last, len(done))),
    )
    assert seen == [(0, 3, 4), (1, 3, 4), (3, 3, 5)]
