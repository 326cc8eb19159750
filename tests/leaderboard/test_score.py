"""The benchmark score: performance profiles over (task, network) pairs on a hand-made store
whose answer is known (issue 24, item 5)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from leaderboard.score import benchmark_score, profile_score

INF = math.inf


def _agg(times: dict[tuple[str, str], dict[str, dict[int, float]]]) -> pd.DataFrame:
    """times[(task, compressor)][network] = {seed: seconds}."""
    rows = []
    for (task, comp), per_net in times.items():
        row = {"task": task, "tier": "quick", "entry": "e", "compressor": comp, "setup": "", "n": 3}
        for net, ts in per_net.items():
            row[f"times@{net}"] = ts
            row[f"time_to_target_s@{net}"] = math.nan
        rows.append(row)
    return pd.DataFrame(rows)


def test_profile_score_integrates_the_step_function():
    assert profile_score([1.0, 1.0]) == 1.0
    assert profile_score([2.0]) == pytest.approx(2 / 3)  # rho = 1 on [2, 4]: 2 of the 3 units
    assert profile_score([4.0, INF]) == 0.0
    assert profile_score([1.0, INF]) == 0.5


def test_scores_curves_and_pairs_on_a_known_store():
    s = {0: 10.0, 1: 10.0, 2: 10.0}
    times = {
        # task a: A fastest, B twice as slow, C never reaches the target on one seed
        ("a", "A"): {"fast": s, "slow": {k: 20.0 for k in s}},
        ("a", "B"): {"fast": {k: 20.0 for k in s}, "slow": {k: 20.0 for k in s}},
        ("a", "C"): {"fast": {0: 5.0, 1: 5.0, 2: INF}, "slow": {k: 80.0 for k in s}},
        # task b: everyone equal
        ("b", "A"): {"fast": s, "slow": s},
        ("b", "B"): {"fast": s, "slow": s},
        ("b", "C"): {"fast": s, "slow": s},
        ("b", "D"): {"fast": s, "slow": s},  # D did not run task a: left out, not scored as never reaching
    }
    r = benchmark_score(_agg(times), resamples=20)
    assert r.pairs == [("a", "fast"), ("a", "slow"), ("b", "fast"), ("b", "slow")]
    assert r.left_out == ["e / D"]
    got = dict(zip(r.table["compressor"], r.table["score"]))
    # ratios A: 1, 1, 1, 1; B: 2, 1, 1, 1; C: inf (a seed never reached), 4, 1, 1
    assert got["A"] == pytest.approx(1.0)
    assert got["B"] == pytest.approx((2 / 3 + 3) / 4)
    assert got["C"] == pytest.approx(2 / 4)
    assert list(r.table["compressor"]) == ["A", "B", "C"]
    curve = r.curves[r.curves["row"] == "e / B"].set_index("tau")["fraction"]
    assert curve.loc[1.0] == 0.75 and curve.loc[2.0] == 1.0
    c = r.curves[r.curves["row"] == "e / C"].set_index("tau")["fraction"]  # ratios inf, 4, 1, 1
    assert c.loc[1.0] == 0.5 and c.loc[3.99] == 0.5 and c.loc[4.0] == 0.75
    a = r.curves[r.curves["row"] == "e / A"]
    assert len(a) == 301 and (a["fraction"] == 1.0).all() and list(r.curves.columns) == ["row", "tau", "fraction"]
    # C's unreached seed makes its score move under resampling; a draw without it makes C (5 s) the
    # best on (a, fast), so A's ratio there moves to 2 as well, yet A stays first in every draw
    sd = dict(zip(r.table["compressor"], r.table["score_sd"]))
    assert sd["C"] > 0.0 and sd["A"] > 0.0
    assert r.table.set_index("compressor").loc["A", "first_in"] == 1.0


def test_resampling_is_reproducible():
    times = {("a", "A"): {"n": {0: 9.0, 1: 11.0, 2: 10.0}}, ("a", "B"): {"n": {0: 10.0, 1: 12.0, 2: 9.5}}}
    one = benchmark_score(_agg(times), resamples=50, seed=3).table
    two = benchmark_score(_agg(times), resamples=50, seed=3).table
    pd.testing.assert_frame_equal(one, two)


def _reference_bootstrap(seed_times, pairs, resamples, seed):
    """The bootstrap as first written (one ``randrange`` per draw, one ``_row_time`` per row and pair):
    the reference the vectorized :func:`leaderboard.score._bootstrap` must equal number for number."""
    import random

    import numpy as np

    from leaderboard.score import _ratios, _row_time

    rng = random.Random(seed)
    boot = np.zeros((resamples, len(seed_times)))
    for b in range(resamples):
        t_b = np.empty((len(seed_times), len(pairs)))
        for i, row in enumerate(seed_times):
            draws: dict[str, list[int]] = {}
            for j, ((task, _p), st) in enumerate(zip(pairs, row)):
                seeds = sorted(st)
                if task not in draws:
                    draws[task] = [rng.randrange(len(seeds)) for _ in seeds] if seeds else []
                idx = draws[task]
                t_b[i, j] = _row_time({n: st[seeds[x]] for n, x in enumerate(idx)}) if seeds else INF
        boot[b] = [profile_score(list(r)) for r in _ratios(t_b)]
    return boot


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_the_vectorized_bootstrap_equals_the_one_draw_at_a_time_reference(seed):
    import random

    import numpy as np

    from leaderboard.score import _bootstrap

    rnd = random.Random(100 + seed)
    pairs = [(t, p) for t in ("a", "b", "c") for p in ("fast", "slow")]
    seed_times = []
    for _row in range(9):
        row = []
        for _task in ("a", "b", "c"):
            n = rnd.choice([0, 1, 2, 3, 5, 8, 17])  # 0: the row has no seeds on this task
            seeds = rnd.sample(range(40), n)
            for _p in ("fast", "slow"):
                st = {s: rnd.choice([rnd.uniform(1, 100), rnd.uniform(1, 100), INF, math.nan]) for s in seeds}
                row.append(st)
        seed_times.append(row)
    seed_times[0][1] = {}  # a pair without seeds after one with seeds
    got = _bootstrap(seed_times, pairs, 40, seed)
    want = _reference_bootstrap(seed_times, pairs, 40, seed)
    np.testing.assert_array_equal(got, want)  # the same draws and the same additions: equal, not close


def test_the_draw_stream_is_randrange():
    import random

    from leaderboard.score import _randrange_stream

    bounds = [1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 31, 32, 33, 1000, 2**31 - 1, 2**31, 2**32 - 1]
    rng, ref = random.Random(5), random.Random(5)
    got = _randrange_stream(rng, bounds, 300)
    assert got.tolist() == [[ref.randrange(n) for n in bounds] for _ in range(300)]
    # (the stream reads its words ahead: a generator is used for one stream only, as the bootstrap does)
    small = [3, 1, 200, 256]  # every draw fits a byte
    rng, ref = random.Random(6), random.Random(6)
    assert _randrange_stream(rng, small, 50).tolist() == [[ref.randrange(n) for n in small] for _ in range(50)]
    huge = [5, 2**32, 2**40]  # beyond one 32-bit word: randrange itself
    rng, ref = random.Random(7), random.Random(7)
    assert _randrange_stream(rng, huge, 5).tolist() == [[ref.randrange(n) for n in huge] for _ in range(5)]


@pytest.mark.parametrize(
    "bounds",
    [
        [n for n in (27, 28, 5, 1, 28, 30, 27) * 40 for _ in range(n)],  # runs of seeds per row and task
        [3] * 300,
        [1] * 300,  # one bit, half the words refused
        [2**31 - 1] * 150 + [5] * 150,
        [256, 255, 7] * 100,  # runs of one draw each
        [60000] * 300,
    ],
)
def test_the_draws_by_runs_are_randrange(bounds):
    """The pass-at-a-time draws (a window of words per pass, two look-ups per run) are randrange's."""
    import random

    from leaderboard.score import _randrange_runs, _randrange_stream

    for seed in (0, 11):
        want = (lambda r: [[r.randrange(n) for n in bounds] for _ in range(25)])(random.Random(seed))
        assert _randrange_runs(random.Random(seed), bounds, 25).tolist() == want
        assert _randrange_stream(random.Random(seed), bounds, 25).tolist() == want


