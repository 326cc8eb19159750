"""Leaderboard logic on plain pandas: records -> per-seed frame -> per-entry aggregate -> ranking.

No Streamlit here: ``leaderboard/app.py`` only renders what these functions return, and
``mpcbench report`` calls the same functions. The public API is stable:

    frame = to_frame(records)          # one row per record (flattened, see to_frame)
    agg = aggregate(frame)             # one row per (task, tier, entry, compressor)
    table = rank(agg, "pareto")        # + a "rank" column, sorted within each task/tier
    RULES["pareto"].explanation        # what the rule means, shown on the page

Column conventions: per-direction columns end in ``_forward`` / ``_backward`` / ``_dp`` /
``_total``; per-network-profile columns are ``<name>@<profile>`` (``time_to_target_s@1Gbps``).
"""

from __future__ import annotations

import math
import re
import warnings
from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np
import pandas as pd

__all__ = [
    "BASELINE",
    "DIRECTIONS",
    "BYTE_DIRECTIONS",
    "RULES",
    "Rule",
    "to_frame",
    "aggregate",
    "rank",
    "pareto_front",
    "pareto_ranks",
    "significance_marker",
    "network_profiles",
    "profile_bandwidth_bps",
    "curve_frame",
    "entry_detail",
    "display_table",
]

BASELINE = "none"  # the uncompressed compressor every delta is measured against
DIRECTIONS = ("forward", "backward", "dp")
BYTE_DIRECTIONS = DIRECTIONS + ("total",)
ALPHA_MARKERS = ((0.001, "***"), (0.01, "**"), (0.05, "*"))
N_TOO_SMALL = "n too small"
GROUP = ["task", "tier", "entry", "compressor"]


