"""A task is one module: a throwaway task, written as one file in a folder on $MPCBENCH_TASK_PATH
plus one matrix entry, trains in a cell and shows up in ``validate``, in ``report`` and on the
leaderboard page, with no file of the repository touched (CONTRIBUTING.md, "Add a task")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = "Toyline: a throwaway regression the one-module test adds"

TOY = '''
"""A throwaway task: a 2-block MLP fitting a fixed linear teacher (the one-module test)."""

from __future__ import annotations

import torch
from torch import nn

from tasks import Batch, Task, TierBudget

DESCRIPTION = {
    "name": "toyline",
    "family": "test",
    "metric": "fit_score",
    "higher_is_better": True,
    "metric_range": [-100.0, 1.0],
    "chance": 0.0,
    "chance_note": "predicting the mean",
    "targets": {"smoke": 0.1, "quick": 0.2, "full": 0.3},
    "page": "PAGE.",
    "cpu_note": "two blocks; nothing to resolve.",
}


class Toyline(Task):
    description = DESCRIPTION
    default_stages = 2
    stage_choices = (2,)
    tiers = {t: TierBudget(steps=4, batch_size=8, microbatches=2, eval_every=2, lr=0.05) for t in ("smoke", "quick", "full")}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        g = torch.Generator().manual_seed(7)
        self.x = torch.randn(96, 8, generator=g)
        self.y = self.x @ torch.randn(8, 1, generator=g)

    def build_stages(self, n_stages):
        torch.manual_seed(self.seed)
        a, b = nn.Linear(8, 16), nn.Linear(16, 1)

        class First(nn.Module):
            def __init__(self):
                super().__init__()
                self.a = a

            def forward(self, x, batch_input):
                return torch.relu(self.a(x))

        class Last(nn.Module):
            def __init__(self):
                super().__init__()
                self.b = b

            def forward(self, x, batch_input):
                return self.b(x)

        return [First(), Last()]

    def loss(self, output, targets):
        return nn.functional.mse_loss(output, targets)

    def metric_sums(self, output, targets):  # 1 - MSE / Var as (squared error, squared deviation)
        return float(((output - targets) ** 2).sum()), float(((targets - self.y.mean()) ** 2).sum())

    def metric_values(self, sums):
        return {"fit_score": 1.0 - sums[0] / sums[1]}

    def make_optimizer(self, params):
        return torch.optim.SGD(params, lr=self.budget.lr)

    def train_batches(self, dp_rank=0, dp_size=1):
        for step in range(self.budget.steps):
            ids = (torch.arange(8) + 8 * (step * dp_size + dp_rank)) % 64
            yield Batch(self.x[ids], self.y[ids], ids)

    def eval_batches(self):
        for i in range(64, 96, 16):
            ids = torch.arange(i, i + 16)
            yield Batch(self.x[ids], self.y[ids], ids)


TASK = Toyline
'''.replace("PAGE", PAGE)

MATRIX = """schema: mpcbench.matrix/1
tiers:
  smoke:
    description: the throwaway task's one matrix entry
    tasks: [toyline]
    seeds: 1
    cell_timeout_s: 600
    compressors: [none]
"""


def _git_status() -> str:
    return subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True).stdout


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "suite.bench.cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=900
    )


@pytest.mark.slow
def test_a_task_from_one_module_and_one_matrix_entry(tmp_path, monkeypatch):
    before = _git_status()
    folder = tmp_path / "mytasks"
    folder.mkdir()
    (folder / "toyline.py").write_text(TOY)
    (tmp_path / "matrix.yaml").write_text(MATRIX)
    monkeypatch.setenv("MPCBENCH_TASK_PATH", str(folder))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    store = tmp_path / "store.jsonl"

    from suite.results.task_catalog import catalog
    from tasks import available_tasks, get_task_class

    assert "toyline" in available_tasks() and get_task_class("toyline").metric.name == "fit_score"
    assert get_task_class("toyline").tiers["quick"].target == 0.2  # from DESCRIPTION, the one home
    assert catalog()["toyline"].page.startswith(PAGE)

    run = _cli("run", "--matrix", str(tmp_path / "matrix.yaml"), "--tier", "smoke", "--results", str(store))
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    record = json.loads(store.read_text().splitlines()[-1])
    assert (record["task"], record["status"], record["metric_name"]) == ("toyline", "ok", "fit_score")

    ok = _cli("validate", str(store))
    assert ok.returncode == 0 and "1 valid record" in ok.stdout + ok.stderr, ok.stdout + ok.stderr
    forged = tmp_path / "forged.jsonl"  # validate knows the task's metric from its DESCRIPTION alone
    forged.write_text(json.dumps({**record, "metric_name": "accuracy"}) + "\n")
    bad = _cli("validate", str(forged))
    assert bad.returncode != 0 and "task 'toyline' is measured by 'fit_score'" in bad.stdout + bad.stderr

    report = _cli("report", "--results", str(store), "--wide")
    assert report.returncode == 0, report.stderr
    assert "== toyline / smoke" in report.stdout and PAGE in report.stdout and "predicting the mean" in report.stdout

    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("MPCBENCH_RESULTS", str(store))
    monkeypatch.setenv("MPCBENCH_RECORDS", "")
    at = AppTest.from_file(str(ROOT / "leaderboard" / "app.py"), default_timeout=120).run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.selectbox(key="task").value == "toyline"
    assert any(PAGE in c.value and "CPU tier: two blocks" in c.value for c in at.caption)

    assert _git_status() == before  # no file of the repository touched
