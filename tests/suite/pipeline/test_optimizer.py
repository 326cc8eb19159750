"""The cell's optimizer and learning rate (suite/pipeline/optimizer.py, CellConfig.optimizer / lr):
validated before training, part of the cell key only when set, named in the setup label, and held
to DGC's momentum and clip when DGC carries them."""

from __future__ import annotations

import pytest
import torch

from suite.pipeline.config import CellConfig, CompressionPlan, ConfigError
from suite.pipeline.optimizer import parse_optimizer
from suite.results.entries import setup_label


def _cfg(dp: str = "none", **kw) -> CellConfig:
    base = dict(task="shakespeare", tier="smoke", stages=1, plan=CompressionPlan.from_dict({"both": "none", "dp": dp}))
    return CellConfig(**{**base, **kw})


def test_the_default_keeps_old_keys_and_a_set_optimizer_or_rate_is_another_cell():
    plain = _cfg().validate()
    assert "optimizer" not in plain.identity() and "lr" not in plain.identity()
    sgd = _cfg(optimizer="sgd(momentum=0.9)").validate()
    assert sgd.optimizer == "sgd(momentum=0.9, clip=0)"  # canonical text
    keys = {plain.key(), sgd.key(), _cfg(optimizer="sgd(momentum=0.9)", lr=0.3).validate().key()}
    assert len(keys) == 3
    assert _cfg(lr=1).validate().key() == _cfg(lr=1.0).validate().key()


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"optimizer": "adam"}, "unknown optimizer 'adam'"),
        ({"optimizer": "sgd(momentum=2)"}, "momentum=2 must be a number in"),
        ({"optimizer": "sgd(nesterov=1)"}, "unknown parameter 'nesterov'"),
        ({"lr": -1.0}, "lr=-1.0 must be a number"),
        ({"optimizer": "sgd(momentum=0.9, clip=1)", "stages": 2}, "clip is the whole gradient's norm"),
        ({"dp": "dgc"}, "give the optimizer"),
        ({"dp": "dgc(clip=1)", "optimizer": "sgd(momentum=0.9)"}, "must name the same"),
        ({"dp": "dgc", "optimizer": "sgd(momentum=0.9)", "compress_warmup_steps": 2}, "compress_warmup_steps=0"),
    ],
)
def test_bad_optimizer_settings_fail_before_training_with_one_line(kw, message):
    with pytest.raises(ConfigError, match=message):
        _cfg(**kw).validate()


def test_dgc_takes_the_momentum_and_clip_so_the_stages_step_plain_sgd():
    opt = parse_optimizer("sgd(momentum=0.9, clip=1.0)")
    assert (opt.for_code("dgc(momentum=0.9, clip=1.0)").momentum, opt.for_code("dgc(clip=1.0)").clip) == (0.0, 0.0)
    assert opt.for_code("topk(ratio=0.015)") == opt
    built = opt.build([torch.nn.Parameter(torch.zeros(2))], 0.3)
    assert isinstance(built, torch.optim.SGD) and built.defaults["momentum"] == 0.9 and built.defaults["lr"] == 0.3


def test_the_setup_label_names_the_optimizer_and_rate_in_one_part():
    cfg = {"stages": 1, "dp": 2, "steps": 600}
    plain = setup_label({"config": cfg})
    sgd = setup_label({"config": {**cfg, "optimizer": "sgd(momentum=0.9, clip=1)", "lr": 0.3}})
    assert sgd == plain + ", sgd momentum 0.9 clip 1 lr 0.3"
    assert setup_label({"config": {**cfg, "lr": 0.001}}) == plain + ", lr 0.001"
