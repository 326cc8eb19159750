"""The record schema's plausibility table agrees with the tasks it describes (suite.results imports no task code)."""

from __future__ import annotations

import pytest

from suite.results.records import metric_range, task_metrics
from suite.results.task_catalog import catalog


def test_every_task_module_is_described():
    from tasks import described_tasks

    assert sorted(task_metrics()) == described_tasks()


@pytest.mark.parametrize("task", sorted(task_metrics()))
def test_task_metrics_match_the_task_classes(task):
    """The Task class takes its metric and targets from the same DESCRIPTION the records layer reads."""
    from tasks import get_task_class

    cls = get_task_class(task)
    assert task_metrics()[task] == (cls.metric.name, cls.metric.higher_is_better)
    assert {t: b.target for t, b in cls.tiers.items()} == dict(catalog()[task].targets)


def test_metric_ranges():
    assert metric_range("accuracy", True) == (0.0, 1.0)
    assert metric_range("val_loss", False)[0] == 0.0  # a loss is never negative
    assert metric_range("bleu", True)[0] < 0 < metric_range("bleu", True)[1]