# --------------------------------------------------------------------------- records -> frame
def _num(v: Any) -> float:
    """A JSON number as float; anything else (None, bool, str) is NaN."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return math.nan
    return float(v)


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _str(v: Any) -> str:
    return v if isinstance(v, str) else ("" if v is None else str(v))


MAX_WARNINGS = 100  # per record; a record is bounded anyway, this keeps one record from flooding the page


def _warning_list(v: Any) -> list[str]:
    """A record's ``warnings`` as a list of one-line strings (None or a missing field: none).

    Records come from strangers, so anything that is not a list of strings is coerced: a bare
    string is one warning, other items are shown via ``str``; never more than MAX_WARNINGS.
    """
    items = [v] if isinstance(v, str) else (v if isinstance(v, list) else [])
    return [" ".join(_str(w).split()) for w in items[:MAX_WARNINGS] if _str(w).strip()]


def to_frame(records: Iterable[dict[str, Any]]) -> pd.DataFrame:
    """One row per record, flattened for pandas.

    Records are ``mpcbench.record/1`` dicts (already validated), optionally with ``entry``,
    ``submitter`` and ``entry_info`` attached by :mod:`leaderboard.submissions` (a record
    without them belongs to entry ``"local"``). Columns:

    - identity: ``record_id, cell_key, cell_id, created, entry, entry_name, submitter, task,
      tier, compressor, seed, status, error``; ``latest`` is False for a record superseded by a
      newer record of the same (entry, cell_key) (a rerun) and such rows are ignored by
      :func:`aggregate`.
    - quality: ``metric_name, higher_is_better, final_metric, final_metric_uncompressed,
      target, reached_target_step``.
    - bytes: ``raw_bytes_<dir>, wire_bytes_<dir>, ratio_<dir>`` (raw / wire, NaN when the
      direction sent nothing) for forward/backward/dp/total, and ``bytes_per_step_<dir>``
      (wire bytes per training step; total = sum of the directions present).
    - time: measured ``step_s, compute_s, compress_s, comm_s, total_train_s, wall_s``;
      modeled ``time_to_target_s@<profile>`` (NaN: target not reached) and ``total_s@<profile>``
      for every network profile present in any record.
    - ``warnings`` (list of one-line strings, e.g. a payload larger than the raw tensor; see
      ``suite.record_builder.expansion_warnings``) and ``n_warnings`` (its length).
    - run / provenance: ``spec_forward, spec_backward, spec_dp, n_stages, dp, microbatches,
      schedule, steps, mode, device, git_commit, git_dirty, mpcbench_version, plugin_hash,
      torch, cuda, gpu, cpu``.
    - raw objects for detail views: ``curve`` (list of points), ``config``, ``provenance``,
      ``entry_info`` (dicts).
    """
    rows = [_flatten(r) for r in records]
    frame = pd.DataFrame(rows)
    if frame.empty:
        return pd.DataFrame(columns=_BASE_COLUMNS)
    # a rerun of the same cell in the same entry supersedes the older record
    order = frame.reset_index().sort_values(["created", "index"], kind="stable")
    last = order.drop_duplicates(["entry", "cell_key"], keep="last")["index"]
    frame["latest"] = frame.index.isin(last)
    # every profile seen anywhere gets a column (NaN where a record lacks it)
    for p in network_profiles(frame):
        for c in (f"time_to_target_s@{p}", f"total_s@{p}"):
            if c not in frame:
                frame[c] = math.nan
    return frame


_BASE_COLUMNS = [
    "record_id", "cell_key", "cell_id", "created", "entry", "entry_name", "submitter",
    "task", "tier", "compressor", "seed", "status", "error", "metric_name", "higher_is_better",
    "final_metric", "final_metric_uncompressed", "target", "reached_target_step",
    *[f"{k}_{d}" for k in ("raw_bytes", "wire_bytes", "ratio", "bytes_per_step") for d in BYTE_DIRECTIONS],
    "step_s", "compute_s", "compress_s", "comm_s", "total_train_s", "wall_s", "warnings", "n_warnings", "latest",
]  # fmt: skip


def _flatten(r: dict[str, Any]) -> dict[str, Any]:
    ok = r.get("status") == "ok"
    info = _dict(r.get("entry_info"))
    prov = _dict(r.get("provenance"))
    machine = _dict(prov.get("machine"))
    run = _dict(r.get("run"))
    specs = _dict(r.get("specs"))
    compressor = _str(r.get("compressor"))
    row: dict[str, Any] = {
        "record_id": _str(r.get("record_id")),
        "cell_key": _str(r.get("cell_key")),
        "cell_id": _str(r.get("cell_id")),
        "created": _str(r.get("created")),
        "entry": _str(r.get("entry")) or "local",
        "entry_name": _str(info.get("name")) or _str(r.get("entry")) or "local",
        "submitter": _str(r.get("submitter")),
        "task": _str(r.get("task")),
        "tier": _str(r.get("tier")),
        "compressor": compressor,
        "seed": int(r["seed"]) if isinstance(r.get("seed"), int) else -1,
        "status": _str(r.get("status")),
        "error": _str(r.get("error")),
        "metric_name": _str(r.get("metric_name")),
        "higher_is_better": r.get("higher_is_better") if isinstance(r.get("higher_is_better"), bool) else True,
        "final_metric": _num(r.get("final_metric")) if ok else math.nan,
        "final_metric_uncompressed": _num(r.get("final_metric_uncompressed")) if ok else math.nan,
        "target": _num(r.get("target")),
        "reached_target_step": _num(r.get("reached_target_step")),
        "warnings": _warning_list(r.get("warnings")),
    }
    row["n_warnings"] = len(row["warnings"])
    # bytes: ratios are recomputed from the measured counts, never taken from the record's claim
    counts = _dict(r.get("bytes"))
    raw_total = wire_total = 0.0
    for d in DIRECTIONS:
        c = _dict(counts.get(d))
        raw, wire = _num(c.get("raw")), _num(c.get("wire"))
        row[f"raw_bytes_{d}"], row[f"wire_bytes_{d}"] = raw, wire
        row[f"ratio_{d}"] = raw / wire if wire > 0 else math.nan
        if wire > 0:
            raw_total += raw
            wire_total += wire
    have_bytes = ok and any(_dict(counts.get(d)) for d in DIRECTIONS)
    row["raw_bytes_total"] = raw_total if have_bytes else math.nan
    row["wire_bytes_total"] = wire_total if have_bytes else math.nan
    row["ratio_total"] = raw_total / wire_total if wire_total > 0 else math.nan
    bps = _dict(r.get("bytes_per_step"))
    vals = []
    for d in DIRECTIONS:
        v = _num(bps.get(d))
        row[f"bytes_per_step_{d}"] = v
        if not math.isnan(v):
            vals.append(v)
    row["bytes_per_step_total"] = sum(vals) if vals else math.nan
    t = _dict(r.get("time"))
    for k in ("step_s", "compute_s", "compress_s", "comm_s", "total_train_s"):
        row[k] = _num(t.get(k))
    row["wall_s"] = _num(r.get("wall_s"))
    for prof, m in _dict(r.get("modeled")).items():
        m = _dict(m)
        row[f"time_to_target_s@{prof}"] = _num(m.get("time_to_target_s"))
        row[f"total_s@{prof}"] = _num(m.get("total_s"))
    for d in DIRECTIONS:
        row[f"spec_{d}"] = _str(specs.get(d))
    for k in ("n_stages", "dp", "microbatches", "steps"):
        row[k] = _num(run.get(k))
    for k in ("schedule", "mode", "device"):
        row[k] = _str(run.get(k))
    hashes = _dict(prov.get("plugin_hashes"))
    row.update(
        git_commit=_str(prov.get("git_commit")),
        git_dirty=prov.get("git_dirty") if isinstance(prov.get("git_dirty"), bool) else None,
        mpcbench_version=_str(prov.get("mpcbench_version")),
        plugin_hash=_str(hashes.get(compressor)) or ", ".join(sorted({_str(v) for v in hashes.values()})),
        torch=_str(machine.get("torch")),
        cuda=_str(machine.get("cuda")),
        gpu=_str(machine.get("gpu")),
        cpu=_str(machine.get("cpu")),
        curve=r.get("curve") if isinstance(r.get("curve"), list) else [],
        config=_dict(r.get("config")),
        provenance=prov,
        entry_info=info,
    )
    return row


# --------------------------------------------------------------------------- network profiles
_BW = re.compile(r"(\d+(?:\.\d+)?)\s*([kKmMgGtT]?)(?:bps|b/s|bit)", re.IGNORECASE)
_UNIT = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}


def profile_bandwidth_bps(name: str) -> float:
    """Bandwidth of a profile, parsed from its name (``"100Gbps"`` -> 1e11), else looked up in
    ``suite.network.PROFILES``; NaN if neither works."""
    m = _BW.search(name)
    if m:
        return float(m.group(1)) * _UNIT[m.group(2).lower()]
    try:
        from suite.network import PROFILES  # the runtime's table; optional for the leaderboard

        return float(PROFILES[name].bandwidth_bps)
    except Exception:  # noqa: BLE001 - the leaderboard must open without the runtime
        return math.nan


def network_profiles(frame: pd.DataFrame) -> list[str]:
    """Profiles with a ``time_to_target_s@<profile>`` column, fastest network first."""
    names = [c.split("@", 1)[1] for c in frame.columns if c.startswith("time_to_target_s@")]
    seen = list(dict.fromkeys(names))
    return sorted(seen, key=lambda p: (-np.nan_to_num(profile_bandwidth_bps(p), nan=-1.0), seen.index(p)))


# --------------------------------------------------------------------------- aggregation
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


def _welch_p(a: np.ndarray, b: np.ndarray) -> float:
    if len(a) < 2 or len(b) < 2:
        return math.nan
    from scipy import stats  # imported here: it costs seconds and only aggregate needs it

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # zero-variance samples: p is 0 or NaN
        return float(stats.ttest_ind(a, b, equal_var=False).pvalue)


def _first(s: pd.Series) -> Any:
    s = s.dropna()
    return s.iloc[0] if len(s) else None


def aggregate(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per (task, tier, entry, compressor) over the seeds of that entry.

    Only the latest record per cell counts (``frame.latest``); failed / timed-out records
    count in ``n_failed`` but not in the statistics. Columns:

    - ``n`` (ok seeds), ``n_failed``, ``seeds``, ``metric_name``, ``higher_is_better``,
      ``metric_mean``, ``metric_std`` (sample std, NaN for n < 2), ``metric_uncompressed_mean``.
    - ``delta``: metric_mean minus the mean of the ``none`` baseline of the same task and
      tier (the same entry's baseline if it has one, else the baseline entry with most seeds,
      named in ``baseline_entry``); ``p_value``: Welch's t-test (unequal variances) of the
      seeds against the baseline's seeds, NaN when either has n < 2; ``significance``:
      :func:`significance_marker` (``"baseline"`` on the baseline row, ``"no baseline"``
      when the task/tier has none).
    - means over seeds of ``ratio_<dir>``, ``bytes_per_step_<dir>``, ``step_s``,
      ``total_train_s``, ``wall_s``, ``total_s@<profile>``.
    - ``time_to_target_s@<profile>``: mean over the seeds that reached the target (NaN if
      none did) and ``reached@<profile>``: the fraction of ok seeds that reached it.
    - ``n_warnings``: warning lines over the seeds' records (all statuses), ``warned_seeds``:
      how many seeds have at least one.
    - ``submitter``, ``entry_name``, ``plugin_hash``, ``spec_<dir>`` (first non-empty).
    """
    profiles = network_profiles(frame)
    if frame.empty:
        cols = [*GROUP, "n", "n_failed", "metric_mean", "metric_std", "delta", "p_value", "significance"]
        return pd.DataFrame(columns=cols)
    frame = frame[frame["latest"]] if "latest" in frame else frame
    mean_cols = [f"{k}_{d}" for k in ("ratio", "bytes_per_step") for d in BYTE_DIRECTIONS]
    mean_cols += ["step_s", "compute_s", "compress_s", "comm_s", "total_train_s", "wall_s"]
    mean_cols += [f"total_s@{p}" for p in profiles]
    rows = []
    for key, g in frame.groupby(GROUP, sort=True, dropna=False):
        ok = g[g["status"] == "ok"]
        vals = ok["final_metric"].dropna().to_numpy(float)
        row: dict[str, Any] = dict(zip(GROUP, key))
        row.update(
            n=len(vals),
            n_failed=int((g["status"] != "ok").sum()),
            n_warnings=int(g["n_warnings"].sum()) if "n_warnings" in g else 0,
            warned_seeds=int((g["n_warnings"] > 0).sum()) if "n_warnings" in g else 0,
            seeds=sorted(int(s) for s in ok["seed"]),
            metric_name=_first(ok["metric_name"].replace("", np.nan)) or _first(g["metric_name"].replace("", np.nan)) or "",
            higher_is_better=bool(_first(ok["higher_is_better"]) if len(ok) else True),
            metric_mean=float(vals.mean()) if len(vals) else math.nan,
            metric_std=float(vals.std(ddof=1)) if len(vals) > 1 else math.nan,
            metric_uncompressed_mean=float(ok["final_metric_uncompressed"].mean()) if len(ok) else math.nan,
            submitter=_first(g["submitter"]) or "",
            entry_name=_first(g["entry_name"]) or "",
            plugin_hash=_first(g["plugin_hash"].replace("", np.nan)) or "",
            _values=vals,
        )
        for d in DIRECTIONS:
            row[f"spec_{d}"] = _first(g[f"spec_{d}"].replace("", np.nan)) or ""
        for c in mean_cols:
            row[c] = float(ok[c].mean()) if c in ok and len(ok) else math.nan
        for p in profiles:
            t = ok[f"time_to_target_s@{p}"]
            row[f"time_to_target_s@{p}"] = float(t.mean()) if t.notna().any() else math.nan
            row[f"reached@{p}"] = float(t.notna().mean()) if len(ok) else 0.0
        rows.append(row)
    agg = pd.DataFrame(rows)
    _add_deltas(agg)
    return agg.drop(columns=["_values"]).reset_index(drop=True)