# --------------------------------------------------------------------------- issue 36: a correct score
def _agg_full(rows: list[dict]) -> pd.DataFrame:
    """Aggregate-like rows with the columns the score reads (setup, machine, baseline_*, metric_mean, totals)."""
    out = []
    for r in rows:
        base = {"tier": "quick", "entry": "e", "setup": "s", "machine": "m", "n": 3, "baseline_entry": "e"}
        base.update({"baseline_setup": "s", "baseline_machine": "m", "metric_mean": math.nan})
        base.update(r)
        for net, ts in r.get("times", {}).items():
            base[f"times@{net}"] = ts
            base[f"time_to_target_s@{net}"] = math.nan
        base.pop("times", None)
        out.append(base)
    return pd.DataFrame(out)


def test_the_baseline_row_is_the_setup_the_rankings_compare_with():
    s3 = {0: 10.0, 1: 10.0, 2: 10.0}
    slow = {k: 40.0 for k in s3}
    rows = [
        {"task": "a", "compressor": "A", "times": {"n": {k: 20.0 for k in s3}}},
        {"task": "b", "compressor": "A", "times": {"n": {k: 20.0 for k in s3}}},
        # the pipeline setup's none (the rows' baseline) and a tp=2 none with as many seeds, listed last
        {"task": "a", "compressor": "none", "times": {"n": s3}},
        {"task": "b", "compressor": "none", "times": {"n": s3}},
        {"task": "a", "compressor": "none", "setup": "tp=2", "times": {"n": slow}},
        {"task": "b", "compressor": "none", "setup": "tp=2", "times": {"n": slow}},
    ]
    r = benchmark_score(_agg_full(rows), resamples=0)
    got = dict(zip(r.table["compressor"], r.table["score"]))
    # none (10 s) is fastest on both tasks and A takes twice as long; the old rule (most seeds, the last
    # row wins a tie) scored the tp=2 none (40 s), which made A fastest and none 1/3
    assert got["none"] == pytest.approx(1.0) and got["A"] == pytest.approx(2 / 3)


