"""The scale ladder's plumbing (issue 47): a named model size is part of a cell's identity only
when set (every stored cell keeps its key), the ``scale`` matrix tier plans quick-budget cells at
three sizes per task, and a record states the model's parameter count (``run.model_params``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from suite.bench.matrix import Selection, load_matrix, plan_cells
from suite.bench.provenance import provenance
from suite.bench.record_builder import build_record
from suite.pipeline.config import CellConfig, ConfigError
from suite.results.entries import setup_label
from tasks import TaskError, build_task
from tasks.gpt import GPT_SIZES

ROOT = Path(__file__).resolve().parents[3]
BASELINES = ROOT / "records" / "mpcbench-baselines" / "quick-cpu-2core-v2.jsonl"


def _committed_quick_records() -> list[dict]:
    """The first committed quick-tier record of each (task, compressor) in the baselines file."""
    seen, out = set(), []
    for line in BASELINES.read_text().splitlines():
        r = json.loads(line)
        if r.get("tier") == "quick" and (r["task"], r["compressor"]) not in seen:
            seen.add((r["task"], r["compressor"]))
            out.append(r)
    return out


def test_committed_quick_cells_keep_their_keys():
    records = _committed_quick_records()
    assert len(records) >= 10
    for r in records:
        cfg = CellConfig.from_dict(r["config"])
        assert cfg.model_size is None
        assert cfg.key() == r["cell_key"], f"{r['task']} {r['compressor']}: the cell key moved"
        assert "model_size" not in cfg.identity()


def test_a_model_size_is_another_cell():
    base = CellConfig(task="shakespeare", tier="quick")
    sized = CellConfig(task="shakespeare", tier="quick", model_size="d256")
    assert sized.identity()["model_size"] == "d256"
    assert sized.key() != base.key()
    assert sized.cell_id == "shakespeare-d256-none-seed0" and base.cell_id == "shakespeare-none-seed0"
    with pytest.raises(ConfigError, match=r"task 'cifar10' has no model size 'd256'.*valid: w4, w16, resnet18"):
        CellConfig(task="cifar10", tier="quick", model_size="d256").validate()


def test_a_model_size_overrides_the_tiers_model_only():
    quick = build_task("shakespeare", "quick")
    task = build_task("shakespeare", "quick", model_size="d256")
    e = task.budget.extra
    assert (e["n_embd"], e["n_head"], e["n_layer"], e["block_size"], e["subspace_rank"]) == (256, 4, 4, 64, 32)
    assert task.budget.steps == quick.budget.steps and task.budget.lr == quick.budget.lr
    assert task.describe()["model_size"] == "d256" and "model_size" not in quick.describe()
    assert build_task("wikitext2", "quick", model_size="gpt2-124m").budget.extra["n_layer"] == 12
    assert build_task("cifar10", "quick", model_size="resnet18").budget.extra["width"] == 64
    with pytest.raises(TaskError, match=r"unknown model size 'd265' \(did you mean 'd256'\?\)"):
        build_task("shakespeare", "quick", model_size="d265")
    with pytest.raises(TaskError, match="none \\(this task has one model per tier\\)"):
        build_task("sst2", "quick", model_size="d64")


def test_the_scale_tier_plans_three_sizes_of_each_task_on_the_quick_budget():
    cells = plan_cells(Selection(tier="scale"), load_matrix())
    assert all(c.error is None for c in cells)
    assert {c.config.tier for c in cells} == {"quick"}  # the quick budget, not a tier of its own
    sizes: dict[str, set] = {}
    for c in cells:
        sizes.setdefault(c.config.task, set()).add(c.config.model_size)
    assert sizes == {"shakespeare": {None, "d64", "d256"}, "cifar10": {None, "w4", "w16"}}
    for task, size in [("shakespeare", s) for s in sizes["shakespeare"]] + [("cifar10", s) for s in sizes["cifar10"]]:
        at_size = [c for c in cells if (c.config.task, c.config.model_size) == (task, size)]
        assert len({c.config.plan.label for c in at_size}) == 5, (task, size)  # none + 4 compressors
        assert {c.config.seed for c in at_size} == {0, 1, 2}
    # the middle rung is the quick tier's own cells (all but 2-bit quantization, which the quick tier
    # does not run): the same keys, so stored quick records count
    quick = {c.config.key() for c in plan_cells(Selection(tier="quick"), load_matrix())}
    middle = [c for c in cells if c.config.model_size is None]
    assert {c.config.plan.label for c in middle if c.config.key() not in quick} == {"quant(bits=2)"}


@pytest.mark.data
def test_a_smoke_cell_at_a_model_size_records_its_parameter_count():
    from suite.pipeline.runtime import run
    from tasks import default_data_dir

    if not (default_data_dir() / "tinyshakespeare" / "input.txt").exists():
        pytest.skip("shakespeare: tinyshakespeare/input.txt not in the data dir (set MPCBENCH_DATA_DIR)")
    base = CellConfig(task="shakespeare", tier="smoke", stages=2).validate()
    sized = CellConfig(task="shakespeare", tier="smoke", stages=2, model_size="d64").validate()
    # smoke's baby GPT: 65 characters, context 32, 4 layers of d=32; d64 doubles its width only
    for cfg, d in ((base, 32), (sized, 64)):
        result = run(cfg)
        assert result.model_params == _gpt_params(65, 32, 4, d)
        record = build_record(cfg, result, provenance(cfg), wall_s=1.0)
        assert record["run"]["model_params"] == _gpt_params(65, 32, 4, d)
    assert setup_label(record).endswith("model d64")
    assert GPT_SIZES["d64"] == {"n_embd": 64, "n_head": 4}


def _gpt_params(vocab: int, T: int, L: int, d: int) -> int:
    """tasks.gpt.GPT without biases, head untied: embeddings V*d + T*d, per block two LayerNorm
    gains (2d) + qkv (3d^2) + out (d^2) + MLP (8d^2), final LayerNorm d, head V*d."""
    return vocab * d + T * d + L * (2 * d + 12 * d * d) + d + vocab * d