def _add_deltas(agg: pd.DataFrame) -> None:
    """Fill delta / p_value / significance / baseline_entry in place (see :func:`aggregate`)."""
    agg["baseline_entry"] = ""
    agg["delta"] = math.nan
    agg["p_value"] = math.nan
    agg["significance"] = "no baseline"
    for (_task, _tier), g in agg.groupby(["task", "tier"], sort=False):
        bases = g[(g["compressor"] == BASELINE) & (g["n"] > 0)]
        if bases.empty:
            continue
        # the entry's own baseline measures on the same machine; else the best-sampled one
        fallback = bases.sort_values(["n", "entry"], ascending=[False, True]).index[0]
        for i in g.index:
            own = bases.index[bases["entry"] == agg.at[i, "entry"]]
            b = own[0] if len(own) else fallback
            base_vals, vals = agg.at[b, "_values"], agg.at[i, "_values"]
            agg.at[i, "baseline_entry"] = agg.at[b, "entry"]
            if i == b:
                agg.at[i, "delta"] = 0.0
                agg.at[i, "significance"] = "baseline"
                continue
            if len(vals) == 0:
                agg.at[i, "significance"] = "no results"
                continue
            p = _welch_p(vals, base_vals)
            agg.at[i, "delta"] = float(vals.mean() - base_vals.mean())
            agg.at[i, "p_value"] = p
            agg.at[i, "significance"] = significance_marker(p, len(vals), len(base_vals))


