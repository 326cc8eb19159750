"""Statistics over seeds: per-row aggregates, deltas against the right baseline, significance,
and the minimal detectable difference (MDD) that says which differences the data can resolve.

    agg = aggregate(frame)   # one row per (task, tier, entry, compressor, setup, machine)

Whose baseline (issue 12, "Ownership"; issue 18, "Same-machine baselines"): a row's delta is
measured against the ``none`` row of the **same entry**, run setup and machine class; only
when the entry has none, against the **maintainers' baseline** (:data:`leaderboard.frame.MAINTAINERS`)
of that setup, marked ``baseline_kind == "maintainers"`` (and ``baseline_same_machine`` says
whether it ran on the same machine class). Never against a third party's baseline: a
submission cannot move other entries' deltas by committing ``none`` records.

The MDD (issue 18): :func:`minimal_detectable_difference` is a pure function of measured
inputs (seed spread, seeds on each side, evaluation-set size); :func:`aggregate` feeds it
the row's and its baseline's measured spread (or :data:`MEASURED_SPREAD` when a side has one
seed) and marks a delta smaller than the MDD ``"not resolved"``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np
import pandas as pd

from leaderboard.frame import BASELINE, BYTE_DIRECTIONS, DIRECTIONS
from leaderboard.networks import network_profiles

__all__ = [
    "GROUP",
    "N_TOO_SMALL",
    "NOT_RESOLVED",
    "SeedSpread",
    "MEASURED_SPREAD",
    "significance_marker",
    "welch_p",
    "minimal_detectable_difference",
    "aggregate",
]

ALPHA_MARKERS = ((0.001, "***"), (0.01, "**"), (0.05, "*"))
N_TOO_SMALL = "n too small"
NOT_RESOLVED = "not resolved"
# one leaderboard row: a compressor of one entry under one run setup on one machine class
GROUP = ["task", "tier", "entry", "compressor", "setup", "machine"]


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


# Measured figures for tasks and tiers whose rows have fewer than 2 seeds (issue 18: the
# committed quick-tier records plus 67 extra cells, 1-3 seeds each, on the 2-core CPU
# machine). Helper F's calibration replaces these as the tiers change.
MEASURED_SPREAD: dict[tuple[str, str], SeedSpread] = {
    ("cifar10", "quick"): SeedSpread(0.027, 512, "issue 18: none seeds 0/1/2, quick tier"),
    ("sst2", "quick"): SeedSpread(0.022, 256, "issue 18: none seeds, quick tier"),
    ("shakespeare", "quick"): SeedSpread(0.014, None, "issue 18: none seeds, quick tier (nats)"),
}


def minimal_detectable_difference(
    seed_std: float,
    n: int,
    n_baseline: int,
    *,
    eval_samples: int | None = None,
    metric_level: float | None = None,
    alpha: float = 0.05,
    power: float = 0.5,
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
    with ``df = n + n_baseline - 2`` (Student's t; df < 1 is treated as 1). NaN when
    ``seed_std`` is NaN or a side has no seed. Example: std 0.027, 3 vs 3 seeds, no eval
    term: 2.78 * 0.027 * 0.816 = 0.061 (issue 18's "about 6 points").
    """
    if not (seed_std >= 0) or n < 1 or n_baseline < 1:
        return math.nan
    from scipy import stats  # imported here: it costs seconds and only this needs it

    var = seed_std**2 * (1.0 / n + 1.0 / n_baseline)
    if eval_samples and metric_level is not None and 0.0 <= metric_level <= 1.0:
        var += 2.0 * metric_level * (1.0 - metric_level) / eval_samples
    df = max(1, n + n_baseline - 2)
    crit = float(stats.t.ppf(1 - alpha / 2, df)) + float(stats.t.ppf(power, df))
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
    from scipy import stats

    va, vb = var_a / n_a, var_b / n_b
    denom = math.sqrt(va + vb)
    diff = mean_a - mean_b
    with np.errstate(divide="ignore", invalid="ignore"):
        df = (va + vb) ** 2 / (va**2 / (n_a - 1) + vb**2 / (n_b - 1)) if (va + vb) > 0 else math.nan
        t = np.divide(diff, denom)
    df = 1.0 if math.isnan(df) else df  # scipy's convention for zero-variance samples
    if math.isnan(t):
        return math.nan
    return float(2 * stats.t.sf(abs(t), df))


