"""``mpcbench submit records/<entry>``: validate, run the missing ``none`` baselines here, preview."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from suite.bench.cli import main
from suite.bench.provenance import _file_hash
from suite.bench.store import read_jsonl
from suite.bench.submit import screenshot_commands

REPO = Path(__file__).resolve().parents[3]
TINY = str(REPO / "tests" / "fixtures" / "tiny_task.py")
PLUGIN = '''
import torch
from compressors import Compressor, check_finite, register


@register("halfway")
class Halfway(Compressor):
    """fp16 on the wire."""

    def compress(self, x, info):
        check_finite(x, info, self.name)
        return (x.detach().to(torch.float16),)

    def decompress(self, payload, info):
        return payload[0].to(info.dtype)
'''


def _entry(tmp_path: Path) -> Path:
    entry = tmp_path / "records" / "halfway-fp16"
    entry.mkdir(parents=True)
    (entry / "plugin.py").write_text(PLUGIN)
    (entry / "entry.yaml").write_text(
        f'name: halfway\nsubmitter: someone\ndate: "2026-11-24"\nplugin: plugin.py\n'
        f"plugin_hash: {_file_hash(entry / 'plugin.py')}\n"
    )
    return entry


def test_submit_runs_the_missing_baseline_once_and_stores_portable_paths(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    entry = _entry(tmp_path)
    rc = main(
        [
            "run",
            "--task",
            "tiny",
            "--plugin",
            TINY,
            "--plugin",
            str(entry / "plugin.py"),
            "--compressor",
            "halfway",
            "--no-baseline",
            "--results",
            str(entry / "results.jsonl"),
            "--no-progress",
        ]
    )
    assert rc == 0
    (mine,), _ = read_jsonl(entry / "results.jsonl")
    assert "plugin.py" in mine["config"]["plugins"] and "plugin:plugin.py" in mine["provenance"]["plugin_hashes"]
    assert str(tmp_path) not in json.dumps(mine)  # nothing of the submitter's folders

    capsys.readouterr()
    rc = main(["submit", str(entry), "--no-screenshots", "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert "running 1 missing baseline cell(s) on this machine" in err and "ok       tiny-none-seed0" in err
    (base,), problems = read_jsonl(entry / "baselines.jsonl")
    assert problems == [] and base["compressor"] == "none" and base["status"] == "ok"
    assert (base["task"], base["tier"], base["seed"]) == (mine["task"], mine["tier"], mine["seed"])

    rc = main(["submit", str(entry), "--no-screenshots"])  # now complete: nothing runs
    err = capsys.readouterr().err
    assert rc == 0 and "every record has its none baseline" in err and "running" not in err
    assert len(read_jsonl(entry / "baselines.jsonl")[0]) == 1


def test_submit_writes_a_first_entry_yaml_with_the_plugin_hash(tmp_path, capsys):
    entry = tmp_path / "records" / "fresh"
    entry.mkdir(parents=True)
    (entry / "plugin.py").write_text(PLUGIN)
    (entry / "results.jsonl").write_text("")
    assert main(["submit", str(entry), "--no-screenshots", "--no-baselines"]) == 1  # valid, but no records yet
    err = capsys.readouterr().err
    assert f"wrote {entry / 'entry.yaml'}" in err and "no ok records yet" in err
    text = (entry / "entry.yaml").read_text()
    assert 'name: "fresh"' in text and f"plugin_hash: {_file_hash(entry / 'plugin.py')}" in text


def test_submit_refuses_an_invalid_entry_before_running_anything(tmp_path, capsys):
    entry = _entry(tmp_path)
    (entry / "plugin.py").write_text(PLUGIN + "\n# edited after hashing\n")
    (entry / "results.jsonl").write_text("")
    rc = main(["submit", str(entry), "--no-screenshots"])
    out, err = capsys.readouterr()
    assert rc == 1 and "plugin_hash" in out and "fix them, then run this again" in err
    assert not (entry / "baselines.jsonl").exists()
    assert main(["submit", str(tmp_path / "nope")]) == 2


def test_screenshot_commands_name_each_view_of_the_entry(tmp_path):
    entry = tmp_path / "records" / "mine"
    cmds = screenshot_commands(
        entry, tmp_path / "out", [("cifar10", "quick"), ("sst2", "quick")], rule="time_to_target", network="1Gbps"
    )
    assert cmds[0] == [
        sys.executable,
        "-m",
        "leaderboard.screenshot",
        str(tmp_path / "out" / "mine-cifar10-quick.png"),
        "--records",
        str(entry.parent),
        "--task",
        "cifar10",
        "--tier",
        "quick",
        "--rule",
        "time_to_target",
        "--network",
        "1Gbps",
        "--entry",
        "mine",
    ]
    assert cmds[1][cmds[1].index("--task") + 1] == "sst2"


def test_submit_checks_for_chromium_before_running_anything(tmp_path, capsys, monkeypatch):
    entry = _entry(tmp_path)
    monkeypatch.setenv("MPCBENCH_CHROMIUM", str(tmp_path / "no-such-chromium"))
    import suite.bench.runner as runner

    monkeypatch.setattr(runner, "run_cells", lambda *a, **k: pytest.fail("baselines ran before the chromium check"))
    rc = main(["submit", str(entry)])
    err = capsys.readouterr().err
    assert rc == 1 and "the previews need chromium, which is not found" in err and "--no-screenshots" in err
    assert not (entry / "baselines.jsonl").exists()
