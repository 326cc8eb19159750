"""One benchmark score: performance profiles over (task, network) pairs, as the AlgoPerf benchmark does.

    result = benchmark_score(agg, tier="quick")
    result.table      # one row per compressor: score, its spread under seed resampling, pairs won
    result.curves     # tau -> fraction of pairs within tau of the best, per compressor

For a row ``e`` (an entry's compressor; on each task its setup with the most seeds) and a pair ``p`` = (task, network
profile), ``r(e, p) = t(e, p) / min_e' t(e', p)``, where ``t`` is the mean modeled
time-to-target over the row's seeds, and infinite when any seed never reached the target (a
target not reached every time is not reached). The profile ``rho_e(tau)`` is the fraction of
pairs with ``r <= tau``; the score is its mean over ``tau`` in [1, TAU_MAX]:
``mean_p max(0, TAU_MAX - r) / (TAU_MAX - 1)`` (exact: rho is a step function). 1 = fastest on
every pair; 0 = never within TAU_MAX of the fastest.

The pairs are the tier's tasks chosen to cover the most (rows x tasks) (:func:`_best_tasks`: a
task only the baseline ran cannot rank anyone), times every network profile the records model;
rows without results on every chosen task are left out (named in ``left_out``) rather than
scored as never reaching a target they never tried. Stability: the score is
recomputed on ``resamples`` bootstrap draws of each row's seeds (with replacement; seeded,
so the figure is reproducible): its standard deviation and 5-95% range, and how often the
row ranks first.
"""

from __future__ import annotations

import array
import itertools
import math
import random
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from leaderboard.networks import network_profiles

__all__ = ["TAU_MAX", "ScoreResult", "benchmark_score", "profile_score"]

TAU_MAX = 4.0
ROW = ["entry", "compressor"]  # one row across tasks (setups differ by task: stages)


@dataclass
class ScoreResult:
    """The score table, the profile curves, the pairs covered and the rows left out."""

    table: pd.DataFrame
    curves: pd.DataFrame
    pairs: list[tuple[str, str]]
    left_out: list[str] = field(default_factory=list)
    resamples: int = 0


def _row_time(times: dict[int, float]) -> float:
    """Mean over seeds; infinite when a seed never reached the target (or there are none)."""
    vals = list(times.values())
    if not vals or any(math.isinf(v) or v != v for v in vals):
        return math.inf
    return sum(vals) / len(vals)


def profile_score(ratios: list[float], tau_max: float = TAU_MAX) -> float:
    """The integral of the profile over tau in [1, tau_max], normalized to [0, 1]."""
    if not ratios:
        return math.nan
    return sum(max(0.0, tau_max - max(1.0, r)) for r in ratios) / ((tau_max - 1.0) * len(ratios))


