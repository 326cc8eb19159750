"""Leaderboard logic on plain pandas: records -> per-seed frame -> per-entry aggregate -> ranking.

No Streamlit here: ``leaderboard/app.py`` only renders what these functions return, and
``mpcbench report`` calls the same functions. The public API is stable:

    frame = to_frame(records)          # one row per record (flattened, see to_frame)
    agg = aggregate(frame)             # one row per (task, tier, entry, compressor, setup)
    table = rank(agg, "pareto")        # + a "rank" column, sorted within each task/tier
    RULES["pareto"].explanation        # what the rule means, shown on the page

Column conventions: per-direction columns end in ``_forward`` / ``_backward`` / ``_dp`` /
``_total``; per-network-profile columns are ``<name>@<profile>`` (``time_to_target_s@1Gbps``).

A row of the leaderboard is one experiment: a compressor under one run *setup* (pipeline
stages, schedule, micro-batches, process mode, device, data-parallel size, step override,
compression warm-up; see :func:`setup_label`). Records that differ in setup are never pooled
as seeds of one row, and deltas compare with the ``none`` baseline of the same setup.
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
    "setup_label",
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
GROUP = ["task", "tier", "entry", "compressor", "setup"]


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


def _pos_int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def _word(v: Any) -> str:
    """A record's short setting (schedule, mode, device) on one line and bounded: record text is untrusted."""
    return " ".join(_str(v).split())[:40]


def setup_label(record: dict[str, Any]) -> str:
    """The run setup of a record besides its compressor, as a short stable string, e.g.
    ``"4 stages, 1f1b, M=4, single, cpu"`` (+ ``", dp=2"``, ``", 200 steps"``, ``", warm-up 10"``
    when set).

    Stages, schedule, micro-batches, mode, device and dp come from the record's ``run`` (what
    actually ran, defaults resolved), else from its ``config`` (a failed record has no ``run``;
    :func:`to_frame` then borrows the resolved setup of an ok record with the same config).
    ``steps`` is the config's step override (the tier's own count is implied by the tier) and
    the warm-up is ``compress_warmup_steps``. Missing fields are left out, so an old or minimal
    record still gets a (shorter) label; ``""`` when nothing is known.
    """
    run, cfg = _dict(record.get("run")), _dict(record.get("config"))
    stages = _pos_int(run.get("n_stages")) or _pos_int(cfg.get("stages"))
    micro = _pos_int(run.get("microbatches")) or _pos_int(cfg.get("microbatches"))
    dp = _pos_int(run.get("dp")) or _pos_int(cfg.get("dp"))
    steps, warmup = _pos_int(cfg.get("steps")), _pos_int(cfg.get("compress_warmup_steps"))
    parts = [f"{stages} stage{'' if stages == 1 else 's'}" if stages else ""]
    parts.append(_word(run.get("schedule")) or _word(cfg.get("schedule")))
    parts.append(f"M={micro}" if micro else "")
    parts.append(_word(run.get("mode")) or _word(cfg.get("mode")))
    parts.append(_word(run.get("device")) or _word(cfg.get("device")))
    parts.append(f"dp={dp}" if dp and dp != 1 else "")  # dp=1 is the default: not worth a word
    parts.append(f"{steps} steps" if steps else "")
    parts.append(f"warm-up {warmup}" if warmup else "")
    return ", ".join(p for p in parts if p)


_SETUP_CONFIG_KEYS = ("stages", "dp", "schedule", "microbatches", "compress_warmup_steps", "mode", "device", "steps")


def _setup_signature(record: dict[str, Any]) -> str:
    """The record's requested setup as written in its config (defaults unresolved)."""
    cfg = _dict(record.get("config"))
    return repr([cfg.get(k) for k in _SETUP_CONFIG_KEYS])


def _resolve_setups(frame: pd.DataFrame) -> None:
    """A record without ``run`` (a failed cell) gets the resolved setup of an ok record of the
    same task, tier and requested config, so it counts in the same row (``stages: null`` in the
    config means the task's default, which only a record that ran knows)."""
    missing = ~frame["_has_run"]
    if not missing.any() or missing.all():
        return
    known = frame[~missing].groupby(["task", "tier", "_setup_sig"])["setup"].agg(lambda s: s.mode().iloc[0])
    for i in frame.index[missing]:
        key = (frame.at[i, "task"], frame.at[i, "tier"], frame.at[i, "_setup_sig"])
        if key in known.index:
            frame.at[i, "setup"] = known[key]


