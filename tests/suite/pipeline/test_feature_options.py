"""The runtime passes the options a compressor asks of a model feature to the task (subspace rank);
they come from the plan's one resolution (suite.pipeline.plan.resolve_plan)."""

from __future__ import annotations

import pytest

from suite.pipeline.config import CompressionPlan, ConfigError
from suite.pipeline.plan import resolve_plan
from tasks import get_task_class


def required_feature_options(plan: CompressionPlan):
    return resolve_plan(plan, get_task_class("shakespeare"), 2).feature_options


def test_options_come_from_the_plan_and_conflicts_are_refused():
    assert required_feature_options(CompressionPlan(forward="subspace", backward="subspace")) == {}
    plan = CompressionPlan(forward="subspace(ratio=0.01)", backward="subspace(ratio=0.01)")
    assert required_feature_options(plan) == {"residual_subspace": {"ratio": 0.01}}
    assert required_feature_options(CompressionPlan(forward="topk", backward="ef(topk)")) == {}
    with pytest.raises(ConfigError, match="different 'residual_subspace' options"):
        required_feature_options(CompressionPlan(forward="subspace(ratio=0.5)", backward="subspace(ratio=0.25)"))
