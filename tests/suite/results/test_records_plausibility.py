"""The record schema's plausibility table agrees with the tasks it describes (suite.results imports no task code)."""

from __future__ import annotations

import pytest

from suite.results.records import TASK_METRICS, metric_range


@pytest.mark.parametrize("task", sorted(TASK_METRICS))
def test_task_metrics_match_the_task_classes(task):
    from tasks import get_task_class

    metric = get_task_class(task).metric
    assert TASK_METRICS[task] == (metric.name, metric.higher_is_better)


def test_metric_ranges():
    assert metric_range("accuracy", True) == (0.0, 1.0)
    assert metric_range("val_loss", False)[0] == 0.0  # a loss is never negative
    assert metric_range("bleu", True)[0] < 0 < metric_range("bleu", True)[1]
