"""suite.results.tier_spread: the MDD inputs are measured from records, not typed in."""

from __future__ import annotations

import json
import math

import pytest

from suite.results.tier_spread import SPREAD_FILE, load_spread, main, measure_spread


def _rec(task, seed, metric, *, key=None, created="2026-11-25T10:00:00", status="ok", plan=None, compressor="none"):
    return {
        "cell_key": key or f"{task}-{seed}",
        "task": task,
        "tier": "quick",
        "seed": seed,
        "status": status,
        "compressor": compressor,
        "final_metric": metric,
        "metric_name": "accuracy",
        "created": created,
        "config": {"plan": plan or {"forward": "none", "backward": "none", "dp": "none"}, "steps": None},
        "run": {"steps": 480, "dp": 1},
        "provenance": {"machine": {"cpu": "CPU X", "cpu_count": 2}, "git_commit": "abcdef123"},
    }


def test_seed_std_is_the_sample_std_of_the_latest_none_records():
    recs = [
        _rec("cifar10", 0, 0.50),
        _rec("cifar10", 1, 0.52),
        _rec("cifar10", 2, 0.40, created="2026-11-24"),  # superseded by the later record of its key
        _rec("cifar10", 2, 0.54, created="2026-11-26"),
        _rec("cifar10", 3, 0.10, status="failed"),
        _rec("cifar10", 4, 0.99, compressor="topk", plan={"forward": "topk", "backward": "topk", "dp": "none"}),
    ]
    tp = _rec("cifar10", 0, 0.77, key="cifar10-0-tp2", created="2026-11-27")  # the tensor-parallel group's none
    tp["config"]["tp"] = 2
    recs.append(tp)
    known = [{"task": "cifar10", "tier": "quick", "eval_samples": 2048, "seed_std": 9.0, "seeds": {}}]
    (e,) = measure_spread(recs, known)
    assert e["seeds"] == {"0": 0.5, "1": 0.52, "2": 0.54}
    assert e["seed_std"] == pytest.approx(0.02, abs=1e-9)
    assert e["eval_samples"] == 2048  # the tier's budget is kept
    assert "commit abcdef1" in e["source"]


def test_single_seed_tasks_keep_their_known_entry():
    known = [{"task": "sst2", "tier": "quick", "seed_std": 0.01, "seeds": {"0": 1, "1": 2}}]
    assert measure_spread([_rec("sst2", 0, 0.7)], known) == known


def test_the_shipped_file_is_consistent_with_its_seeds():
    for e in load_spread():
        vals = list(e["seeds"].values())
        m = sum(vals) / len(vals)
        std = math.sqrt(sum((v - m) ** 2 for v in vals) / (len(vals) - 1))
        assert e["seed_std"] == pytest.approx(std, abs=2e-4), e["task"]


def test_cli_prints_without_writing(tmp_path, capsys):
    store = tmp_path / "s.jsonl"
    store.write_text("\n".join(json.dumps(_rec("cifar10", s, 0.5 + s / 100)) for s in range(3)) + "\n{torn")
    before = SPREAD_FILE.read_text()
    assert main([str(store)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert any(e["task"] == "cifar10" and e["seeds"]["2"] == 0.52 for e in out["spread"])
    assert SPREAD_FILE.read_text() == before