# --------------------------------------------------------------------------- aggregation
def _first_nonempty(frame: pd.DataFrame, keys: list[pd.Series], col: str) -> pd.Series:
    """First non-empty string of ``col`` per group ("" when none)."""
    return frame[col].replace("", np.nan).groupby(keys, sort=True, dropna=False).first().fillna("")


def aggregate(frame: pd.DataFrame, *, spread: Mapping[tuple[str, str], SeedSpread] | None = None) -> pd.DataFrame:
    """One row per (task, tier, entry, compressor, setup, machine) over the seeds of that entry.

    ``setup`` is the run setup (:func:`leaderboard.frame.setup_label`) and ``machine`` the
    machine class (:func:`leaderboard.frame.machine_label`): records that ran under different
    settings or on different machine classes are different experiments, so they are separate
    rows, never pooled as seeds. Only the latest record per cell counts (``frame.latest``);
    failed / timed-out records count in ``n_failed`` but not in the statistics. Columns:

    - ``n`` (ok seeds), ``n_failed``, ``seeds``, ``metric_name``, ``higher_is_better``,
      ``metric_mean``, ``metric_std`` (sample std, NaN for n < 2), ``metric_uncompressed_mean``.
    - ``delta``: metric_mean minus the mean of the baseline (see the module docstring for
      whose): ``baseline_entry``, ``baseline_kind`` (``"own"`` / ``"maintainers"`` / ``""``),
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
      ``cpu_count``, ``eval_samples``, ``maintainers`` (first non-empty).
    """
    profiles = network_profiles(frame)
    if frame.empty:
        cols = [*GROUP, "n", "n_failed", "metric_mean", "metric_std", "delta", "p_value", "significance"]
        return pd.DataFrame(columns=cols)
    frame = frame[frame["latest"]] if "latest" in frame else frame
    frame = frame.assign(**{c: "" for c in ("setup", "machine") if c not in frame})  # a frame built by hand
    ok = (frame["status"] == "ok").to_numpy()
    keys = [frame[c] for c in GROUP]
    by = lambda s: s.groupby(keys, sort=True, dropna=False)  # noqa: E731 - one grouping for every column
    val = frame["final_metric"].where(ok)
    out = pd.DataFrame({"n": by(val).count()})
    out["n_failed"] = by(pd.Series(~ok, index=frame.index)).sum().astype(int)
    n_ok = by(pd.Series(ok, index=frame.index)).sum()
    warn = frame["n_warnings"] if "n_warnings" in frame else pd.Series(0, index=frame.index)
    out["n_warnings"] = by(warn).sum().astype(int)
    out["warned_seeds"] = by(warn > 0).sum().astype(int)
    seeds = frame.loc[ok, [*GROUP, "seed"]].sort_values("seed")
    seed_lists = seeds.groupby(GROUP, sort=True, dropna=False)["seed"].agg(lambda s: [int(v) for v in s])
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
    out["plugin_hash"] = _first_nonempty(frame, keys, "plugin_hash")
    for d in DIRECTIONS:
        out[f"spec_{d}"] = _first_nonempty(frame, keys, f"spec_{d}")
    out["compressor_label"] = _first_nonempty(frame, keys, "compressor_label") if "compressor_label" in frame else ""
    mean_cols = [f"{k}_{d}" for k in ("ratio", "bytes_per_step") for d in BYTE_DIRECTIONS]
    mean_cols += ["step_s", "compute_s", "compress_s", "comm_s", "total_train_s", "wall_s", "load_1m", "load_15m"]
    mean_cols += [f"total_s@{p}" for p in profiles]
    for c in mean_cols:
        out[c] = by(frame[c].where(ok)).mean() if c in frame else math.nan
    for c in ("cpu_count", "eval_samples"):
        out[c] = by(frame[c]).max() if c in frame else math.nan
    out["maintainers"] = by(frame["maintainers"]).any() if "maintainers" in frame else False
    if "code_version" in frame:
        cv = frame.loc[ok, [*GROUP, "code_version"]]
        cv_lists = cv.groupby(GROUP, sort=True, dropna=False)["code_version"].agg(lambda s: sorted(set(s) - {""}))
        out["code_versions"] = [cv_lists.get(k, []) for k in out.index]
    else:
        out["code_versions"] = [[] for _ in range(len(out))]
    for p in profiles:
        t = frame[f"time_to_target_s@{p}"].where(ok)
        out[f"time_to_target_s@{p}"] = by(t).mean()
        reached = by(t.notna()).sum()
        out[f"reached@{p}"] = np.where(n_ok > 0, reached / n_ok.where(n_ok > 0, 1), 0.0)
    out["_var"] = by(val).var(ddof=1)
    agg = out.reset_index()
    _add_deltas(agg, MEASURED_SPREAD if spread is None else spread)
    return agg.drop(columns=["_var"]).reset_index(drop=True)