# --------------------------------------------------------------------------- Pareto
def pareto_ranks(
    df: pd.DataFrame, x: str, y: str, *, minimize_x: bool = True, maximize_y: bool = True
) -> pd.Series:
    """Non-dominated sorting: 1 = on the frontier, 2 = on the frontier once rank 1 is removed, ...

    A point dominates another if it is at least as good on both axes and strictly better on
    one; identical points share a rank. Rows with NaN in x or y get rank NA.
    """
    out = pd.Series(pd.NA, index=df.index, dtype="Int64")
    valid = df[[x, y]].dropna()
    xs = valid[x].to_numpy(float) * (1 if minimize_x else -1)  # smaller is better after the sign flip
    ys = valid[y].to_numpy(float) * (-1 if maximize_y else 1)
    remaining = np.arange(len(valid))
    level = 1
    while len(remaining):
        px, py = xs[remaining], ys[remaining]
        # dominated[i]: some j is <= on both and < on one
        le = (px[None, :] <= px[:, None]) & (py[None, :] <= py[:, None])
        lt = (px[None, :] < px[:, None]) | (py[None, :] < py[:, None])
        dominated = (le & lt).any(axis=1)
        front = remaining[~dominated]
        out.loc[valid.index[front]] = level
        remaining = remaining[dominated]
        level += 1
    return out


