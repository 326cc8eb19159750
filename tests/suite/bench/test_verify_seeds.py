"""Issue 45: tolerances no entry can widen. A plugin that recognises the verifier's seeds (they were ~1e9;
recorded seeds are 0-2; the seed is in the worker's config) and answers them with noise widened the spread
its recorded seeds were held to, until a seed forged 0.5 nats better than the truth was "within" it. Now the
spread is the maintainers' measured one of the task and tier (capped), the verifier's seeds look like
recorded ones (0-99), and a plugin that tells them apart anyway fails its own row."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from test_verify import MACHINE, _fake_entry, _rec  # noqa: E402

from suite.bench.verify import report, sampling, tolerances  # noqa: E402
from suite.bench.verify.rerun import Rerun  # noqa: E402

TRUTH = 1.50  # the setup's honest loss at every seed (within the tier's spread)


def _task() -> tuple[str, str]:
    from leaderboard.statistics import MEASURED_SPREAD

    return next(k for k, v in MEASURED_SPREAD.items() if k[1] == "quick" and v.seed_std < 0.1)


def _entry_row(task: str, tier: str, forged: float) -> list[dict]:
    out = []
    for s, m in ((0, TRUTH), (1, TRUTH - forged)):
        r = _rec(cell_id=f"c{s}", key=f"k{s}", seed=s, task=task, metric=m, config={"task": task, "seed": s})
        r["tier"] = tier
        out.append(r)
    return out


def _run(tmp_path, monkeypatch, recs, plugin) -> tuple[dict, list[int]]:
    entry = _fake_entry(tmp_path, monkeypatch, recs)
    ran: list[int] = []

    def fake_run(rec, *a, **kw):  # the plugin's behaviour at the seed the verifier runs it at
        ran.append(rec["seed"])
        return Rerun({**copy.deepcopy(rec), "final_metric": plugin(rec["seed"])}, dict(MACHINE), [0.4])

    monkeypatch.setattr(report, "run_cell_contained", fake_run)
    seed = next(s for s in range(100) if next(iter(sampling.sample_rows(recs, s, 0.0).values()))[0]["seed"] == 0)
    return report.verify_entry(entry, base="HEAD", seed=seed, fraction=0.0, write=False), ran


def _noise_at_big_seeds(seed: int) -> float:
    return TRUTH + (3.0 if seed >= 1_000_000 else 0.0)  # noise far outside any spread


def _noise_at_unrecorded_seeds(seed: int) -> float:
    return TRUTH + (3.0 if seed not in (0, 1, 2) else 0.0)


@pytest.mark.parametrize("plugin", [_noise_at_big_seeds, _noise_at_unrecorded_seeds])
def test_a_plugin_that_detects_the_verifiers_seeds_is_refused(tmp_path, monkeypatch, plugin):
    task, tier = _task()
    out, ran = _run(tmp_path, monkeypatch, _entry_row(task, tier, forged=0.5), plugin)
    (row,) = out["rows"]
    assert row["status"] == "failed", out["cells"]
    assert all(0 <= s < tolerances.SEED_RANGE for s in ran)  # the verifier's seeds look like recorded ones
    forged = next(c for c in out["cells"] if c["record_id"].startswith("c1"))
    assert forged["status"] == "mismatch"  # held to the maintainers' spread, which no noise widens
    cap = tolerances.CAP_FACTOR * tolerances.tier_spread({"task": task, "tier": tier})
    assert cap < 0.5 / (tolerances.K_SPREAD * 2**0.5)


def test_a_plugin_that_misbehaves_only_at_unrecorded_seeds_fails_even_with_honest_records(tmp_path, monkeypatch):
    task, tier = _task()
    out, _ = _run(tmp_path, monkeypatch, _entry_row(task, tier, forged=0.0), _noise_at_unrecorded_seeds)
    (row,) = out["rows"]
    held = next(c for c in out["cells"] if c["kind"] == "held-out")
    assert held["status"] == "mismatch" and "held-out seed" in held["detail"]
    assert row["status"] == "failed"


def test_an_honest_row_verifies_across_seeds(tmp_path, monkeypatch):
    task, tier = _task()
    out, ran = _run(tmp_path, monkeypatch, _entry_row(task, tier, forged=0.0), lambda s: TRUTH)
    (row,) = out["rows"]
    assert row["status"] == "verified", out["cells"]
    assert len(ran) == 2 and ran[0] == 0 and ran[1] < tolerances.SEED_RANGE  # the row's re-run + one held-out seed