def _ratios(times: np.ndarray) -> np.ndarray:
    """rows x pairs times -> ratios to each pair's best (inf where not reached or nobody reached)."""
    best = np.min(times, axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = times / best
    r[~np.isfinite(r)] = np.inf
    return r


def benchmark_score(
    agg: pd.DataFrame,
    *,
    tier: str = "quick",
    networks: list[str] | None = None,
    resamples: int = 200,
    seed: int = 0,
    taus: np.ndarray | None = None,
) -> ScoreResult:
    """Performance profiles and scores of the rows of ``agg`` (:func:`leaderboard.statistics.aggregate`)
    in ``tier`` (see the module docstring)."""
    sub = agg[(agg["tier"] == tier) & (agg["n"] > 0)]
    profiles = networks or network_profiles(sub)
    profiles = [p for p in profiles if f"times@{p}" in sub]
    taus = np.linspace(1.0, TAU_MAX, 301) if taus is None else taus
    empty = ScoreResult(
        pd.DataFrame(columns=[*ROW, "score", "row"]), pd.DataFrame(columns=["row", "tau", "fraction"]), []
    )
    if sub.empty or not profiles:
        return empty
    have: dict[tuple, set[str]] = {}
    for r in sub[[*ROW, "task"]].itertuples(index=False, name=None):
        have.setdefault(tuple(r[:-1]), set()).add(r[-1])
    tasks = _best_tasks(have)
    rows = [k for k, t in have.items() if set(tasks) <= t]
    left_out = [k for k in have if k not in rows]
    if len(rows) < 1 or not tasks:
        return ScoreResult(empty.table, empty.curves, [], [_name(k) for k in left_out])
    pairs = [(t, p) for t in tasks for p in profiles]
    by_key: dict[tuple, dict] = {}
    for r in sub.sort_values("n", kind="stable").to_dict("records"):  # per task, the setup with the most seeds
        by_key[(r["task"], *[r[c] for c in ROW])] = r
    seed_times = [[by_key[(t, *k)][f"times@{p}"] or {} for t, p in pairs] for k in rows]
    times = np.array([[_row_time(st) for st in row] for row in seed_times])
    ratios = _ratios(times)
    scores = [profile_score(list(r)) for r in ratios]
    # bootstrap over seeds: each row's seeds drawn with replacement, per pair from the same draw per task
    boot = _bootstrap(seed_times, pairs, resamples, seed)
    first = np.argmax(boot, axis=1) if resamples else np.array([], dtype=int)
    table = pd.DataFrame(
        {
            "entry": [k[0] for k in rows],
            "compressor": [k[1] for k in rows],
            "score": scores,
            "score_sd": boot.std(axis=0, ddof=1) if resamples > 1 else math.nan,
            "score_p5": np.percentile(boot, 5, axis=0) if resamples else math.nan,
            "score_p95": np.percentile(boot, 95, axis=0) if resamples else math.nan,
            "first_in": [float(np.mean(first == i)) if resamples else math.nan for i in range(len(rows))],
            "pairs_fastest": [int(np.sum(r == 1.0)) for r in ratios],
            "pairs_reached": [int(np.sum(np.isfinite(r))) for r in ratios],
            "n_pairs": len(pairs),
            "seeds": [min((len(st) for st in row), default=0) for row in seed_times],
        }
    )
    label = {k: _name(k) for k in rows}
    table["row"] = [label[k] for k in rows]
    table = table.sort_values(["score", "row"], ascending=[False, True], kind="stable").reset_index(drop=True)
    # per row and tau, the fraction of pairs within tau: rows x taus (a count over n pairs, divided once)
    within = (ratios[:, None, :] <= np.asarray(taus, dtype=float)[None, :, None]).sum(axis=2) / ratios.shape[1]
    curves = pd.DataFrame(
        {
            "row": np.repeat([label[k] for k in rows], len(taus)).tolist(),
            "tau": np.tile(np.asarray(taus, dtype=float), len(rows)).tolist(),
            "fraction": within.reshape(-1).tolist(),
        },
        columns=["row", "tau", "fraction"],
    )
    return ScoreResult(table, curves, pairs, [_name(k) for k in left_out], resamples)


def _bootstrap(seed_times: list[list[dict]], pairs: list[tuple[str, str]], resamples: int, seed: int) -> np.ndarray:
    """resamples x rows scores, each row's seeds drawn with replacement (one draw per row and task,
    used for each of the task's pairs; ``random.Random(seed)``, draws in the order: resample, row, task).

    The numbers are those of drawing with ``rng.randrange(n)`` one by one and scoring each draw
    with :func:`_row_time` and :func:`profile_score` (``tests/leaderboard/test_score.py`` compares
    them with that reference): the draws come from :func:`_randrange_stream`, the means and the
    profile integral are sequential sums in NumPy (``cumsum``), the same additions in the same order."""
    rows = len(seed_times)
    if not resamples or not rows:
        return np.zeros((resamples, rows))
    tasks = list(dict.fromkeys(t for t, _ in pairs))
    columns = {t: [j for j, (tt, _) in enumerate(pairs) if tt == t] for t in tasks}
    # one pass (one resample) draws, for each row and task, n values below n: n = the seeds of the task's first pair
    groups = [(i, t, len(seed_times[i][columns[t][0]])) for i in range(rows) for t in tasks]
    draws = _randrange_stream(random.Random(seed), [n for _, _, n in groups for _ in range(n)], resamples)
    t_b = np.full((resamples, rows, len(pairs)), math.inf)
    offset = 0
    for i, t, n in groups:
        if not n:
            continue  # no seeds on the task's first pair: no draw, every pair of the task unreached
        idx = draws[:, offset : offset + n]
        offset += n
        for j in columns[t]:
            st = seed_times[i][j]
            if not st:
                continue
            values = np.array([st[k] for k in sorted(st)], dtype=float)[idx]  # resamples x n, in draw order
            bad = ~np.isfinite(values).all(axis=1)
            with np.errstate(invalid="ignore"):
                mean = np.cumsum(values, axis=1)[:, -1] / n
            t_b[:, i, j] = np.where(bad, math.inf, mean)
    best = np.min(t_b, axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = t_b / best
    r[~np.isfinite(r)] = np.inf
    area = np.maximum(0.0, TAU_MAX - np.maximum(1.0, r))
    return np.cumsum(area, axis=2)[:, :, -1] / ((TAU_MAX - 1.0) * len(pairs))


def _randrange_stream(rng: random.Random, bounds: list[int], rounds: int) -> np.ndarray:
    """``[[rng.randrange(n) for n in bounds] for _ in range(rounds)]`` as an array: the same numbers,
    faster (no method call per draw). ``randrange(n)`` takes ``getrandbits(k)`` (k = n.bit_length()
    <= 32: the top k bits of the generator's next 32-bit word) until one is below n; here the words
    come 64 Ki at a time from ``getrandbits`` (least significant word first = first generated) and
    the same rejection runs over them. A bound of 2**32 or more (not a number of seeds) takes
    ``randrange`` itself. About 0.1 us per draw: 200 resamples of 100,000 seeds take ~2 s. The
    words are read ahead: ``rng`` is left past the draws (use it for this stream only)."""
    if not bounds:
        return np.zeros((rounds, 0), dtype=np.int64)
    if max(bounds) >= 2**32 or min(bounds) < 1:
        return np.array([[rng.randrange(n) for n in bounds] for _ in range(rounds)], dtype=np.int64)
    if len(set(bounds)) <= _RUN_CLASSES and len(bounds) >= 256:
        return _randrange_runs(rng, bounds, rounds)

    def chunks():
        while True:
            yield np.frombuffer(rng.getrandbits(32 << 16).to_bytes(4 << 16, "little"), dtype="<u4").tolist()

    nxt = itertools.chain.from_iterable(chunks()).__next__  # a C loop over the words
    plan = [(32 - n.bit_length(), n) for n in bounds]
    top = max(bounds)  # the smallest item type that holds every draw (200 x 100,000 seeds: 20 MB as bytes)
    out = array.array("B" if top <= 1 << 8 else "H" if top <= 1 << 16 else "I")
    append = out.append
    for _ in range(rounds):
        for shift, n in plan:
            r = nxt() >> shift
            while r >= n:
                r = nxt() >> shift
            append(r)
    return np.frombuffer(out, dtype=np.dtype(out.typecode)).reshape(rounds, len(bounds))  # keeps ``out`` alive


_RUN_CLASSES = 8  # distinct bounds up to which _randrange_runs is the faster (its cost per pass grows with them)


def _randrange_runs(rng: random.Random, bounds: list[int], rounds: int) -> np.ndarray:
    """:func:`_randrange_stream`'s numbers, a pass (one round of ``bounds``) at a time in NumPy:
    within a run of equal bounds n the draws are the next words whose top k bits are below n, so
    for each distinct bound the accepted positions of a window of words and their running count
    are computed once, and each run then costs two look-ups (where it starts, where its last
    accepted word is) instead of a Python step per draw; the draws are gathered at once. 1.6x
    faster than the loop at 100,000 seeds of a few distinct counts."""
    runs = [(n, len(list(g))) for n, g in itertools.groupby(bounds)]
    classes = sorted({n for n, _ in runs})
    index = {n: i for i, n in enumerate(classes)}
    shifts = [32 - n.bit_length() for n in classes]
    run_class = [index[n] for n, _ in runs]
    run_len = [m for _, m in runs]
    rc, rm = np.array(run_class), np.array(run_len)
    within = np.arange(len(bounds)) - np.repeat(np.cumsum(rm) - rm, rm)  # each draw's place in its run
    draw_shift = np.repeat(np.array(shifts, dtype=np.uint32)[rc], rm)
    top = max(bounds)
    out = np.empty(
        (rounds, len(bounds)), dtype=np.uint8 if top <= 1 << 8 else np.uint16 if top <= 1 << 16 else np.uint32
    )
    window = int(sum(m * (1 << n.bit_length()) / n for n, m in runs) * 1.25) + 1024  # ~the words a pass reads
    words, pos = np.zeros(0, dtype=np.uint32), 0
    for r in range(rounds):
        while True:
            if len(words) - pos < window:  # more words, in the order they are generated
                k = 2 * window
                fresh = np.frombuffer(rng.getrandbits(32 * k).to_bytes(4 * k, "little"), dtype="<u4")
                words, pos = np.concatenate([words[pos:], fresh]), 0
            win = words[pos : pos + window]
            accepted = [(win >> s) < n for s, n in zip(shifts, classes)]
            where = [np.flatnonzero(a) for a in accepted]
            before = [np.concatenate(([0], np.cumsum(a))) for a in accepted]  # accepted words before each position
            sizes = [len(w) for w in where]
            cur, starts, done = 0, [], True
            for c, m in zip(run_class, run_len):
                k = int(before[c][cur])
                if k + m > sizes[c]:  # the window ran out: a larger one for this pass
                    done = False
                    break
                starts.append(k)
                cur = int(where[c][k + m - 1]) + 1
            if done:
                break
            window *= 2
        offsets = np.cumsum([0] + sizes)[:-1]
        source = np.repeat(np.asarray(offsets)[rc] + np.array(starts), rm) + within
        out[r] = win[np.concatenate(where)[source]] >> draw_shift
        pos += cur
    return out


def _best_tasks(have: dict[tuple, set[str]]) -> list[str]:
    """The tasks to score on: the set that covers the most (rows x tasks), rows being those run
    on every task of the set (ties: more tasks); a task only one compressor ran cannot rank."""
    from itertools import combinations

    all_tasks = sorted(set().union(*have.values())) if have else []
    best: tuple[int, int, list[str]] = (0, 0, [])
    for k in range(len(all_tasks), 0, -1):
        for subset in combinations(all_tasks, k):
            n = sum(1 for t in have.values() if set(subset) <= t)
            if n >= 2 and (n * k, k) > best[:2]:
                best = (n * k, k, list(subset))
    return best[2]


def _name(key: tuple) -> str:
    entry, compressor = key
    return f"{entry} / {compressor}"
