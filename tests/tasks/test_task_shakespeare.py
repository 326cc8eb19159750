"""Shakespeare: data split, windows as samples, and the residual-subspace constraint."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from _taskdata import require_data

from compressors.api import TensorInfo, TensorRole
from compressors.registry import build
from tasks.shakespeare import Shakespeare

pytestmark = pytest.mark.data
FEATURE = "residual_subspace"


def _task(features=frozenset(), dropout=0.2) -> Shakespeare:
    require_data("shakespeare")
    task = Shakespeare(tier="smoke", features=frozenset(features))
    task.budget = replace(task.budget, extra={**task.budget.extra, "dropout": dropout})  # exercise dropout too
    return task


def _out_of_span(x: torch.Tensor, ids: torch.Tensor, feat) -> float:
    r = (x.detach() - feat.token_term(ids)).double()  # (B, T, d)
    basis = feat.basis.double()
    return float((r - (r @ basis) @ basis.T).abs().max())


def test_vocab_split_and_windows():
    task = _task()
    assert len(task.vocab) == 65 and task.vocab == sorted(task.vocab)
    assert task.n_train == int(0.9 * len(task.text))
    b = next(iter(task.train_batches()))
    T = task.block_size
    for o, x, y in zip(b.sample_ids.tolist(), b.inputs, b.targets):
        assert torch.equal(x, torch.from_numpy(task.text[o : o + T]))
        assert torch.equal(y, torch.from_numpy(task.text[o + 1 : o + T + 1]))
        assert o + T < task.n_train  # targets stay in the training text
    assert all(int(e.sample_ids.min()) >= task.n_train for e in task.eval_batches())


def test_window_pool_is_bounded_so_samples_repeat():
    task = _task()
    ids = torch.cat([b.sample_ids for b in task.train_batches()])
    assert len(ids.unique()) <= task.budget.train_samples


@pytest.mark.parametrize("training", [True, False])
def test_constrained_boundaries_lie_in_the_subspace(training):
    task = _task({FEATURE})
    stages = task.build_stages(4)
    feat = task.model_features(stages)[FEATURE]
    d, k = feat.basis.shape
    assert (d, k) == (32, 4) and feat.basis.dtype == torch.float32
    torch.testing.assert_close(feat.basis.T @ feat.basis, torch.eye(k), rtol=0, atol=1e-5)
    opts = [task.make_optimizer(list(s.parameters())) for s in stages]
    for _step, batch in zip(range(2), task.train_batches()):  # before and after an update
        x = batch.inputs
        for s in stages[:-1]:
            s.train(training)
            x = s(x, batch.inputs)
            assert x.shape == (*batch.inputs.shape, d)
            assert _out_of_span(x, batch.inputs, feat) < 1e-5
        loss = task.loss(stages[-1](x, batch.inputs), batch.targets)
        loss.backward()
        for o in opts:
            o.step()
            o.zero_grad()
    assert not feat.token_term(batch.inputs).requires_grad


def test_unconstrained_boundaries_are_not_in_a_subspace():
    """The check above can fail: without the feature the residual stream is full rank."""
    task = _task()
    stages = task.build_stages(2)
    assert task.model_features(stages) == {}
    constrained = _task({FEATURE})
    feat = constrained.model_features(constrained.build_stages(2))[FEATURE]
    batch = next(iter(task.train_batches()))
    x = stages[0](batch.inputs, batch.inputs)
    assert _out_of_span(x, batch.inputs, feat) > 1e-3


def test_feature_is_deterministic_per_seed():
    a = _task({FEATURE})
    fa = a.model_features(a.build_stages(2))[FEATURE]
    fb = a.model_features(a.build_stages(3))[FEATURE]
    assert torch.equal(fa.basis, fb.basis)
    ids = torch.arange(10).view(2, 5)
    assert torch.equal(fa.token_term(ids), fb.token_term(ids))


def test_subspace_compressor_round_trip_is_lossless():
    task = _task({FEATURE}, dropout=0.0)
    stages = task.build_stages(2)
    send, recv = build("subspace"), build("subspace")
    for c in (send, recv):
        c.bind(task.model_features(stages))
    batch = next(iter(task.train_batches()))
    x = stages[0](batch.inputs, batch.inputs).detach()
    info = TensorInfo(TensorRole.ACTIVATION, 0, 0, 0, x.shape, x.dtype, x.device, batch.sample_ids, 0, batch.inputs)
    payload = send.compress(x, info)
    assert payload[0].shape[-1] == 4
    torch.testing.assert_close(recv.decompress(payload, info), x, rtol=0, atol=1e-5)


@pytest.mark.parametrize("ratio, k", [(0.25, 8), (0.0625, 2), (0.01, 1)])
def test_subspace_ratio_sets_the_rank_the_model_is_built_for(ratio, k):
    """subspace(ratio=r): the task builds its model for k = round(r * d) (d = 32 in smoke), still lossless."""
    task = _task({FEATURE}, dropout=0.0)
    send, recv = build(f"subspace(ratio={ratio})"), build(f"subspace(ratio={ratio})")
    task.set_feature_options(send.feature_options)
    stages = task.build_stages(2)
    for c in (send, recv):
        c.bind(task.model_features(stages))
    batch = next(iter(task.train_batches()))
    x = stages[0](batch.inputs, batch.inputs).detach()
    info = TensorInfo(TensorRole.ACTIVATION, 0, 0, 0, x.shape, x.dtype, x.device, batch.sample_ids, 0, batch.inputs)
    payload = send.compress(x, info)
    assert payload[0].shape[-1] == k and task.describe()["feature_options"] == {FEATURE: {"ratio": ratio}}
    torch.testing.assert_close(recv.decompress(payload, info), x, rtol=0, atol=1e-5)


def test_feature_options_need_the_feature_enabled():
    task = _task()
    with pytest.raises(Exception, match="not enabled"):
        task.set_feature_options({FEATURE: {"ratio": 0.1}})
