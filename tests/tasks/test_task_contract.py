"""The task contract, checked for every registered task (smoke tier).

A new task is tested by registering it; nothing here lists tasks by hand.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from _taskdata import require_data, task_params

from tasks import PRECISIONS, TIERS, Batch, Task, TaskError, available_tasks, build_task, get_task_class

# the built-in tasks: fixture tasks other test modules register at collection (tiny_gpt, tiny_bert)
# carry only the tiers their tests need
TASKS = task_params([t for t in available_tasks() if get_task_class(t).__module__.startswith("tasks.")])


def _task(name: str, **kw) -> Task:
    require_data(name)
    return build_task(name, tier="smoke", **kw)


def _forward(stages, batch: Batch) -> torch.Tensor:
    x = batch.inputs
    for s in stages:
        x = s(x, batch.inputs)
    return x


@pytest.mark.parametrize("name", TASKS)
def test_class_attributes(name):
    cls = get_task_class(name)
    assert cls.default_stages in cls.stage_choices
    assert {"smoke", "quick", "full"} <= set(cls.tiers)
    for tier, b in cls.tiers.items():
        assert b.batch_size % b.microbatches == 0, f"{tier}: batch {b.batch_size} not divisible by M={b.microbatches}"
        assert 0 < b.eval_every <= b.steps
        assert math.isfinite(b.target) and b.lr > 0


@pytest.mark.parametrize("name", TASKS)
def test_stages_compose_to_the_model(name):
    task = _task(name)
    batch = next(iter(task.eval_batches()))
    for n in task.stage_choices:
        stages = task.build_stages(n)
        assert len(stages) == n
        for s in stages:
            s.eval()
        with torch.no_grad():
            out = _forward(stages, batch)
            if hasattr(task, "build_model"):  # the unsplit model, same seed: identical output
                model = task.build_model().eval()
                torch.testing.assert_close(out, model(batch.inputs), rtol=0, atol=1e-5)
        loss = task.loss(out, batch.targets)
        assert loss.dim() == 0 and torch.isfinite(loss)
        stats = task.metric_sums(out, batch.targets)
        assert len(stats) == task.metric_stats_size() and all(math.isfinite(v) for v in stats)
        values = task.metric_values(stats)
        assert next(iter(values)) == task.metric.name  # the primary metric first
        if task.metric.name == "accuracy":
            total, count = stats
            assert 0 <= total <= count == len(batch)


@pytest.mark.parametrize("name", TASKS)
def test_unsupported_stage_count_is_refused(name):
    task = _task(name)
    bad = max(task.stage_choices) + 1
    with pytest.raises((TaskError, ValueError), match=str(bad)):
        task.build_stages(bad)


@pytest.mark.parametrize("name", TASKS)
def test_build_is_deterministic(name):
    task = _task(name)
    a = [p.detach().clone() for s in task.build_stages(task.default_stages) for p in s.parameters()]
    b = [p.detach() for s in task.build_stages(task.default_stages) for p in s.parameters()]
    assert len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))
    other = [p.detach() for s in _task(name, seed=1).build_stages(task.default_stages) for p in s.parameters()]
    assert not all(torch.equal(x, y) for x, y in zip(a, other)), "seed does not change the initialization"


@pytest.mark.parametrize("name", TASKS)
def test_train_batches_count_shape_and_determinism(name):
    task = _task(name)
    b = task.budget
    batches = list(task.train_batches())
    assert len(batches) == b.steps
    for batch in batches:
        assert len(batch) == b.batch_size
        assert batch.sample_ids.dtype == torch.int64 and batch.sample_ids.shape == (b.batch_size,)
        assert batch.inputs.shape[0] == batch.targets.shape[0] == b.batch_size
        assert len(batch.split(b.microbatches)) == b.microbatches
    again = list(task.train_batches())
    for x, y in zip(batches, again):
        assert torch.equal(x.inputs, y.inputs) and torch.equal(x.targets, y.targets)
        assert torch.equal(x.sample_ids, y.sample_ids)
    other_seed = list(_task(name, seed=1).train_batches())
    assert not all(torch.equal(x.sample_ids, y.sample_ids) for x, y in zip(batches, other_seed))


@pytest.mark.parametrize("name", TASKS)
def test_dp_replicas_get_disjoint_shards(name):
    task = _task(name)
    r0, r1 = list(task.train_batches(0, 2)), list(task.train_batches(1, 2))
    assert len(r0) == len(r1) == task.budget.steps
    for a, b in zip(r0, r1):
        assert len(a) == len(b) == task.budget.batch_size
        assert not torch.equal(a.sample_ids, b.sample_ids)
    with pytest.raises(ValueError):
        next(iter(task.train_batches(2, 2)))


@pytest.mark.parametrize("name", TASKS)
def test_eval_batches_fixed_and_split_into_microbatches(name):
    task = _task(name)
    b = task.budget
    batches = list(task.eval_batches())
    assert batches, "no evaluation batches"
    n = sum(len(x) for x in batches)
    if b.eval_samples is not None:
        assert b.eval_samples - b.microbatches < n <= b.eval_samples
    for x in batches:
        assert len(x) % b.microbatches == 0, "every eval batch must split into M micro-batches"
        assert x.sample_ids.dtype == torch.int64
    again = list(task.eval_batches())
    assert all(torch.equal(x.inputs, y.inputs) for x, y in zip(batches, again))


@pytest.mark.parametrize("name", TASKS)
def test_describe_is_json(name):
    d = _task(name).describe()
    assert d["task"] == name and d["tier"] == "smoke"
    json.dumps(d)


@pytest.mark.parametrize("name", TASKS)
def test_unknown_tier_and_feature_are_refused(name):
    require_data(name)
    with pytest.raises(TaskError, match="valid tiers"):
        build_task(name, tier="huge")
    with pytest.raises(TaskError, match="cannot provide"):
        build_task(name, features={"no_such_feature"})


@pytest.mark.parametrize("name", TASKS)
def test_every_tier_is_a_valid_budget(name):
    cls = get_task_class(name)
    assert set(cls.tiers) <= set(TIERS), f"{name}: tiers {sorted(cls.tiers)} outside {TIERS}"
    for tier, b in cls.tiers.items():
        assert b.precision in PRECISIONS
        assert b.batch_size % b.microbatches == 0, f"{name} {tier}: M does not divide the batch"
        assert 0 < b.eval_every <= b.steps and 0 <= b.warmup_steps < b.steps


@pytest.mark.parametrize("name", TASKS)
def test_a_model_size_overrides_only_model_settings_every_tier_has(name):
    """A named size changes the model a tier builds, never its budget: each override is an ``extra``
    entry of every tier (so the size means the same on each), and the task builds with it."""
    cls = get_task_class(name)
    for size, overrides in cls.model_sizes.items():
        for tier, b in cls.tiers.items():
            assert set(overrides) <= set(b.extra), (
                f"{name} {size}: {sorted(set(overrides) - set(b.extra))} not in {tier}"
            )
        task = build_task(name, tier="smoke", model_size=size)
        assert task.model_size == size and task.budget.steps == cls.tiers["smoke"].steps


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", TASKS)
def test_batches_built_on_cuda_equal_cpu_batches(name):
    cpu, gpu = _task(name), _task(name)
    gpu.to_device(torch.device("cuda"))
    for a, b in zip(
        list(cpu.train_batches()) + list(cpu.eval_batches()), list(gpu.train_batches()) + list(gpu.eval_batches())
    ):
        b = b.to("cpu")
        assert torch.equal(a.inputs, b.inputs) and torch.equal(a.targets, b.targets)
        assert torch.equal(a.sample_ids, b.sample_ids)


def test_a_tier_budget_is_the_one_home_of_the_microbatches_default_and_check():
    from tasks.api import TaskError, TierBudget

    b = TierBudget(steps=1, batch_size=16, microbatches=4, eval_every=1, target=0.5, lr=0.1)
    assert b.resolve_microbatches() == 4 and b.resolve_microbatches(None) == 4 and b.resolve_microbatches(8) == 8
    with pytest.raises(TaskError, match="microbatches=5 does not divide the batch size 16; pick a divisor of 16"):
        b.resolve_microbatches(5)
    for bad in (0, -2, True, 2.0):
        with pytest.raises(TaskError, match="must be an integer >= 1"):
            b.resolve_microbatches(bad)