def pareto_front(
    df: pd.DataFrame, x: str, y: str, *, minimize_x: bool = True, maximize_y: bool = True
) -> pd.Series:
    """Boolean mask of the rows on the Pareto frontier (rank 1 of :func:`pareto_ranks`)."""
    return (pareto_ranks(df, x, y, minimize_x=minimize_x, maximize_y=maximize_y) == 1).fillna(False).astype(bool)


# --------------------------------------------------------------------------- ranking rules
@dataclass(frozen=True)
class Rule:
    name: str
    title: str
    explanation: str


RULES: dict[str, Rule] = {
    "quality_at_ratio": Rule(
        "quality_at_ratio",
        "Best quality at a compression ratio",
        "Entries whose mean compression ratio (raw bytes / bytes on the wire, measured from the "
        "tensors that crossed the wire, over the chosen direction or all directions together) is at "
        "least the chosen minimum are ranked by their mean final quality over seeds (higher accuracy "
        "first, or lower perplexity first for tasks where lower is better). Entries below the ratio "
        "are listed without a rank. The delta column compares with the uncompressed baseline of the "
        "same task and tier; stars mark a significant difference by Welch's t-test over seeds "
        "(* p<0.05, ** p<0.01, *** p<0.001; 'n too small' when either side has fewer than 2 seeds).",
    ),
    "time_to_target": Rule(
        "time_to_target",
        "Fastest time-to-target on a network",
        "Entries are ranked by the modeled wall-clock time to first reach the task's target quality "
        "when the measured compute time and the measured bytes per step are replayed over the chosen "
        "network profile (bandwidth and latency). The time is the mean over the seeds that reached "
        "the target. Entries whose every seed reached the target rank first, then entries where only "
        "some seeds reached it (the reached column says how many), and entries that never reached "
        "the target rank last.",
    ),
    "pareto": Rule(
        "pareto",
        "Pareto rank: quality versus bytes",
        "Each entry is a point (bytes per training step on the wire, mean final quality). Rank 1 is "
        "the Pareto frontier: no other entry is at least as good on both (fewer or equal bytes and "
        "equal or better quality) and strictly better on one. Rank 2 is the frontier once rank 1 is "
        "removed, and so on. Within a rank, entries are listed by quality. The plot below shows the "
        "frontier highlighted.",
    ),
}


