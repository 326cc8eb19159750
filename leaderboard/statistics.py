"""Statistics over seeds: per-row aggregates, deltas against the right baseline, significance,
and the minimal detectable difference (MDD) that says which differences the data can resolve.

    agg = aggregate(frame)   # one row per (task, tier, entry, compressor, setup, machine)

Whose baseline (an entry cannot borrow another's, and machines are not mixed): a row's delta is
measured against the ``none`` row of the **same entry**, run setup and machine class; only
when the entry has none, against the **maintainers' baseline** (:data:`leaderboard.frame.MAINTAINERS`)
of that setup, marked ``baseline_kind == "maintainers"`` (and ``baseline_same_machine`` says
whether it ran on the same machine class). Never against a third party's baseline: a
submission cannot move other entries' deltas by committing ``none`` records.

The MDD: :func:`minimal_detectable_difference` is a pure function of measured
inputs (seed spread, seeds on each side, evaluation-set size); :func:`aggregate` feeds it
the row's and its baseline's measured spread (or :data:`MEASURED_SPREAD` when a side has one
seed) and marks a delta smaller than the MDD ``"not resolved"``.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from leaderboard.frame import BASELINE, BYTE_DIRECTIONS, DIRECTIONS
from leaderboard.networks import network_profiles
from suite.results.entries import ROW_FIELDS
from suite.results.tier_spread import load_spread

__all__ = [
    "GROUP",
    "N_TOO_SMALL",
    "OTHER_MACHINE",
    "NOT_RESOLVED",
    "SeedSpread",
    "MEASURED_SPREAD",
    "significance_marker",
    "welch_p",
    "paired_p",
    "TimeTest",
    "time_test",
    "tier_seeds",
    "t_cdf",
    "t_ppf",
    "minimal_detectable_difference",
    "Difference",
    "quality_difference",
    "aggregate",
]

ALPHA_MARKERS = ((0.001, "***"), (0.01, "**"), (0.05, "*"))
N_TOO_SMALL = "n too small"
OTHER_MACHINE = "times on other machines"  # a time delta between two machine classes: shown, never tested
NOT_RESOLVED = "not resolved"
# one leaderboard row: a compressor of one entry under one run setup on one machine class
GROUP = list(ROW_FIELDS)  # the entry model's row key (suite.results.entries), the verifier's unit too


# --------------------------------------------------------------------------- Student's t
# Pure-Python Student's t distribution (the page's cold start would spend ~1 s importing scipy
# for two functions); tests/leaderboard/test_statistics.py checks both against scipy.
def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c if abs(1.0 + aa / c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c if abs(1.0 + aa / c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b) for 0 <= x <= 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    ln = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(ln) * _betacf(a, b, x) / a
    return 1.0 - math.exp(ln) * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom (df > 0)."""
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


@functools.lru_cache(maxsize=1024)  # a page asks for a handful of (q, df) pairs, many times
def t_ppf(q: float, df: float) -> float:
    """The ``q`` quantile of Student's t (bisection on :func:`t_cdf`, to 1e-12)."""
    if q == 0.5:
        return 0.0
    lo, hi = -1.0, 1.0
    while t_cdf(lo, df) > q:
        lo *= 2.0
    while t_cdf(hi, df) < q:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < q:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, abs(mid)):
            break
    return 0.5 * (lo + hi)


# --------------------------------------------------------------------------- MDD
@dataclass(frozen=True)
class SeedSpread:
    """Measured noise of one task and tier, the inputs of :func:`minimal_detectable_difference`.

    seed_std: sample standard deviation of the final metric over training seeds of one
        configuration (same compressor, setup, machine), in the metric's units.
    eval_samples: size of the (fixed) evaluation subset; None when unknown or the metric is
        not a per-item average.
    source: where the figures were measured (shown on the page).
    """

    seed_std: float
    eval_samples: int | None = None
    source: str = ""
    df: int | None = None  # degrees of freedom of seed_std's estimate (seeds measured - 1); None: unknown


