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

from leaderboard.frame import BASELINE
from leaderboard.networks import network_profiles
from leaderboard.statistics import tier_seeds
from suite.results.task_catalog import describe as describe_task

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
    weights: list[float] = field(default_factory=list)  # per pair (regime weights, mean 1)
    regimes: dict[tuple[str, str], str] = field(default_factory=dict)  # (task, profile) -> regime


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
    full_seeds: int | None = None,
) -> ScoreResult:
    """Performance profiles and scores of the rows of ``agg`` (:func:`leaderboard.statistics.aggregate`)
    in ``tier`` (see the module docstring). ``full_seeds``: the seeds a row needs on every task
    to be ranked in the headline (default: the tier's, :func:`leaderboard.statistics.tier_seeds`)."""
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
    by_key = _matched_rows(sub, tasks)
    weights = _regime_weights(by_key, tasks, profiles)
    seed_times = [[by_key[(t, *k)][f"times@{p}"] or {} for t, p in pairs] for k in rows]
    n_seeds = [min((len(st) for st in row), default=0) for row in seed_times]
    need = tier_seeds(tier) if full_seeds is None else full_seeds
    ranked = [n >= need for n in n_seeds]
    if not any(ranked):  # nobody has the tier's seeds: rank everyone, the table says how many each has
        ranked = [True] * len(rows)
    times = np.array([[_row_time(st) for st in row] for row in seed_times])
    # the headline's ratios are to the fastest ranked row; a row listed apart is measured against the same
    best = np.min(times[np.array(ranked)], axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratios = times / best
    ratios[~np.isfinite(ratios)] = np.inf
    scores = [_weighted_score(r, weights) for r in ratios]
    progress = [_progress(by_key, tasks, k, tier) for k in rows]
    # bootstrap over seeds: each row's seeds drawn with replacement, per pair from the same draw per task
    idx = [i for i in range(len(rows)) if ranked[i]]
    boot = _bootstrap([seed_times[i] for i in idx], pairs, resamples, seed, weights)
    first = np.argmax(boot, axis=1) if resamples else np.array([], dtype=int)
    boot_of = {i: j for j, i in enumerate(idx)}

    def _stat(i: int, fn) -> float:  # noqa: ANN001 - a reduction over the row's draws
        return float(fn(boot[:, boot_of[i]])) if i in boot_of and resamples else math.nan

    table = pd.DataFrame(
        {
            "entry": [k[0] for k in rows],
            "compressor": [k[1] for k in rows],
            "score": scores,
            "score_sd": [_stat(i, lambda b: b.std(ddof=1)) if resamples > 1 else math.nan for i in range(len(rows))],
            "score_p5": [_stat(i, lambda b: np.percentile(b, 5)) for i in range(len(rows))],
            "score_p95": [_stat(i, lambda b: np.percentile(b, 95)) for i in range(len(rows))],
            "first_in": [
                float(np.mean(first == boot_of[i])) if i in boot_of and resamples else math.nan
                for i in range(len(rows))
            ],
            "pairs_fastest": [int(np.sum(r == 1.0)) for r in ratios],
            "pairs_reached": [int(np.sum(np.isfinite(r))) for r in ratios],
            "n_pairs": len(pairs),
            "seeds": n_seeds,
            "ranked": ranked,
            "progress": progress,
        }
    )
    label = {k: _name(k) for k in rows}
    table["row"] = [label[k] for k in rows]
    table["_p"] = table["progress"].fillna(-1.0)
    table = table.sort_values(
        ["ranked", "score", "_p", "row"], ascending=[False, False, False, True], kind="stable"
    ).drop(columns="_p")
    table = table.reset_index(drop=True)
    # per row and tau, the weighted fraction of pairs within tau: rows x taus
    w = np.asarray(weights, dtype=float)
    within = ((ratios[:, None, :] <= np.asarray(taus, dtype=float)[None, :, None]) * w[None, None, :]).sum(axis=2)
    within = within / w.sum()
    curves = pd.DataFrame(
        {
            "row": np.repeat([label[k] for k in rows], len(taus)).tolist(),
            "tau": np.tile(np.asarray(taus, dtype=float), len(rows)).tolist(),
            "fraction": within.reshape(-1).tolist(),
        },
        columns=["row", "tau", "fraction"],
    )
    regimes = _regimes(by_key, tasks, profiles)
    return ScoreResult(table, curves, pairs, [_name(k) for k in left_out], resamples, list(weights), regimes)


def _weighted_score(ratios: np.ndarray, weights: list[float]) -> float:
    """The profile's area with each pair weighted (equal weights: :func:`profile_score`)."""
    if not len(ratios):
        return math.nan
    area = [max(0.0, TAU_MAX - max(1.0, r)) for r in ratios]
    return sum(a * w for a, w in zip(area, weights)) / ((TAU_MAX - 1.0) * sum(weights))


def _matched_rows(sub: pd.DataFrame, tasks: list[str]) -> dict[tuple, dict]:
    """(task, entry, compressor) -> the aggregate row scored for it. A compressor's row on a task is
    its best-sampled (setup, machine class), preferring the machine class of its baseline; the
    ``none`` row of an entry is the one the rankings compare that entry's other rows with
    (:func:`leaderboard.statistics.aggregate`'s ``baseline_setup`` / ``baseline_machine``: the
    same setup-matching), so a tp=2 ``none`` is never taken for the pipeline rows' baseline."""
    recs = sub.to_dict("records")
    cand: dict[tuple, list[dict]] = {}
    for r in recs:
        cand.setdefault((r["task"], *[r[c] for c in ROW]), []).append(r)
    out: dict[tuple, dict] = {}
    for key, options in cand.items():
        if key[2] == BASELINE:
            continue
        out[key] = max(
            options,
            key=lambda r: (r["n"], r.get("machine", "") == r.get("baseline_machine", ""), str(r.get("setup", ""))),
        )
    for key, options in cand.items():
        if key[2] != BASELINE:
            continue
        task, entry = key[0], key[1]
        votes: dict[tuple, int] = {}
        for k, r in out.items():
            if k[0] == task and r.get("baseline_entry", entry) == entry and r.get("baseline_setup") is not None:
                b = (r.get("baseline_setup"), r.get("baseline_machine"))
                votes[b] = votes.get(b, 0) + 1
        chosen = None
        if votes:
            (setup, machine), _ = max(votes.items(), key=lambda kv: (kv[1], str(kv[0])))
            chosen = next((r for r in options if r.get("setup") == setup and r.get("machine") == machine), None)
        out[key] = chosen or max(options, key=lambda r: (r["n"], str(r.get("setup", ""))))
    return out


def _regimes(by_key: dict[tuple, dict], tasks: list[str], profiles: list[str]) -> dict[tuple[str, str], str]:
    """(task, profile) -> regime: how much the task's uncompressed run slows on that network against
    its fastest profile (modeled total time): up to 1.1x ``compute-bound``, 2x or more
    ``communication-bound``, else ``balanced``; ``unknown`` without a baseline's times."""
    out: dict[tuple[str, str], str] = {}
    for t in tasks:
        base = next((r for k, r in by_key.items() if k[0] == t and k[2] == BASELINE), None)
        totals = [float(base.get(f"total_s@{p}", math.nan)) if base else math.nan for p in profiles]
        fastest = min((x for x in totals if x == x and x > 0), default=math.nan)
        for p, x in zip(profiles, totals):
            if not (x == x and fastest == fastest):
                out[(t, p)] = "unknown"
            elif x <= 1.1 * fastest:
                out[(t, p)] = "compute-bound"
            elif x >= 2.0 * fastest:
                out[(t, p)] = "communication-bound"
            else:
                out[(t, p)] = "balanced"
    return out


def _regime_weights(by_key: dict[tuple, dict], tasks: list[str], profiles: list[str]) -> list[float]:
    """One weight per (task, profile) pair: each task counts once, split equally over the regimes
    its networks fall in (:func:`_regimes`), and a regime's share equally over its networks, so
    near-duplicate networks (100 Gbps and 10 Gbps, both compute-bound) count once together."""
    regimes = _regimes(by_key, tasks, profiles)
    weights = []
    for t in tasks:
        names = [regimes[(t, p)] for p in profiles]
        kinds = set(names)
        for name in names:
            weights.append(1.0 / (len(kinds) * names.count(name)))
    total = sum(weights)
    return [w * len(weights) / total for w in weights]  # mean weight 1 (equal weights: the plain mean)


def _progress(by_key: dict[tuple, dict], tasks: list[str], key: tuple, tier: str) -> float:
    """The quality axis: over the scored tasks, the mean fraction of the way from the task's trivial
    predictor to its target that the row's mean final metric covers (clipped to [0, 1]; 1 = at or
    past the target). Orders the rows the time profile cannot tell apart (e.g. all never reaching
    the target). NaN when a task has no description or target."""
    vals = []
    for t in tasks:
        r = by_key.get((t, *key))
        desc = describe_task(t)
        if r is None or desc is None or tier not in desc.targets or "metric_mean" not in r:
            return math.nan
        target, trivial = desc.targets[tier], desc.trivial_score
        if target == trivial:
            return math.nan
        vals.append(min(1.0, max(0.0, (float(r["metric_mean"]) - trivial) / (target - trivial))))
    return sum(vals) / len(vals) if vals else math.nan


def _bootstrap(
    seed_times: list[list[dict]],
    pairs: list[tuple[str, str]],
    resamples: int,
    seed: int,
    weights: list[float] | None = None,
) -> np.ndarray:
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
    if weights is None:
        return np.cumsum(area, axis=2)[:, :, -1] / ((TAU_MAX - 1.0) * len(pairs))
    w = np.asarray(weights, dtype=float)
    return np.cumsum(area * w, axis=2)[:, :, -1] / ((TAU_MAX - 1.0) * float(np.cumsum(w)[-1]))


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