def rank(
    agg: pd.DataFrame,
    rule: str,
    *,
    min_ratio: float | None = None,
    network: str | None = None,
    direction: str = "total",
) -> pd.DataFrame:
    """Rank an :func:`aggregate` frame within each (task, tier) by ``rule`` (a key of :data:`RULES`).

    Returns a copy with ``rank`` (Int64; NA = not ranked: below ``min_ratio``, no ok seeds,
    or no value for the rule) sorted by task, tier, rank. ``direction`` picks which bytes /
    ratio the rules use (``forward``/``backward``/``dp``/``total``). ``network`` is a profile
    name, required by ``time_to_target`` (default: the fastest profile present).
    """
    if rule not in RULES:
        raise ValueError(f"unknown ranking rule {rule!r}; valid rules: {', '.join(RULES)}")
    if direction not in BYTE_DIRECTIONS:
        raise ValueError(f"unknown direction {direction!r}; valid: {', '.join(BYTE_DIRECTIONS)}")
    out = agg.copy()
    out["rank"] = pd.Series(pd.NA, index=out.index, dtype="Int64")
    if out.empty:
        return out
    sign = np.where(out["higher_is_better"].astype(bool), -1.0, 1.0)  # smaller key = better
    quality_key = pd.Series(out["metric_mean"].to_numpy(float) * sign, index=out.index)
    if rule == "quality_at_ratio":
        eligible = (out["n"] > 0) & quality_key.notna()
        if min_ratio is not None:
            eligible &= out[f"ratio_{direction}"] >= float(min_ratio)
        keys = [quality_key.where(eligible)]
    elif rule == "time_to_target":
        profiles = [c.split("@", 1)[1] for c in out.columns if c.startswith("time_to_target_s@")]
        if not profiles:
            raise ValueError("no record has modeled times, so time_to_target cannot rank")
        network = network or network_profiles(out)[0]
        if network not in profiles:
            raise ValueError(f"unknown network profile {network!r}; valid: {', '.join(profiles)}")
        t, reached = out[f"time_to_target_s@{network}"], out[f"reached@{network}"]
        eligible = out["n"] > 0
        reach_class = np.where(reached >= 1.0, 0, np.where(reached > 0, 1, 2))  # all / some / none
        keys = [pd.Series(reach_class, index=out.index).where(eligible), t.fillna(np.inf)]
    else:  # pareto
        eligible = out["n"] > 0
        col = f"bytes_per_step_{direction}"
        pr = pd.Series(pd.NA, index=out.index, dtype="Int64")
        for _, g in out[eligible].groupby(["task", "tier"], sort=False):
            hib = bool(g["higher_is_better"].iloc[0])
            pr.loc[g.index] = pareto_ranks(g, col, "metric_mean", maximize_y=hib)
        out["pareto_rank"] = pr
        keys = [pr.astype(float), quality_key]
    key_cols = []
    for i, k in enumerate(keys):
        out[f"_k{i}"] = k.astype(float)
        key_cols.append(f"_k{i}")
    for _, g in out.groupby(["task", "tier"], sort=False):
        g = g[g["_k0"].notna()]
        if g.empty:
            continue
        if rule == "pareto":  # the rank is the Pareto level itself (ties share it)
            out.loc[g.index, "rank"] = g["_k0"].astype(int)
            continue
        # dense position of the lexicographic key; equal keys share the smaller rank
        tuples = list(zip(*(g[c] for c in key_cols)))
        ordered = sorted(set(tuples))
        pos, r = {}, 1
        for tup in ordered:
            pos[tup] = r
            r += sum(1 for t in tuples if t == tup)
        out.loc[g.index, "rank"] = [pos[t] for t in tuples]
    out["_rank_sort"] = out["rank"].astype(float).fillna(np.inf)
    out = out.sort_values(["task", "tier", "_rank_sort", *key_cols, "entry", "compressor"], kind="stable")
    return out.drop(columns=[*key_cols, "_rank_sort"]).reset_index(drop=True)


