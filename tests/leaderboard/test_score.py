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