def test_rows_that_miss_the_target_are_ordered_by_quality_to_target():
    s3 = {0: 10.0, 1: 10.0, 2: 10.0}
    never = {k: INF for k in s3}
    # cifar10 quick: trivial 0.105, target 0.45; shakespeare quick: trivial 3.35, target 2.35
    rows = [
        {"task": "cifar10", "compressor": "none", "times": {"n": s3}, "metric_mean": 0.50},
        {"task": "shakespeare", "compressor": "none", "times": {"n": s3}, "metric_mean": 2.14},
        {"task": "cifar10", "compressor": "threshold", "times": {"n": never}, "metric_mean": 0.12},
        {"task": "shakespeare", "compressor": "threshold", "times": {"n": never}, "metric_mean": 3.36},
        {"task": "cifar10", "compressor": "topk", "times": {"n": never}, "metric_mean": 0.41},
        {"task": "shakespeare", "compressor": "topk", "times": {"n": never}, "metric_mean": 3.3},
    ]
    r = benchmark_score(_agg_full(rows), resamples=0)
    assert list(r.table["compressor"]) == ["none", "topk", "threshold"]  # both score 0; topk got further
    prog = dict(zip(r.table["compressor"], r.table["progress"]))
    assert prog["none"] == 1.0
    assert prog["topk"] == pytest.approx(((0.41 - 0.105) / (0.45 - 0.105) + 0.05) / 2)
    assert prog["threshold"] == pytest.approx(((0.12 - 0.105) / (0.45 - 0.105) + 0.0) / 2)


def test_the_headline_ranks_full_seed_rows_and_lists_the_others_apart():
    s3 = {0: 10.0, 1: 10.0, 2: 10.0}
    rows = [
        {"task": "a", "compressor": "none", "times": {"n": s3}},
        {"task": "a", "compressor": "A", "times": {"n": {0: 20.0, 1: 20.0, 2: 20.0}}},
        {"task": "a", "compressor": "lucky", "n": 1, "times": {"n": {0: 5.0}}},  # one fast seed
    ]
    r = benchmark_score(_agg_full(rows), resamples=10, full_seeds=3)
    t = r.table.set_index("compressor")
    assert list(r.table["compressor"][r.table["ranked"]]) == ["none", "A"]
    # the headline's ratios are to the fastest ranked row: the 1-seed row moves nobody
    assert t.loc["none", "score"] == 1.0 and t.loc["lucky", "ranked"] == False  # noqa: E712
    assert t.loc["lucky", "score"] == 1.0 and t.loc["lucky", "score_sd"] != t.loc["lucky", "score_sd"]


def test_networks_of_one_regime_share_its_weight():
    s3 = {0: 10.0, 1: 10.0, 2: 10.0}
    rows = [
        # none's modeled totals: 100 and 101 s (compute-bound, near duplicates), 500 s (communication-bound)
        {"task": "a", "compressor": "none", "times": {"g100": s3, "g10": s3, "m80": s3},
         "total_s@g100": 100.0, "total_s@g10": 101.0, "total_s@m80": 500.0},
        {"task": "a", "compressor": "A", "times": {"g100": {k: 20.0 for k in s3}, "g10": {k: 20.0 for k in s3},
                                                    "m80": {k: 5.0 for k in s3}}},
    ]  # fmt: skip
    r = benchmark_score(_agg_full(rows), resamples=0)
    assert r.regimes == {
        ("a", "g100"): "compute-bound",
        ("a", "g10"): "compute-bound",
        ("a", "m80"): "communication-bound",
    }
    assert r.weights == pytest.approx([0.75, 0.75, 1.5])  # each regime half the task, mean weight 1
    got = dict(zip(r.table["compressor"], r.table["score"]))
    # A: ratio 2 on both compute-bound networks (2/3 each), fastest on the slow one; equal weights would give 7/9
    assert got["A"] == pytest.approx(0.5 * 2 / 3 + 0.5 * 1.0)
    assert got["none"] == pytest.approx(0.5 * 1.0 + 0.5 * (4 - 2) / 3)