# --------------------------------------------------------------------------- views for the app
def curve_frame(frame: pd.DataFrame, selection: Iterable[tuple[str, str]] | None = None) -> pd.DataFrame:
    """Long frame of training curves: one row per (record, eval point) with ``entry, compressor,
    seed, label, step, metric, metric_uncompressed, train_loss, wall_s``. ``selection``:
    (entry, compressor) pairs to keep (None: all)."""
    cols = ["task", "tier", "entry", "compressor", "seed", "label", "step", "metric",
            "metric_uncompressed", "train_loss", "wall_s"]  # fmt: skip
    keep = set(selection) if selection is not None else None
    rows = []
    if not frame.empty:
        sub = frame[(frame["status"] == "ok") & frame["latest"]]
        for r in sub.itertuples(index=False):
            if keep is not None and (r.entry, r.compressor) not in keep:
                continue
            for p in r.curve:
                if not isinstance(p, dict):
                    continue
                rows.append(
                    dict(task=r.task, tier=r.tier, entry=r.entry, compressor=r.compressor, seed=r.seed,
                         label=f"{r.entry} / {r.compressor}", step=_num(p.get("step")),
                         metric=_num(p.get("metric")), metric_uncompressed=_num(p.get("metric_uncompressed")),
                         train_loss=_num(p.get("train_loss")), wall_s=_num(p.get("wall_s")))
                )  # fmt: skip
    return pd.DataFrame(rows, columns=cols)


def entry_detail(frame: pd.DataFrame, task: str, tier: str, entry: str, compressor: str) -> dict[str, Any]:
    """Everything about one leaderboard row, JSON-able: entry info, specs, provenance, config,
    the per-seed results, and ``warnings``: ``{"seed", "warning"}`` for every warning line of
    the latest records (the ones the ranking counts), for the detail view."""
    g = frame[(frame["task"] == task) & (frame["tier"] == tier) & (frame["entry"] == entry)
              & (frame["compressor"] == compressor)]  # fmt: skip
    if g.empty:
        return {}
    g = g.sort_values("seed")
    last = g[g["latest"]].iloc[-1] if g["latest"].any() else g.iloc[-1]
    seeds, warned = [], []
    for r in g.itertuples(index=False):
        if r.latest:
            warned += [{"seed": r.seed, "warning": w} for w in r.warnings]
        seeds.append(
            {
                "seed": r.seed, "status": r.status, "error": r.error or None, "latest": bool(r.latest),
                "final_metric": None if math.isnan(r.final_metric) else r.final_metric,
                "ratio_total": None if math.isnan(r.ratio_total) else round(r.ratio_total, 4),
                "step_s": None if math.isnan(r.step_s) else r.step_s,
                "warnings": list(r.warnings), "record_id": r.record_id, "created": r.created,
            }
        )  # fmt: skip
    return {
        "entry": entry,
        "entry_info": last["entry_info"] or {"name": last["entry_name"]},
        "submitter": last["submitter"],
        "task": task,
        "tier": tier,
        "compressor": compressor,
        "specs": {d: last[f"spec_{d}"] for d in DIRECTIONS},
        "plugin_hash": last["plugin_hash"],
        "provenance": last["provenance"],
        "config": last["config"],
        "seeds": seeds,
        "warnings": warned,
    }