def _measured_spread() -> dict[tuple[str, str], SeedSpread]:
    """Measured figures for tasks and tiers whose rows have fewer than 2 seeds: the seed std
    of the ``none`` cell over its seeds, regenerated from the baseline records by
    ``python -m suite.results.tier_spread`` (docs/tasks.md, 'The calibrated quick tier')."""
    return {
        (e["task"], e["tier"]): SeedSpread(
            float(e["seed_std"]),
            e.get("eval_samples"),
            f"measured: {e.get('source', '')}",
            df=max(1, len(e.get("seeds") or {}) - 1),
        )
        for e in load_spread()
    }


MEASURED_SPREAD: dict[tuple[str, str], SeedSpread] = _measured_spread()


def minimal_detectable_difference(
    seed_std: float,
    n: int,
    n_baseline: int,
    *,
    eval_samples: int | None = None,
    metric_level: float | None = None,
    alpha: float = 0.05,
    power: float = 0.5,
    df: float | None = None,
) -> float:
    """The smallest true difference between two rows' mean metrics that a two-sided test at
    level ``alpha`` detects with probability ``power`` (0.5: the difference that just reaches
    p < alpha, the reading the page uses; 0.8 is the usual planning figure).

    Inputs (all measured, none claimed):

    - ``seed_std``: standard deviation of the final metric over training seeds of one
      configuration (metric units), assumed equal on both sides.
    - ``n``, ``n_baseline``: seeds on each side (each >= 1).
    - ``eval_samples``, ``metric_level``: for metrics that are a proportion over a fixed
      evaluation subset (accuracy), its size N and the accuracy p; the subset is the same for
      every seed, so its sampling noise does not average out over seeds and is added once,
      conservatively as for two models erring on independent items: ``2 p (1 - p) / N``.
      Leave them None for other metrics (a loss), when unknown, or when ``seed_std`` was
      measured on that same subset (it then already holds the item-level disagreement between
      models, which is how :func:`aggregate` calls it); the term is for planning a tier's
      evaluation-set size from a spread measured elsewhere.

    ``MDD = (t(1 - alpha/2, df) + t(power, df)) * sqrt(seed_std^2 (1/n + 1/n_baseline) + eval_var)``
    with ``df = n + n_baseline - 2`` (Student's t; df < 1 is treated as 1), or the given ``df``
    when ``seed_std`` was estimated elsewhere (seeds measured - 1: the uncertainty of the spread
    is that of its own estimate). NaN when
    ``seed_std`` is NaN or a side has no seed. Example: std 0.027, 3 vs 3 seeds, no eval
    term: 2.78 * 0.027 * 0.816 = 0.061 (about 6 accuracy points).
    """
    if not (seed_std >= 0) or n < 1 or n_baseline < 1:
        return math.nan
    var = seed_std**2 * (1.0 / n + 1.0 / n_baseline)
    if eval_samples and metric_level is not None and 0.0 <= metric_level <= 1.0:
        var += 2.0 * metric_level * (1.0 - metric_level) / eval_samples
    df = max(1, n + n_baseline - 2) if df is None else max(1.0, float(df))
    crit = t_ppf(1 - alpha / 2, df) + t_ppf(power, df)
    return crit * math.sqrt(var)


# --------------------------------------------------------------------------- significance
def significance_marker(p: float, n: int, n_baseline: int) -> str:
    """``***`` / ``**`` / ``*`` for p < 0.001 / 0.01 / 0.05, ``n.s.`` otherwise, and
    ``"n too small"`` when either side has fewer than 2 seeds (no test possible)."""
    if n < 2 or n_baseline < 2:
        return N_TOO_SMALL
    if p is None or math.isnan(p):
        return "n.s."  # identical constant samples: no difference to detect
    for alpha, mark in ALPHA_MARKERS:
        if p < alpha:
            return mark
    return "n.s."


def welch_p(mean_a: float, var_a: float, n_a: int, mean_b: float, var_b: float, n_b: int) -> float:
    """Two-sided p of Welch's t-test (unequal variances) from summary statistics; equals
    ``scipy.stats.ttest_ind(a, b, equal_var=False).pvalue``. NaN when a side has n < 2."""
    if n_a < 2 or n_b < 2:
        return math.nan
    va, vb = var_a / n_a, var_b / n_b
    denom = math.sqrt(va + vb)
    diff = mean_a - mean_b
    with np.errstate(divide="ignore", invalid="ignore"):
        df = (va + vb) ** 2 / (va**2 / (n_a - 1) + vb**2 / (n_b - 1)) if (va + vb) > 0 else math.nan
        t = np.divide(diff, denom)
    df = 1.0 if math.isnan(df) else df  # scipy's convention for zero-variance samples
    if math.isnan(t):
        return math.nan
    return 2.0 * t_cdf(-abs(float(t)), df)


