"""Each task's smoke tier trains: loss goes down on a repeated batch, the standalone run is finite."""

from __future__ import annotations

import math

import pytest
import torch
from _taskdata import require_data, task_params

from tasks import available_tasks, build_task
from tasks.standalone import main, train

BUILTIN = ["cifar10", "shakespeare", "sst2"]


@pytest.mark.parametrize("name", task_params(available_tasks()))
def test_loss_decreases_on_a_repeated_batch(name):
    require_data(name)
    task = build_task(name, tier="smoke")
    torch.manual_seed(0)
    stages = task.build_stages(task.default_stages)
    opts = [task.make_optimizer(list(s.parameters())) for s in stages]
    batch = next(iter(task.train_batches())).split(task.budget.microbatches)[0]  # one micro-batch: cheap
    losses = []
    for _ in range(4):
        x = batch.inputs
        for s in stages:
            x = s(x, batch.inputs)
        loss = task.loss(x, batch.targets)
        loss.backward()
        for o in opts:
            o.step()
            o.zero_grad()
        losses.append(loss.item())
    assert all(math.isfinite(v) for v in losses)
    assert losses[-1] < losses[0], f"{name}: loss did not decrease on one batch: {losses}"


@pytest.mark.parametrize("name", task_params(BUILTIN))
def test_smoke_tier_trains_end_to_end(name):
    require_data(name)
    task = build_task(name, tier="smoke")
    torch.manual_seed(0)
    out = train(task, log=lambda *_: None)
    assert math.isfinite(out["metric"]) and math.isfinite(out["train_loss"])


@pytest.mark.data
def test_module_main_prints_the_metric(capsys):
    require_data("shakespeare")
    from tasks.shakespeare import Shakespeare

    assert main(Shakespeare, ["--tier", "smoke", "--steps", "2", "--stages", "2"]) == 0
    out = capsys.readouterr().out
    assert "final val_loss" in out and "2 stages" in out
