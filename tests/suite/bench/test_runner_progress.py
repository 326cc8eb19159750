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