def paired_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided p of the paired t-test of ``a`` against ``b`` (same seeds, same order); equals
    ``scipy.stats.ttest_rel(a, b).pvalue``. NaN with fewer than 2 pairs; identical differences:
    0.0 when they are not zero (a constant shift), NaN when they are."""
    d = [x - y for x, y in zip(a, b)]
    n = len(d)
    if n < 2:
        return math.nan
    mean = sum(d) / n
    var = sum((x - mean) ** 2 for x in d) / (n - 1)
    if var == 0:
        return math.nan if mean == 0 else 0.0
    return 2.0 * t_cdf(-abs(mean / math.sqrt(var / n)), n - 1)


@dataclass(frozen=True)
class TimeTest:
    """A row's time-to-target against another row's (its baseline, or the row it may tie with).

    ``test``: ``"paired by seed"`` (both rows reached the target on the same seeds),
    ``"Welch"`` (different seeds: unpaired, unequal variances), ``"n too small"`` (fewer than
    2 seeds reached it on a side) or ``"not reached"`` (a side never reached it: no time to
    compare); against a baseline, :data:`OTHER_MACHINE` (the two rows' times were measured on
    different machine classes: no test). ``resolved``: p < alpha; None when there is no test."""

    delta: float
    p: float
    test: str
    resolved: bool | None


def time_test(a: Mapping[int, float], b: Mapping[int, float], *, alpha: float = 0.05) -> TimeTest:
    """Compare per-seed times-to-target ``{seed: seconds}`` (``inf``: that seed never reached
    the target). Paired by seed when both rows reached it on the same seeds (the seed fixes the
    data order and the initialization, so the pairs share their noise); Welch otherwise."""
    ra = {k: v for k, v in a.items() if math.isfinite(v)}
    rb = {k: v for k, v in b.items() if math.isfinite(v)}
    if not ra or not rb:
        return TimeTest(math.nan, math.nan, "not reached", None)
    ma, mb = sum(ra.values()) / len(ra), sum(rb.values()) / len(rb)
    delta = ma - mb
    if len(ra) < 2 or len(rb) < 2:
        return TimeTest(delta, math.nan, N_TOO_SMALL, None)
    if len(ra) == len(a) and len(rb) == len(b) and set(ra) == set(rb):
        seeds = sorted(ra)
        p = paired_p([ra[k] for k in seeds], [rb[k] for k in seeds])
        test = "paired by seed"
    else:
        va = sum((x - ma) ** 2 for x in ra.values()) / (len(ra) - 1)
        vb = sum((x - mb) ** 2 for x in rb.values()) / (len(rb) - 1)
        p = welch_p(ma, va, len(ra), mb, vb, len(rb))
        test = "Welch"
    return TimeTest(delta, p, test, None if math.isnan(p) else p < alpha)


@functools.lru_cache(maxsize=1)
def _matrix_seeds() -> dict[str, int]:
    """Seeds per tier, read from the matrix file (its one home; the leaderboard imports no suite.bench)."""
    import yaml

    path = Path(__file__).resolve().parents[1] / "suite" / "bench" / "matrix.yaml"
    try:
        tiers = (yaml.safe_load(path.read_text()) or {}).get("tiers") or {}
    except (OSError, yaml.YAMLError):
        return {}
    out = {}
    for name, t in tiers.items():
        seeds = (t or {}).get("seeds", 1)
        out[str(name)] = len(seeds) if isinstance(seeds, list) else int(seeds)
    return out


def tier_seeds(tier: str) -> int:
    """How many seeds a row of ``tier`` should have (the matrix's ``seeds``; 1 for an unknown tier)."""
    return _matrix_seeds().get(tier, 1)


# --------------------------------------------------------------------------- aggregation
def _timing_machines(agg: pd.DataFrame) -> list[str]:
    """Per aggregated row, the machine class its shown times were measured on: a verified row's
    re-run machine (``verified_on``), else its own ``machine`` (the row key's)."""
    machine = agg["machine"] if "machine" in agg else pd.Series("", index=agg.index)
    verified_on = agg["verified_on"] if "verified_on" in agg else pd.Series("", index=agg.index)
    return [str(v) if isinstance(v, str) and v else str(m) for v, m in zip(verified_on, machine)]


def _first_nonempty(frame: pd.DataFrame, gid: pd.Series, col: str) -> pd.Series:
    """First non-empty string of ``col`` per group id ("" when none)."""
    return frame[col].replace("", np.nan).groupby(gid, sort=True).first().fillna("")


def aggregate(frame: pd.DataFrame, *, spread: Mapping[tuple[str, str], SeedSpread] | None = None) -> pd.DataFrame:
    """One row per (task, tier, entry, compressor, setup, machine) over the seeds of that entry.

    ``setup`` is the run setup (:func:`suite.results.entries.setup_label`) and ``machine`` the
    machine class (:func:`suite.results.entries.machine_label`): records that ran under different
    settings or on different machine classes are different experiments, so they are separate
    rows, never pooled as seeds. Only the latest record per cell counts (``frame.latest``);
    failed / timed-out records count in ``n_failed`` but not in the statistics. Columns:

    - ``n`` (ok seeds), ``n_failed``, ``seeds``, ``metric_name``, ``higher_is_better``,
      ``metric_mean``, ``metric_std`` (sample std, NaN for n < 2), ``metric_uncompressed_mean``.
    - ``delta``: metric_mean minus the mean of the baseline (see the module docstring for
      whose): ``baseline_entry``, ``baseline_setup``, ``baseline_machine`` (the row it is), ``baseline_kind`` (``"own"`` / ``"maintainers"`` / ``""``),
      ``baseline_same_machine``, ``baseline_same_code`` (a code version in common);
      ``p_value``: Welch's t-test of the seeds against the baseline's seeds, NaN when either
      has n < 2; ``significance``: :func:`significance_marker`, ``"baseline"`` on the
      baseline row, ``"no baseline"`` when neither the entry nor the maintainers have a
      ``none`` row with results in that task, tier and setup.
    - ``mdd``: :func:`minimal_detectable_difference` of this row against its baseline at
      alpha 0.05 (spread: the pooled measured std of both rows when each has >= 2 seeds, else
      ``spread[(task, tier)]``, default :data:`MEASURED_SPREAD`), ``mdd_source``, and
      ``resolved``: False when ``|delta| < mdd`` (shown as "not resolved"), NA when unknown.
    - means over ok seeds of ``ratio_<dir>``, ``bytes_per_step_<dir>``, ``step_s``,
      ``compute_s``, ``compress_s``, ``comm_s``, ``total_train_s``, ``wall_s``,
      ``total_s@<profile>``, ``load_1m``, ``load_15m``; ``code_versions`` (distinct, sorted).
    - ``time_to_target_s@<profile>``: mean over the seeds that reached the target (NaN if
      none did) and ``reached@<profile>``: the fraction of ok seeds that reached it.
    - ``n_warnings``: warning lines over the seeds' records (all statuses), ``warned_seeds``:
      how many seeds have at least one.
    - ``submitter``, ``entry_name``, ``plugin_hash``, ``spec_<dir>``, ``compressor_label``,
      ``cpu_count``, ``eval_samples``, ``maintainers`` (first non-empty); ``verified_on``: the
      machine class a verified row's shown times were re-run on (``""``: the row's own ``machine``).
    """
    profiles = network_profiles(frame)
    if frame.empty:
        cols = [*GROUP, "n", "n_failed", "metric_mean", "metric_std", "delta", "p_value", "significance"]
        return pd.DataFrame(columns=cols)
    frame = frame[frame["latest"]] if "latest" in frame else frame
    frame = frame.assign(**{c: "" for c in ("setup", "machine") if c not in frame})  # a frame built by hand
    ok = (frame["status"] == "ok").to_numpy()
    # one integer group id per row, computed once: grouping dozens of columns by six string
    # keys each time would factorize the keys every time
    grouped = frame.groupby(GROUP, sort=True, dropna=False)
    gid = pd.Series(grouped.ngroup().to_numpy(), index=frame.index)
    key_index = pd.MultiIndex.from_frame(grouped.size().reset_index()[GROUP])
    keys = gid
    by = lambda s: s.groupby(gid, sort=True)  # noqa: E731 - one grouping for every column
    val = frame["final_metric"].where(ok)
    out = pd.DataFrame({"n": by(val).count()})
    out["n_failed"] = by(pd.Series(~ok, index=frame.index)).sum().astype(int)
    n_ok = by(pd.Series(ok, index=frame.index)).sum()
    warn = frame["n_warnings"] if "n_warnings" in frame else pd.Series(0, index=frame.index)
    out["n_warnings"] = by(warn).sum().astype(int)
    out["warned_seeds"] = by(warn > 0).sum().astype(int)
    seeds = pd.DataFrame({"g": gid, "seed": frame["seed"]})[ok].sort_values("seed", kind="stable")
    seed_lists = seeds.groupby("g")["seed"].agg(lambda s: [int(v) for v in s])
    out["seeds"] = [seed_lists.get(k, []) for k in out.index]
    names_ok = frame["metric_name"].where(ok, "")
    out["metric_name"] = by(names_ok.replace("", np.nan)).first().fillna(_first_nonempty(frame, keys, "metric_name"))
    hib_ok = by(frame["higher_is_better"].where(ok)).first()
    out["higher_is_better"] = [bool(v) if n_ok_k else True for v, n_ok_k in zip(hib_ok.reindex(out.index), n_ok)]
    out["metric_mean"] = by(val).mean()
    out["metric_std"] = by(val).std(ddof=1)
    out.loc[out["n"] < 2, "metric_std"] = math.nan
    out["metric_uncompressed_mean"] = by(frame["final_metric_uncompressed"].where(ok)).mean()
    out["submitter"] = by(frame["submitter"]).first()
    out["entry_name"] = by(frame["entry_name"]).first()
    out["verification"] = by(frame["verification"]).first() if "verification" in frame else ""
    out["verified_cells"] = by(frame["verified_cells"]).first() if "verified_cells" in frame else ""
    out["verified_on"] = _first_nonempty(frame, keys, "verified_on") if "verified_on" in frame else ""
    out["plugin_hash"] = _first_nonempty(frame, keys, "plugin_hash")
    for d in DIRECTIONS:
        out[f"spec_{d}"] = _first_nonempty(frame, keys, f"spec_{d}")
    out["compressor_label"] = _first_nonempty(frame, keys, "compressor_label") if "compressor_label" in frame else ""
    out["display"] = _first_nonempty(frame, keys, "display") if "display" in frame else ""
    mean_cols = [f"{k}_{d}" for k in ("ratio", "bytes_per_step") for d in BYTE_DIRECTIONS]
    mean_cols += ["step_s", "compute_s", "compress_s", "comm_s", "total_train_s", "wall_s", "load_1m", "load_15m"]
    mean_cols += [f"total_s@{p}" for p in profiles]
    present = [c for c in mean_cols if c in frame]
    means = frame[present].where(pd.Series(ok, index=frame.index), axis=0).groupby(gid, sort=True).mean()
    for c in mean_cols:
        out[c] = means[c] if c in present else math.nan
    for c in ("cpu_count", "eval_samples"):
        out[c] = by(frame[c]).max() if c in frame else math.nan
    out["maintainers"] = by(frame["maintainers"]).any() if "maintainers" in frame else False
    # whether every seed's time came from the calibration (leaderboard.frame, suite.results.time_model)
    if "time_calibrated" in frame:
        out["time_calibrated"] = by(frame["time_calibrated"].where(ok, True).astype(bool)).all()
    else:
        out["time_calibrated"] = True
    if "code_version" in frame:
        cv = pd.DataFrame({"g": gid, "code_version": frame["code_version"]})[ok]
        cv_lists = cv.groupby("g")["code_version"].agg(lambda s: sorted(set(s) - {""}))
        out["code_versions"] = [cv_lists.get(k, []) for k in out.index]
    else:
        out["code_versions"] = [[] for _ in range(len(out))]
    if profiles:
        ttt = frame[[f"time_to_target_s@{p}" for p in profiles]].where(pd.Series(ok, index=frame.index), axis=0)
        t_means = ttt.groupby(gid, sort=True).mean()
        t_reached = ttt.notna().groupby(gid, sort=True).sum()
        for p in profiles:
            c = f"time_to_target_s@{p}"
            out[c] = t_means[c]
            out[f"reached@{p}"] = np.where(n_ok > 0, t_reached[c] / n_ok.where(n_ok > 0, 1), 0.0)
            out[f"time_sd@{p}"] = ttt[c].groupby(gid, sort=True).std(ddof=1)
        # per seed: {seed: seconds} (inf: never reached), for the tests and the tables
        per_seed: dict[str, dict[int, dict[int, float]]] = {p: {} for p in profiles}
        cols = [f"time_to_target_s@{p}" for p in profiles]
        for g, seed, *ts in zip(gid[ok], frame["seed"][ok], *(frame[c][ok] for c in cols)):
            for p, t in zip(profiles, ts):
                per_seed[p].setdefault(int(g), {})[int(seed)] = float(t) if t == t else math.inf
        for p in profiles:
            out[f"times@{p}"] = [per_seed[p].get(int(k), {}) for k in out.index]
    out["_var"] = by(val).var(ddof=1)
    out.index = key_index
    agg = out.reset_index()
    _add_deltas(agg, MEASURED_SPREAD if spread is None else spread)
    _add_time_tests(agg, profiles)
    return agg.drop(columns=["_var", "_baseline_row"]).reset_index(drop=True)


def _pick_baseline(bases: list[dict[str, Any]], entry: str, machine: str) -> tuple[int | None, str]:
    """(row number, kind) of the baseline for a row of ``entry`` on ``machine`` (None, "": none)."""
    for b in bases:
        if b["entry"] == entry and b["machine"] == machine:
            return b["_i"], "own"
    maint = [b for b in bases if b["maintainers"]]
    if not maint:
        return None, ""
    # the maintainers' baseline on the same machine class if there is one, else the best-sampled
    best = min(maint, key=lambda b: (b["machine"] != machine, -b["n"], b["entry"]))
    return best["_i"], "maintainers"


@dataclass(frozen=True)
class Difference:
    """One row's quality against another's: ``delta`` (mean minus the other's mean), Welch's
    ``p_value`` and its ``significance`` mark, the ``mdd`` and what measured it, and ``resolved``
    (``|delta| >= mdd``; None when the MDD is unknown)."""

    delta: float
    p_value: float
    significance: str
    mdd: float = math.nan
    mdd_source: str = ""
    resolved: bool | None = None


def quality_difference(
    row: tuple[float, float, int], base: tuple[float, float, int], known: SeedSpread | None = None
) -> Difference:
    """``row`` against ``base``, each ``(mean, sample variance, seeds)``; ``known``: the task and
    tier's measured spread, used when a side has fewer than 2 seeds (see :func:`aggregate`)."""
    (mean, var, n), (mean_b, var_b, nb) = row, base
    p = welch_p(mean, var, n, mean_b, var_b, nb)
    delta = float(mean - mean_b)
    # the measured spread of these two rows when both have it, else the task's figure; no
    # evaluation-set term: every seed is evaluated on the same fixed subset, so the measured
    # seed spread already holds the item-level disagreement between models
    if n >= 2 and nb >= 2:
        std = math.sqrt(((n - 1) * var + (nb - 1) * var_b) / (n + nb - 2))
        source, df = "seeds of this row and its baseline", None
    elif known is not None:
        std, source, df = known.seed_std, known.source, known.df
    else:
        return Difference(delta, p, significance_marker(p, n, nb))
    mdd = minimal_detectable_difference(std, n, nb, df=df)
    resolved = None if math.isnan(mdd) else abs(delta) >= mdd
    return Difference(delta, p, significance_marker(p, n, nb), mdd, source, resolved)


def _add_deltas(agg: pd.DataFrame, spread: Mapping[tuple[str, str], SeedSpread]) -> None:
    """Fill the delta, significance and MDD columns in place (see :func:`aggregate`).

    Plain Python over row dicts: this runs for every row the page shows, and pandas' per-cell
    access would cost more than the statistics."""
    cols = [
        "task",
        "tier",
        "setup",
        "entry",
        "machine",
        "compressor",
        "n",
        "metric_mean",
        "_var",
        "maintainers",
        "code_versions",
        "metric_name",
    ]
    rows = agg[cols].to_dict("records")
    for i, r in enumerate(rows):
        r["_i"] = i
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:  # only a baseline of the same setup is comparable: other stages/mode/device change the numbers
        if r["compressor"] == BASELINE and r["n"] > 0:
            groups.setdefault((r["task"], r["tier"], r["setup"]), []).append(r)
    n_rows = len(rows)
    out: dict[str, list[Any]] = {
        "baseline_entry": [""] * n_rows,
        "baseline_setup": [""] * n_rows,
        "baseline_machine": [""] * n_rows,
        "baseline_kind": [""] * n_rows,
        "baseline_same_machine": [pd.NA] * n_rows,
        "baseline_same_code": [pd.NA] * n_rows,
        "delta": [math.nan] * n_rows,
        "p_value": [math.nan] * n_rows,
        "significance": ["no baseline"] * n_rows,
        "mdd": [math.nan] * n_rows,
        "mdd_source": [""] * n_rows,
        "resolved": [pd.NA] * n_rows,
        "_baseline_row": [-1] * n_rows,
    }
    for i, r in enumerate(rows):
        bases = groups.get((r["task"], r["tier"], r["setup"]))
        if not bases:
            continue
        b, kind = _pick_baseline(bases, r["entry"], r["machine"])
        if b is None:
            continue
        base = rows[b]
        out["_baseline_row"][i] = b
        out["baseline_entry"][i] = base["entry"]
        out["baseline_setup"][i] = base["setup"]
        out["baseline_machine"][i] = base["machine"]
        out["baseline_kind"][i] = kind
        out["baseline_same_machine"][i] = base["machine"] == r["machine"]
        out["baseline_same_code"][i] = bool(set(base["code_versions"]) & set(r["code_versions"]))
        if i == b:
            out["delta"][i] = 0.0
            out["significance"][i] = "baseline"
            continue
        if int(r["n"]) == 0:
            out["significance"][i] = "no results"
            continue
        d = quality_difference(
            (r["metric_mean"], r["_var"], int(r["n"])),
            (base["metric_mean"], base["_var"], int(base["n"])),
            spread.get((r["task"], r["tier"])),
        )
        out["delta"][i], out["p_value"][i], out["significance"][i] = d.delta, d.p_value, d.significance
        out["mdd"][i], out["mdd_source"][i], out["resolved"][i] = d.mdd, d.mdd_source, d.resolved
    for k, v in out.items():
        agg[k] = pd.Series(
            v,
            index=agg.index,
            dtype="boolean" if k in ("baseline_same_machine", "baseline_same_code", "resolved") else None,
        )


def _add_time_tests(agg: pd.DataFrame, profiles: list[str]) -> None:
    """Per profile, each row's time-to-target against its baseline row's (the row its quality
    delta uses): ``time_delta@p`` (mean minus the baseline's, over the seeds that reached the
    target), ``time_p@p``, ``time_test@p`` (:class:`TimeTest`'s words) and ``time_resolved@p``.
    Times measured on different machine classes (a verified row's are its re-run's, ``verified_on``)
    are not tested against each other: the delta is shown, the test reads :data:`OTHER_MACHINE`."""
    base = agg["_baseline_row"].tolist()
    timed_on = _timing_machines(agg)
    for p in profiles:
        times = agg[f"times@{p}"].tolist()
        cols: dict[str, list[Any]] = {k: [] for k in ("delta", "p", "test", "resolved")}
        for i, b in enumerate(base):
            if b < 0 or b == i or not times[i]:
                t = TimeTest(math.nan, math.nan, "baseline" if b == i else "", None)
            elif timed_on[i] != timed_on[b]:
                t = time_test(times[i], times[b])
                t = TimeTest(t.delta, math.nan, OTHER_MACHINE if t.test != "not reached" else t.test, None)
            else:
                t = time_test(times[i], times[b])
            cols["delta"].append(t.delta)
            cols["p"].append(t.p)
            cols["test"].append(t.test)
            cols["resolved"].append(pd.NA if t.resolved is None else t.resolved)
        agg[f"time_delta@{p}"] = cols["delta"]
        agg[f"time_p@{p}"] = cols["p"]
        agg[f"time_test@{p}"] = cols["test"]
        agg[f"time_resolved@{p}"] = pd.Series(cols["resolved"], index=agg.index, dtype="boolean")
