"""Resolving a compression plan once: the same refusal through the Python API, the CLI and pytest;
each distinct spec parsed once per process; nesting bounded."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from compressors import CompressorError
from compressors.spec import MAX_DEPTH, _parse, parse_spec
from suite.bench.cli import main
from suite.pipeline.config import CompressionPlan, ConfigError
from suite.pipeline.plan import _RESOLVED, resolve_plan

pytest_plugins = ["pytester"]
REPO = Path(__file__).resolve().parents[3]
SUITE_DIR = str(REPO / "suite")
TINY_TASK = str(REPO / "tests" / "fixtures" / "tiny_task.py")
INNER = ("-p", "no:cacheprovider", "-p", "no:hypothesispytest")

# (Python API plan + cell fields, the same plan on the command line, the line all three must give)
REFUSED = {
    "wrapper in a role its inner lacks": (
        dict(plan=CompressionPlan(dp="ef(aqsgd)"), dp=2, mode="torchrun"),
        ["--compressor", "none", "--dp", "ef(aqsgd)", "--dp-size", "2"],
        "dp compressor 'ef(aqsgd)' cannot compress the dp direction (weight_grad): ef(aqsgd) does not support role "
        "weight_grad (it handles: activation, activation_grad)",
    ),
    "learned code backward": (
        dict(plan=CompressionPlan(forward="ae", backward="ae")),
        ["--compressor", "ae"],
        "backward compressor 'ae' cannot compress the backward direction (activation_grad)",
    ),
    "pseudo-gradient code that did not opt in": (
        dict(plan=CompressionPlan(dp="aqsgd"), sync="outer(h=2)"),
        ["--compressor", "none", "--dp", "aqsgd", "--sync", "outer(h=2)"],
        "dp compressor 'aqsgd' cannot compress the dp direction (pseudo_grad): aqsgd does not support role "
        "pseudo_grad (it handles: activation, activation_grad)",
    ),
    "unknown parameter inside a wrapper": (
        dict(plan=CompressionPlan(forward="ef(topk(rate=0.1))")),
        ["--forward", "ef(topk(rate=0.1))"],
        "topk: unknown parameter 'rate'; valid parameters: ratio",
    ),
}


@pytest.mark.parametrize("case", REFUSED, ids=str)
def test_python_api_refuses_with_the_line(case, tiny_cell):
    fields, _, line = REFUSED[case]
    with pytest.raises(ConfigError) as e:
        tiny_cell(**fields).validate()
    assert line in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("case", REFUSED, ids=str)
def test_cli_refuses_with_the_same_line(case, tiny_task, capsys, tmp_path, restore_registry):
    _, argv, line = REFUSED[case]
    rc = main(["run", "--task", "tiny", "--plugin", TINY_TASK, "--results", str(tmp_path / "s.jsonl"), *argv])
    err = capsys.readouterr().err
    assert rc == 2 and line in err and err.count("\n") == 1, err
    assert not (tmp_path / "s.jsonl").exists()  # refused before anything ran


def test_pytest_refuses_with_the_same_line(pytester, tiny_task):
    for _, argv, line in REFUSED.values():
        r = pytester.runpytest_inprocess(SUITE_DIR, *INNER, "--task", "tiny", "--plugin", TINY_TASK, *argv)
        out = r.stdout.str()
        assert r.ret == pytest.ExitCode.INTERRUPTED and line in out and "Traceback" not in out, out


def test_missing_model_feature_is_a_skip_for_the_runner_and_an_error_for_the_api(tiny_cell, tiny_task):
    from suite.bench.matrix import Selection, plan_cells

    reason = "not applicable: subspace requires model feature(s) residual_subspace that task tiny does not provide"
    cells = plan_cells(Selection(tasks=("tiny",), compressors=("subspace",), baseline=False, plugins=(TINY_TASK,)))
    assert [c.skip for c in cells] == [reason]
    with pytest.raises(ConfigError, match=re.escape(reason)):
        tiny_cell(plan="subspace").validate()


def test_the_resolved_plan_expands_overrides_and_keeps_the_instance_roles(tiny_task):
    from tasks import get_task_class

    plan = CompressionPlan(
        forward="topk( ratio = 0.1 )", backward="ef(topk(ratio=0.1))", per_boundary=((0, "forward", "fp16"),)
    )
    r = resolve_plan(plan, get_task_class("tiny"), 2, dp=1)
    assert r.plan.forward == "topk(ratio=0.1)" and r.spec("forward", 0) == parse_spec("fp16")
    assert set(r.uses) == {("forward", 0), ("backward", 0)}
    assert r.names == {"topk", "ef", "fp16", "none"} and r.not_applicable is None
    assert resolve_plan(plan, get_task_class("tiny"), 2, dp=1) is r  # memoized: nothing parsed or built again
    with pytest.raises(ConfigError, match="per_boundary boundary 3 out of range"):
        resolve_plan(CompressionPlan(per_boundary=((3, "forward", "fp16"),)), get_task_class("tiny"), 2)


def test_each_distinct_spec_is_parsed_once_per_process_from_config_to_boundaries(tiny_cell):
    """A whole single-process run: validate (twice, as the cell process does) and train."""
    from suite.pipeline.runtime import run

    cfg = tiny_cell(plan={"forward": "ef(topk(ratio=0.25))", "backward": "quant(bits=8)"}, steps=1)
    _parse.cache_clear()
    _RESOLVED.clear()
    run(cfg.validate())
    # the three texts given, none (dp) and the canonical spellings that differ from them: all parsed once
    texts = {"ef(topk(ratio=0.25))", "quant(bits=8)", "none"}
    assert _parse.cache_info().misses == len(texts)


def test_nesting_is_bounded_before_parsing_and_builds_stay_cheap():
    deep = "topk(ratio=0.1)"
    for _ in range(16):
        deep = f"ef({deep})"
    with pytest.raises(CompressorError, match=f"nests 17 levels of parentheses; at most {MAX_DEPTH} are allowed"):
        parse_spec(deep)
    flat = "quant(" + ", ".join(["4"] * 3000) + ")"  # long but shallow: parsed (then refused by build)
    assert len(parse_spec(flat).args) == 3000
    with pytest.raises(CompressorError, match="too long"):
        parse_spec("quant(" + ", ".join(["4"] * 5000) + ")")
    assert parse_spec("quant(scale='((((((((((')").kwargs == (("scale", "(" * 10),)  # quoted parens do not count


def test_dry_run_of_the_deepest_allowed_wrapper_stack_builds_it_once(capsys, tmp_path, monkeypatch):
    """Issue 12 item 7: a 16-deep ef(...) took > 120 s in --dry-run (each validator built it again, and
    each build doubles per level). Now: refused at once; the deepest allowed one is built once per process."""
    from compressors import registry

    deep = "topk(ratio=0.1)"
    for _ in range(16):
        deep = f"ef({deep})"
    assert (
        main(
            [
                "run",
                "--task",
                "tiny",
                "--plugin",
                TINY_TASK,
                "--compressor",
                deep,
                "--dry-run",
                "--results",
                str(tmp_path / "s.jsonl"),
            ]
        )
        == 2
    )
    assert "levels of parentheses" in capsys.readouterr().err
    allowed = "topk(ratio=0.1)"
    for _ in range(MAX_DEPTH - 1):
        allowed = f"ef({allowed})"
    builds = []
    real = registry.build
    monkeypatch.setattr("suite.pipeline.plan.build", lambda s: builds.append(str(s)) or real(s))
    _RESOLVED.clear()
    assert (
        main(
            [
                "run",
                "--task",
                "tiny",
                "--plugin",
                TINY_TASK,
                "--compressor",
                allowed,
                "--seeds",
                "3",
                "--dry-run",
                "--results",
                str(tmp_path / "s.jsonl"),
            ]
        )
        == 0
    )
    assert builds.count(allowed) == 1  # three seeds, forward and backward: one build
