"""The option table: ``mpcbench run`` and ``pytest suite`` accept the same options, from one row each."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from suite.bench.cli import CLI_RUN_OPTIONS, _add_executor_options, build_parser
from suite.bench.options import (
    RUN_OPTIONS,
    Choices,
    Option,
    Selection,
    add_short_pytest_aliases,
    add_to_argparse,
    add_to_pytest,
    selection_from,
)


class _Group:
    """Stands in for a pytest option group: records what is added."""

    def __init__(self) -> None:
        self.added: dict[str, dict] = {}

    def addoption(self, *names: str, **kw) -> None:
        for n in names:
            self.added[n] = kw


def _run_flags() -> set[str]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return {s for a in sub.choices["run"]._actions for s in a.option_strings} - {"-h", "--help"}


def test_both_front_ends_accept_the_same_options():
    group, short = _Group(), _Group()
    add_to_pytest(group, taken=set())
    add_short_pytest_aliases(short, taken=set())
    assert all(n.startswith("--mpcbench-") for n in group.added)  # the plugin: prefixed spellings only
    pytest_flags = set(short.added)
    executor = argparse.ArgumentParser(add_help=False)
    _add_executor_options(executor)  # -j / --executor: pytest has its own (pytest-xdist's -n)
    cli_only = {o.flag for o in CLI_RUN_OPTIONS} | {s for a in executor._actions for s in a.option_strings}
    assert pytest_flags == _run_flags() - cli_only
    assert {"--forward", "--schedule", "--microbatches", "--dry-run"} <= pytest_flags  # missing from pytest before
    assert {f"--mpcbench-{f[2:]}" for f in pytest_flags} == set(group.added)
    assert all(group.added[f"--mpcbench-{f[2:]}"] == short.added[f] for f in pytest_flags)  # same dest and kwargs


def test_a_taken_name_keeps_its_owner_and_the_prefixed_spelling_works():
    group, short = _Group(), _Group()
    add_to_pytest(group, taken={"--seeds"})
    add_short_pytest_aliases(short, taken={"--seeds"})
    assert "--seeds" not in short.added and "--mpcbench-seeds" in group.added


def test_selection_has_one_field_per_row_with_a_field():
    assert [f.name for f in dataclasses.fields(Selection)] == [o.field for o in RUN_OPTIONS if o.field]


def test_both_front_ends_give_the_same_selection(tmp_path):
    argv = [
        "--task",
        "tiny",
        "--forward",
        "fp16",
        "--backward",
        "none",
        "--seeds",
        "0,2",
        "--schedule",
        "gpipe",
        "--microbatches",
        "2",
        "--plugin",
        "p.py",
        "--no-baseline",
        "--data-dir",
        "d",
        "--device",
        "cpu",
    ]
    cli = build_parser().parse_args(["run", *argv])
    group_parser = argparse.ArgumentParser()
    for o in RUN_OPTIONS:  # what pytest does, with pytest's dest prefix dropped
        group_parser.add_argument(o.flag, dest=o.dest, **o.add_kwargs())
    via_pytest = group_parser.parse_args(argv)
    a, b = selection_from(vars(cli), tmp_path), selection_from(vars(via_pytest), tmp_path)
    assert a == b
    assert a.seeds == (0, 2) and a.baseline is False and a.plugins == (str(tmp_path / "p.py"),)
    assert a.data_dir == str(tmp_path / "d") and (a.schedule, a.microbatches) == ("gpipe", 2)


def test_adding_an_option_is_one_row():
    row = Option("--frobnicate", None, int, help="a new switch")
    p = argparse.ArgumentParser()
    add_to_argparse(p, RUN_OPTIONS + (row,))
    group = _Group()
    add_to_pytest(group, set(), RUN_OPTIONS + (row,))
    add_short_pytest_aliases(group, set(), RUN_OPTIONS + (row,))
    assert p.parse_args(["--frobnicate", "3"]).frobnicate == 3
    assert {"--frobnicate", "--mpcbench-frobnicate"} <= set(group.added)


def test_choices_are_read_from_their_registry_on_first_use():
    from suite.pipeline.config import DEVICES, MODES, SCHEDULES

    calls = []
    lazy = Choices(lambda: calls.append(1) or ("a", "b"))
    assert calls == []
    assert "a" in lazy and list(lazy) == ["a", "b"] and calls == [1]
    by_flag = {o.flag: o for o in RUN_OPTIONS}
    assert tuple(by_flag["--schedule"].choices) == tuple(SCHEDULES) == ("gpipe", "1f1b", "interleaved_1f1b")
    assert tuple(by_flag["--mode"].choices) == ("auto", *MODES)  # auto: torchrun for submitted compressors
    assert tuple(by_flag["--device"].choices) == DEVICES


@pytest.mark.parametrize("flag,value", [("--schedule", "zigzag"), ("--device", "tpu"), ("--mode", "mpi")])
def test_a_bad_choice_is_refused_by_the_cli(flag, value, capsys):
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["run", flag, value])
    assert e.value.code == 2 and f"invalid choice: '{value}'" in capsys.readouterr().err


def test_the_ranking_rules_come_from_the_leaderboard():
    from leaderboard.ranking import RULES

    args = build_parser().parse_args(["report", "--rule", next(iter(RULES))])
    assert args.rule in RULES
    with pytest.raises(SystemExit):
        build_parser().parse_args(["report", "--rule", "best_vibes"])


def test_an_option_row_and_the_selection_dataclass_cannot_drift(monkeypatch):
    import suite.bench.options as options

    options._check_selection_matches_the_table()  # the shipped table and dataclass agree
    monkeypatch.setattr(options, "RUN_OPTIONS", options.RUN_OPTIONS + (Option("--new-thing", "new_thing"),))
    with pytest.raises(TypeError, match="new_thing"):
        options._check_selection_matches_the_table()
    rows = tuple(dataclasses.replace(o, default="quick") if o.flag == "--tier" else o for o in RUN_OPTIONS)
    monkeypatch.setattr(options, "RUN_OPTIONS", rows)
    with pytest.raises(TypeError, match="Selection.tier defaults to 'smoke'"):
        options._check_selection_matches_the_table()
