"""Issue 18: ``mpcbench report`` prints the minimal detectable difference of every task and tier."""

from __future__ import annotations

import re

from leaderboard.statistics import MEASURED_SPREAD, minimal_detectable_difference
from suite.bench.cli import main


def test_report_prints_the_mdd_per_task_from_seeds_and_from_the_measured_spread(tmp_path, lb, capsys):
    recs = []
    for seed in range(3):
        for c, q in (("none", 0.50), ("fp16", 0.49)):
            r = lb.make_record("cifar10", c, seed, record_id=f"{c}-{seed}")
            r["final_metric"] = q + 0.01 * seed * (1 if c == "none" else -1)
            recs.append(r)
    store = lb.write_jsonl(tmp_path / "store.jsonl", recs)
    assert main(["report", "--results", str(store), "--rule", "quality_at_ratio"]) == 0
    raw = capsys.readouterr().out
    assert all(len(l) <= 120 for l in raw.splitlines())
    out = raw.replace("\n  ", " ")  # wrapped at the report's width
    lines = [l for l in out.splitlines() if l.startswith("minimal detectable difference")]
    assert len(lines) == 1, lines
    known = MEASURED_SPREAD[("cifar10", "quick")]
    expected = minimal_detectable_difference(known.seed_std, 3, 3)
    assert f"{expected:.3g} for 3 vs 3 seeds at the measured seed std {known.seed_std:.3g}" in lines[0]
    per_row = float(re.search(r"\): ([0-9.]+)", lines[0]).group(1))  # from the rows' own seeds (std 0.01 each side)
    assert abs(per_row - minimal_detectable_difference(0.01, 3, 3)) < 1e-3