def _pick_baseline(bases: pd.DataFrame, entry: str, machine: str) -> tuple[Any, str]:
    """(index, kind) of the baseline for a row of ``entry`` on ``machine`` (None, "": none)."""
    own = bases.index[(bases["entry"] == entry) & (bases["machine"] == machine)]
    if len(own):
        return own[0], "own"
    maint = bases[bases["maintainers"]]
    if maint.empty:
        return None, ""
    # the maintainers' baseline on the same machine class if there is one, else the best-sampled
    order = maint.assign(_same=maint["machine"] == machine).sort_values(["_same", "n", "entry"], ascending=[False, False, True])
    return order.index[0], "maintainers"


def _add_deltas(agg: pd.DataFrame, spread: Mapping[tuple[str, str], SeedSpread]) -> None:
    """Fill the delta, significance and MDD columns in place (see :func:`aggregate`)."""
    agg["baseline_entry"] = ""
    agg["baseline_kind"] = ""
    agg["baseline_same_machine"] = pd.Series(pd.NA, index=agg.index, dtype="boolean")
    agg["baseline_same_code"] = pd.Series(pd.NA, index=agg.index, dtype="boolean")
    agg["delta"] = math.nan
    agg["p_value"] = math.nan
    agg["significance"] = "no baseline"
    agg["mdd"] = math.nan
    agg["mdd_source"] = ""
    agg["resolved"] = pd.Series(pd.NA, index=agg.index, dtype="boolean")
    # only a baseline of the same setup is comparable: other stages/mode/device change the numbers
    for (task, tier, _), g in agg.groupby(["task", "tier", "setup"], sort=False):
        bases = g[(g["compressor"] == BASELINE) & (g["n"] > 0)]
        if bases.empty:
            continue
        known = spread.get((task, tier))
        for i in g.index:
            b, kind = _pick_baseline(bases, agg.at[i, "entry"], agg.at[i, "machine"])
            if b is None:
                continue
            agg.at[i, "baseline_entry"] = agg.at[b, "entry"]
            agg.at[i, "baseline_kind"] = kind
            agg.at[i, "baseline_same_machine"] = bool(agg.at[b, "machine"] == agg.at[i, "machine"])
            agg.at[i, "baseline_same_code"] = bool(set(agg.at[b, "code_versions"]) & set(agg.at[i, "code_versions"]))
            if i == b:
                agg.at[i, "delta"] = 0.0
                agg.at[i, "significance"] = "baseline"
                continue
            n, nb = int(agg.at[i, "n"]), int(agg.at[b, "n"])
            if n == 0:
                agg.at[i, "significance"] = "no results"
                continue
            mean, base_mean = agg.at[i, "metric_mean"], agg.at[b, "metric_mean"]
            var, base_var = agg.at[i, "_var"], agg.at[b, "_var"]
            p = welch_p(mean, var, n, base_mean, base_var, nb)
            agg.at[i, "delta"] = float(mean - base_mean)
            agg.at[i, "p_value"] = p
            agg.at[i, "significance"] = significance_marker(p, n, nb)
            # the measured spread of these two rows when both have it, else the task's figure
            if n >= 2 and nb >= 2:
                std = math.sqrt(((n - 1) * var + (nb - 1) * base_var) / (n + nb - 2))
                source = "seeds of this row and its baseline"
            elif known is not None:
                std, source = known.seed_std, known.source
            else:
                continue
            # no evaluation-set term here: every seed is evaluated on the same fixed subset, so
            # the measured seed spread already holds the item-level disagreement between models
            mdd = minimal_detectable_difference(std, n, nb)
            agg.at[i, "mdd"] = mdd
            agg.at[i, "mdd_source"] = source
            if not math.isnan(mdd):
                agg.at[i, "resolved"] = bool(abs(mean - base_mean) >= mdd)