def to_frame(records: Iterable[dict[str, Any]]) -> pd.DataFrame:
    """One row per record, flattened for pandas.

    Records are ``mpcbench.record/1`` dicts (already validated), optionally with ``entry``,
    ``submitter`` and ``entry_info`` attached by :mod:`leaderboard.submissions` (a record
    without them belongs to entry ``"local"``). Columns:

    - identity: ``record_id, cell_key, cell_id, created, entry, entry_name, submitter, task,
      tier, compressor, setup`` (:func:`setup_label`), ``seed, status, error``; ``latest`` is
      False for a record superseded by a newer record of the same entry and cell_key, or of
      the same entry, task, tier, compressor, setup and seed (a rerun: one seed is never
      counted twice), and such rows are ignored by :func:`aggregate`.
    - quality: ``metric_name, higher_is_better, final_metric, final_metric_uncompressed,
      target, reached_target_step``.
    - bytes: ``raw_bytes_<dir>, wire_bytes_<dir>, ratio_<dir>`` (raw / wire, NaN when the
      direction sent nothing) for forward/backward/dp/total, and ``bytes_per_step_<dir>``
      (wire bytes per training step; total = sum of the directions present).
    - time: measured ``step_s, compute_s, compress_s, comm_s, total_train_s, wall_s``;
      modeled ``time_to_target_s@<profile>`` (NaN: target not reached) and ``total_s@<profile>``
      for every network profile present in any record.
    - ``warnings`` (list of one-line strings, e.g. a payload larger than the raw tensor; see
      ``suite.bench.record_builder.expansion_warnings``) and ``n_warnings`` (its length).
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
    _resolve_setups(frame)
    frame = frame.drop(columns=["_has_run", "_setup_sig"])
    # a rerun of the same cell in the same entry supersedes the older record
    order = frame.reset_index().sort_values(["created", "index"], kind="stable")
    last = order.drop_duplicates(["entry", "cell_key"], keep="last")["index"]
    last_seed = order.drop_duplicates(["entry", "task", "tier", "compressor", "setup", "seed"], keep="last")["index"]
    frame["latest"] = frame.index.isin(last) & frame.index.isin(last_seed)
    # every profile seen anywhere gets a column (NaN where a record lacks it)
    for p in network_profiles(frame):
        for c in (f"time_to_target_s@{p}", f"total_s@{p}"):
            if c not in frame:
                frame[c] = math.nan
    return frame


_BASE_COLUMNS = [
    "record_id", "cell_key", "cell_id", "created", "entry", "entry_name", "submitter",
    "task", "tier", "compressor", "setup", "seed", "status", "error", "metric_name", "higher_is_better",
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
        "setup": setup_label(r),
        "_has_run": bool(run),
        "_setup_sig": _setup_signature(r),
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
    ``suite.results.network.PROFILES``; NaN if neither works."""
    m = _BW.search(name)
    if m:
        return float(m.group(1)) * _UNIT[m.group(2).lower()]
    try:
        from suite.results.network import PROFILES  # the runtime's table; optional for the leaderboard

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
    """One row per (task, tier, entry, compressor, setup) over the seeds of that entry.

    ``setup`` is the run setup (:func:`setup_label`): records of one compressor that ran under
    different settings (stages, schedule, micro-batches, mode, device, dp, ...) are different
    experiments, so they are separate rows, never pooled as seeds. Only the latest record per
    cell counts (``frame.latest``); failed / timed-out records count in ``n_failed`` but not
    in the statistics. Columns:

    - ``n`` (ok seeds), ``n_failed``, ``seeds``, ``metric_name``, ``higher_is_better``,
      ``metric_mean``, ``metric_std`` (sample std, NaN for n < 2), ``metric_uncompressed_mean``.
    - ``delta``: metric_mean minus the mean of the ``none`` baseline of the same task, tier
      and setup (the same entry's baseline if it has one, else the baseline entry with most
      seeds in that setup, named in ``baseline_entry``); ``p_value``: Welch's t-test (unequal
      variances) of the seeds against the baseline's seeds, NaN when either has n < 2;
      ``significance``: :func:`significance_marker` (``"baseline"`` on the baseline row,
      ``"no baseline"`` when no ``none`` row has results in that task, tier and setup: a
      baseline run under other settings is not compared with).
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
    if "setup" not in frame:  # a frame built by hand, not by to_frame: one unnamed setup
        frame = frame.assign(setup="")
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
    # only a baseline of the same setup is comparable: other stages/mode/device change the numbers
    for _, g in agg.groupby(["task", "tier", "setup"], sort=False):
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
        "same task, tier and run setup; stars mark a significant difference by Welch's t-test over seeds "
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
    ties = ["entry", "compressor"] + (["setup"] if "setup" in out else [])
    out = out.sort_values(["task", "tier", "_rank_sort", *key_cols, *ties], kind="stable")
    return out.drop(columns=[*key_cols, "_rank_sort"]).reset_index(drop=True)


# --------------------------------------------------------------------------- views for the app
def _selected(frame: pd.DataFrame, selection: Iterable[tuple[str, ...]] | None) -> pd.Series:
    """Rows matching any (entry, compressor) or (entry, compressor, setup) tuple (None: all)."""
    if selection is None:
        return pd.Series(True, index=frame.index)
    setup = frame["setup"] if "setup" in frame else pd.Series("", index=frame.index)
    keep = pd.Series(False, index=frame.index)
    for sel in selection:
        m = (frame["entry"] == sel[0]) & (frame["compressor"] == sel[1])
        if len(sel) > 2:
            m &= setup == sel[2]
        keep |= m
    return keep


def curve_frame(frame: pd.DataFrame, selection: Iterable[tuple[str, ...]] | None = None) -> pd.DataFrame:
    """Long frame of training curves: one row per (record, eval point) with ``entry, compressor,
    setup, seed, label, step, metric, metric_uncompressed, train_loss, wall_s``. ``selection``:
    (entry, compressor) pairs (any setup) or (entry, compressor, setup) triples to keep (None:
    all). ``label`` is ``entry / compressor``, plus ``/ setup`` when the kept curves come from
    more than one setup (so two setups of one compressor are two lines)."""
    cols = ["task", "tier", "entry", "compressor", "setup", "seed", "label", "step", "metric",
            "metric_uncompressed", "train_loss", "wall_s"]  # fmt: skip
    rows = []
    if not frame.empty:
        sub = frame[(frame["status"] == "ok") & frame["latest"]]
        sub = sub[_selected(sub, selection)]
        if "setup" not in sub:
            sub = sub.assign(setup="")
        several = sub["setup"].nunique() > 1
        for r in sub.itertuples(index=False):
            label = f"{r.entry} / {r.compressor}" + (f" / {r.setup}" if several else "")
            for p in r.curve:
                if not isinstance(p, dict):
                    continue
                rows.append(
                    dict(task=r.task, tier=r.tier, entry=r.entry, compressor=r.compressor, setup=r.setup,
                         seed=r.seed, label=label, step=_num(p.get("step")),
                         metric=_num(p.get("metric")), metric_uncompressed=_num(p.get("metric_uncompressed")),
                         train_loss=_num(p.get("train_loss")), wall_s=_num(p.get("wall_s")))
                )  # fmt: skip
    return pd.DataFrame(rows, columns=cols)


def entry_detail(
    frame: pd.DataFrame, task: str, tier: str, entry: str, compressor: str, setup: str | None = None
) -> dict[str, Any]:
    """Everything about one leaderboard row, JSON-able: entry info, setup, specs, provenance,
    config, the per-seed results, and ``warnings``: ``{"seed", "warning"}`` for every warning
    line of the latest records (the ones the ranking counts), for the detail view. ``setup``
    picks the row of that setup (None: the records of every setup; the top-level ``setup`` is
    then None when they differ, each seed names its own)."""
    g = frame[(frame["task"] == task) & (frame["tier"] == tier) & (frame["entry"] == entry)
              & (frame["compressor"] == compressor)]  # fmt: skip
    if "setup" not in g:
        g = g.assign(setup="")
    if setup is not None:
        g = g[g["setup"] == setup]
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
                "seed": r.seed, "setup": r.setup, "status": r.status, "error": r.error or None, "latest": bool(r.latest),
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
        "setup": setup if setup is not None else (g["setup"].iloc[0] if g["setup"].nunique() == 1 else None),
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
    any). A ``setup`` column (after compressor) appears only when the rows come from more than
    one run setup; with one setup it would say the same thing on every row."""
    rows = []
    several_setups = "setup" in ranked and ranked["setup"].nunique() > 1
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
            **({"setup": r["setup"] or "-"} if several_setups else {}),
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