def _fmt_bytes(v: float) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(v) >= scale:
            return f"{v / scale:.3g} {unit}"
    return f"{v:.0f} B"


def _fmt(v: float, spec: str = ".4g", suffix: str = "") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{v:{spec}}{suffix}"


def display_table(ranked: pd.DataFrame, *, network: str | None = None, direction: str = "total") -> pd.DataFrame:
    """Human-readable ranking table (strings) from :func:`rank` output: rank, entry, compressor,
    quality ``mean ± std (n)``, delta with significance marker, compression ratio per direction
    (``-``: nothing sent that way) and for ``direction``, wire bytes per step, measured step and
    train time, modeled time-to-target at ``network`` with how many seeds reached the target,
    the number of failed seeds and ``warnings`` (``⚠ N``: N warning lines in the entry's
    records, e.g. payloads larger than the raw tensors; each column left out when no row has
    any)."""
    rows = []
    names = [n for n in ranked.get("metric_name", pd.Series(dtype=str)) if n]
    metric_header = names[0] if names else "quality"
    for r in ranked.to_dict("records"):
        std = r.get("metric_std")
        quality = "-" if r["n"] == 0 else (
            f"{r['metric_mean']:.4f} ± {std:.4f} (n={r['n']})" if not math.isnan(std) else f"{r['metric_mean']:.4f} (n={r['n']})"
        )  # fmt: skip
        if r["significance"] in ("baseline", "no baseline", "no results"):
            delta = r["significance"]
        else:
            delta = f"{r['delta']:+.4f} {r['significance']}"
        row = {
            "rank": "-" if pd.isna(r["rank"]) else str(int(r["rank"])),
            "entry": r["entry"],
            "compressor": r["compressor"],
            metric_header: quality,
            "Δ vs none": delta,
        }
        if direction == "total":
            row["ratio fwd / bwd / dp"] = " / ".join(_fmt(r.get(f"ratio_{d}", math.nan), ".3g") for d in DIRECTIONS)
        row[f"ratio {direction}"] = _fmt(r.get(f"ratio_{direction}", math.nan), ".3g", "x")
        row[f"bytes/step {direction}"] = _fmt_bytes(r.get(f"bytes_per_step_{direction}", math.nan))
        row["step time"] = _fmt(r.get("step_s", math.nan), ".3g", " s")
        row["train time"] = _fmt(r.get("total_train_s", math.nan), ".3g", " s")
        if network and f"time_to_target_s@{network}" in r:
            t, reached = r[f"time_to_target_s@{network}"], r.get(f"reached@{network}", 0.0)
            k = int(round(reached * r["n"])) if r["n"] else 0
            row[f"time-to-target @ {network}"] = "-" if r["n"] == 0 else (
                "not reached" if math.isnan(t) else _fmt(t, ".3g", " s")
            ) + f" ({k}/{r['n']})"
        if r.get("n_failed"):
            row["failed"] = str(r["n_failed"])
        else:
            row["failed"] = ""
        n_warn = r.get("n_warnings")
        n_warn = int(n_warn) if isinstance(n_warn, (int, float)) and not math.isnan(n_warn) else 0
        row["warnings"] = f"⚠ {n_warn}" if n_warn else ""
        rows.append(row)
    table = pd.DataFrame(rows)
    for col in ("failed", "warnings"):
        if col in table and not table[col].astype(bool).any():
            table = table.drop(columns=col)  # nothing to flag here: no empty column
    return table
