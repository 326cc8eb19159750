"""Views: what the page and the report show, built from frames (strings and small frames).

- :func:`display_table`: the human-readable ranking table.
- :func:`curve_frame`: training curves (quality per step) of chosen rows.
- :func:`time_to_quality_frame`: quality against modeled wall-clock at a chosen network.
- :func:`entry_detail` / :func:`entry_card`: one row's records, as JSON and as a readable card.

No Streamlit here (``leaderboard/app.py`` renders these; ``mpcbench report`` prints them).
"""

from __future__ import annotations

import json
import math
from typing import Any, Iterable

import pandas as pd

from leaderboard.frame import DIRECTIONS, _num
from leaderboard.names import display_name
from leaderboard.networks import Link, cumulative_times

PIPELINE_DIRECTIONS = ("forward", "backward", "dp")
TP_DIRECTIONS = tuple(d for d in DIRECTIONS if d not in PIPELINE_DIRECTIONS)

__all__ = [
    "curve_frame",
    "time_to_quality_frame",
    "entry_detail",
    "entry_card",
    "display_table",
    "machine_note",
    "measured_on",
    "row_label",
    "short_name",
    "compact_marks",
    "MARKS_LEGEND",
    "setup_title",
    "setups_by_size",
    "overview_table",
    "search_overview",
]


def _selected(frame: pd.DataFrame, selection: Iterable[tuple[str, ...]] | None) -> pd.Series:
    """Rows matching any (entry, compressor), (entry, compressor, setup) or (entry, compressor, setup,
    machine) tuple (None: all); the last is a whole row key (:mod:`suite.results.entries`)."""
    if selection is None:
        return pd.Series(True, index=frame.index)
    setup = frame["setup"] if "setup" in frame else pd.Series("", index=frame.index)
    machine = frame["machine"] if "machine" in frame else pd.Series("", index=frame.index)
    keep = pd.Series(False, index=frame.index)
    for sel in selection:
        m = (frame["entry"] == sel[0]) & (frame["compressor"] == sel[1])
        if len(sel) > 2:
            m &= setup == sel[2]
        if len(sel) > 3:
            m &= machine == sel[3]
        keep |= m
    return keep


def _machines(sub: pd.DataFrame) -> tuple[pd.DataFrame, bool]:
    """``sub`` with a ``machine`` column, and whether its rows span several machine classes (then a
    label names the class: two classes of one setup are two rows, never one line)."""
    if "machine" not in sub:
        sub = sub.assign(machine="")
    return sub, sub["machine"].nunique() > 1


def curve_frame(frame: pd.DataFrame, selection: Iterable[tuple[str, ...]] | None = None) -> pd.DataFrame:
    """Long frame of training curves: one row per (record, eval point) with ``entry, compressor,
    setup, seed, label, step, metric, metric_uncompressed, train_loss, wall_s``. ``selection``:
    (entry, compressor) pairs (any setup), (entry, compressor, setup) triples or whole row keys
    (+ machine) to keep (None: all). ``label`` is ``entry / compressor``, plus ``/ setup`` (``/
    machine``) when the kept curves come from more than one setup (machine class), so two setups
    of one compressor are two lines."""
    cols = [
        "task",
        "tier",
        "entry",
        "compressor",
        "setup",
        "seed",
        "label",
        "step",
        "metric",
        "metric_uncompressed",
        "train_loss",
        "wall_s",
    ]
    rows = []
    if not frame.empty:
        sub = frame[(frame["status"] == "ok") & frame["latest"]]
        sub = sub[_selected(sub, selection)]
        if "setup" not in sub:
            sub = sub.assign(setup="")
        sub, machines = _machines(sub)
        several = sub["setup"].nunique() > 1
        entries = sub["entry"].nunique() > 1
        for r in sub.itertuples(index=False):
            label = row_label(
                r.entry,
                short_name(r),
                r.setup,
                r.machine,
                with_setup=several,
                with_machine=machines,
                with_entry=entries,
            )
            for p in r.curve:
                if not isinstance(p, dict):
                    continue
                rows.append(
                    dict(
                        task=r.task,
                        tier=r.tier,
                        entry=r.entry,
                        compressor=r.compressor,
                        setup=r.setup,
                        seed=r.seed,
                        label=label,
                        step=_num(p.get("step")),
                        metric=_num(p.get("metric")),
                        metric_uncompressed=_num(p.get("metric_uncompressed")),
                        train_loss=_num(p.get("train_loss")),
                        wall_s=_num(p.get("wall_s")),
                    )
                )
    return pd.DataFrame(rows, columns=cols)


def entry_detail(
    frame: pd.DataFrame,
    task: str,
    tier: str,
    entry: str,
    compressor: str,
    setup: str | None = None,
    machine: str | None = None,
) -> dict[str, Any]:
    """Everything about one leaderboard row, JSON-able: entry info, setup, specs, provenance,
    config, the per-seed results, and ``warnings``: ``{"seed", "warning"}`` for every warning
    line of the latest records (the ones the ranking counts), for the detail view. ``setup``
    picks the row of that setup (None: the records of every setup; the top-level ``setup`` is
    then None when they differ, each seed names its own); ``machine`` the row of that machine
    class (the class its records were made on, the row key's)."""
    g = frame[
        (frame["task"] == task)
        & (frame["tier"] == tier)
        & (frame["entry"] == entry)
        & (frame["compressor"] == compressor)
    ]
    if "setup" not in g:
        g = g.assign(setup="")
    if setup is not None:
        g = g[g["setup"] == setup]
    if machine is not None and "machine" in g:
        g = g[g["machine"] == machine]
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
                "seed": r.seed,
                "setup": r.setup,
                "status": r.status,
                "error": r.error or None,
                "latest": bool(r.latest),
                "final_metric": None if math.isnan(r.final_metric) else r.final_metric,
                "ratio_total": None if math.isnan(r.ratio_total) else round(r.ratio_total, 4),
                "step_s": None if math.isnan(r.step_s) else r.step_s,
                "warnings": list(r.warnings),
                "record_id": r.record_id,
                "created": r.created,
            }
        )
    return {
        "entry": entry,
        "entry_info": _info(last.get("entry_info")) or {"name": last["entry_name"]},
        "submitter": last["submitter"],
        "task": task,
        "tier": tier,
        "compressor": compressor,
        "setup": setup if setup is not None else (g["setup"].iloc[0] if g["setup"].nunique() == 1 else None),
        # tensor-parallel directions only where the run had them (older and pipeline-only records lack them)
        "specs": {d: last[f"spec_{d}"] for d in DIRECTIONS if d in PIPELINE_DIRECTIONS or last[f"spec_{d}"]},
        "plugin_hash": last["plugin_hash"],
        "machine": last.get("machine", ""),
        "verified_on": last.get("verified_on", "") or "",
        "load_1m": None if math.isnan(_num(last.get("load_1m"))) else float(last["load_1m"]),
        "cpu_count": None if math.isnan(_num(last.get("cpu_count"))) else float(last["cpu_count"]),
        "provenance": last.get("provenance", {}),
        "config": last.get("config", {}),
        "seeds": seeds,
        "warnings": warned,
    }


def _info(v: Any) -> dict[str, Any]:
    """An ``entry_info`` column value: a dict (from records) or a JSON string (from the index)."""
    if isinstance(v, dict):
        return v
    try:
        d = json.loads(v) if isinstance(v, str) and v else {}
    except ValueError:
        return {}
    return d if isinstance(d, dict) else {}


def row_label(
    entry: str,
    compressor: str,
    setup: str = "",
    machine: str = "",
    *,
    with_setup: bool = False,
    with_machine: bool = False,
    with_entry: bool = True,
) -> str:
    """``entry / compressor`` (+ ``/ setup``, ``/ machine`` where rows differ only by those; the
    compressor alone when one entry is shown)."""
    head = f"{entry} / {compressor}" if with_entry else compressor
    return head + (f" / {setup}" if with_setup else "") + (f" / {machine}" if with_machine else "")


def setup_title(setup: str) -> str:
    """A run setup (:func:`suite.results.entries.setup_label`) as what it is, then its details:
    ``"pipeline, 4 stages (1f1b, M=4, cpu)"``, ``"tensor parallel tp=2, 2 stages (...)"``,
    ``"2 replicas, data parallel (...)"``, ``"single process (...)"`` (one stage, nothing split)."""
    parts = [p.strip() for p in str(setup).split(",") if p.strip()]
    if not parts:
        return ""
    stages = next((int(p.split()[0]) for p in parts if p.endswith(("stage", "stages")) and p.split()[0].isdigit()), 0)
    tp = next((p for p in parts if p.startswith("tp=")), "")
    dp = next((p.split("=", 1)[1] for p in parts if p.startswith(("dp=", "dp_size="))), "")
    split = f"{stages} stages" if stages > 1 else ""
    if tp:
        kind = ", ".join(filter(None, [f"tensor parallel {tp}", split]))
    elif dp:
        kind = ", ".join(filter(None, [f"{dp} replicas, data parallel", split]))
    elif stages > 1:
        kind = f"pipeline, {split}"
    else:
        kind = "single process" if stages == 1 else "pipeline"
    rest = [
        p for p in parts if not p.endswith(("stage", "stages")) and p != tp and not p.startswith(("dp=", "dp_size="))
    ]
    return kind + (f" ({', '.join(rest)})" if rest else "")


def setups_by_size(rows: pd.DataFrame) -> list[str]:
    """The setups of ``rows`` (one task and tier), the one with the most compressors first: the
    setup a reader of the task means (ties: pipelines first, then by name)."""
    if rows.empty or "setup" not in rows:
        return []
    counts = rows.groupby("setup")["compressor"].nunique()
    return sorted(counts.index, key=lambda s: (-int(counts[s]), not setup_title(s).startswith("pipeline"), s))


def short_name(row: Any) -> str:
    """A row's short display name (:mod:`leaderboard.names`): the recorded one with a plugin's declared
    label, else the typed spec with the built-ins' labels. ``row``: a mapping or a named tuple."""
    get = row.get if isinstance(row, dict) else lambda k, d="": getattr(row, k, d)
    return str(get("display", "") or "") or display_name(str(get("compressor", "")))


def machine_note(machine: str, load_1m: float, cpu_count: float) -> str:
    """The machine and how loaded it was, next to every measured time: ``"Xeon ..., 2 cores;
    load 3.1"`` (load average over the last minute when the record was written: runnable
    processes; above the core count the times are inflated). ``"load ?"`` when not recorded."""
    load = _num(load_1m)
    text = machine or "machine ?"
    if math.isnan(load):
        return f"{text}; load ?"
    cores = _num(cpu_count)
    busy = f" ({load / cores:.0%} of {int(cores)} cores)" if cores and not math.isnan(cores) else ""
    return f"{text}; load {load:.2g}{busy}"


def measured_on(r: dict[str, Any]) -> str:
    """Where a row's shown times were measured, with the load (:func:`machine_note`): a verified row's
    re-run machine (``verified_on``), named as such when it is not the class the row was recorded
    on (the row's ``machine``, its key); else the row's own machine."""
    machine, rerun = str(r.get("machine") or ""), str(r.get("verified_on") or "")
    note = machine_note(rerun or machine, r.get("load_1m", math.nan), r.get("cpu_count", math.nan))
    if rerun and rerun != machine:
        note += f" (verification re-run; recorded on {machine or 'machine ?'})"
    return note


def time_to_quality_frame(
    frame: pd.DataFrame,
    link: Link,
    selection: Iterable[tuple[str, ...]] | None = None,
    *,
    quality: str = "compressed",
    per_seed: bool = False,
) -> pd.DataFrame:
    """Quality against modeled wall-clock at ``link``, one line per row (entry, compressor,
    setup): for each curve point, the seconds the run's stored timing inputs take to reach
    that step on ``link`` (:func:`leaderboard.networks.cumulative_times`), averaged over the
    seeds at that step, with the quality (``metric`` or ``metric_uncompressed`` per
    ``quality``) averaged likewise. Columns: ``label, entry, compressor, setup, machine, step,
    time_s, metric, seeds, source`` (``"modeled"``; a run over an emulated or real link, ``mpcbench
    run --link``, adds its measured curve: the curve points' ``wall_s``, training wall-clock up to
    that step, with ``source = "emulated <link>"`` / ``"measured real network"``). ``per_seed``:
    one line per seed instead (column ``seed`` in place of ``seeds``), for the plot's seed curves."""
    cols = ["label", "entry", "compressor", "setup", "machine", "step", "time_s", "metric", "seeds", "source"]
    if frame.empty:
        return pd.DataFrame(columns=cols)
    sub = frame[(frame["status"] == "ok") & frame["latest"]]
    sub = sub[_selected(sub, selection)]
    if "setup" not in sub:
        sub = sub.assign(setup="")
    sub, machines = _machines(sub)
    several = sub["setup"].nunique() > 1
    entries = sub["entry"].nunique() > 1
    key = "metric" if quality == "compressed" else "metric_uncompressed"
    points = []
    for r in sub.itertuples(index=False):
        name = short_name(r)
        label = row_label(
            r.entry, name, r.setup, r.machine, with_setup=several, with_machine=machines, with_entry=entries
        )
        curve = [p for p in r.curve if isinstance(p, dict)]
        steps = [_num(p.get("step")) for p in curve]
        times = cumulative_times(getattr(r, "timing_inputs", ""), link, steps)
        for p, k, t in zip(curve, steps, times):
            points.append((label, r.entry, name, r.setup, r.machine, k, t, _num(p.get(key)), r.seed, "modeled"))
        ran_over = getattr(r, "link", "") or ""
        if ran_over:  # a run over a real or emulated link: its curve's wall-clock is the measured time
            kind = "measured" if ran_over == "real network" else "emulated"
            for p, k in zip(curve, steps):
                points.append(
                    (
                        label,
                        r.entry,
                        name,
                        r.setup,
                        r.machine,
                        k,
                        _num(p.get("wall_s")),
                        _num(p.get(key)),
                        r.seed,
                        f"{kind} {ran_over}",
                    )
                )
    long = pd.DataFrame(points, columns=cols[:-2] + ["seed", "source"])
    long = long.dropna(subset=["time_s", "metric"])
    if per_seed:
        return long.sort_values(["label", "source", "seed", "step"], kind="stable").reset_index(drop=True)
    if long.empty:
        return pd.DataFrame(columns=cols)
    out = long.groupby(["label", "entry", "compressor", "setup", "machine", "source", "step"], sort=True).agg(
        time_s=("time_s", "mean"), metric=("metric", "mean"), seeds=("seed", "nunique")
    )
    return out.reset_index()[cols]


def entry_card(detail: dict[str, Any]) -> list[tuple[str, str]]:
    """A readable card of :func:`entry_detail`: (field, text) pairs for who, what, setup,
    machine and load, code version, plugin source, per-seed results. Plain text only: every
    value comes from a record or entry.yaml, so the page shows it as text, never markup."""
    if not detail:
        return []
    info = detail.get("entry_info") or {}
    prov = detail.get("provenance") or {}
    seeds = detail.get("seeds") or []
    ok = [s for s in seeds if s.get("status") == "ok" and s.get("latest")]
    plugin = str(info.get("plugin") or "")
    src = f"records/{detail['entry']}/{plugin}" if plugin.endswith(".py") else (plugin or "built-in compressors")
    commit = str(prov.get("git_commit") or "?")[:12] + (" (modified checkout)" if prov.get("git_dirty") else "")
    results = "; ".join(
        f"seed {s['seed']}: {s['final_metric']:.4g}"
        if s.get("final_metric") is not None
        else f"seed {s['seed']}: {s['status']}"
        for s in seeds
        if s.get("latest")
    )
    rows = [
        ("entry", f"{info.get('name') or detail['entry']} ({detail['entry']})"),
        ("submitted by", f"{detail.get('submitter') or '?'}" + (f" on {info['date']}" if info.get("date") else "")),
        ("description", str(info.get("description") or "-")),
        (
            "compressor",
            f"{detail['compressor']}  (forward: {detail['specs'].get('forward') or '-'}, "
            f"backward: {detail['specs'].get('backward') or '-'}, dp: {detail['specs'].get('dp') or '-'})",
        ),
        ("task / tier", f"{detail['task']} / {detail['tier']}"),
        ("setup", str(detail.get("setup") or "-")),
        (
            "machine and load",
            measured_on(
                {
                    "machine": detail.get("machine") or "",
                    "verified_on": detail.get("verified_on") or "",
                    "load_1m": detail.get("load_1m") or math.nan,
                    "cpu_count": detail.get("cpu_count") or (prov.get("machine") or {}).get("cpu_affinity") or math.nan,
                }
            ),
        ),
        ("code version", f"{commit}, mpcbench {prov.get('mpcbench_version') or '?'}"),
        ("plugin source", f"{src}" + (f" (hash {detail['plugin_hash']})" if detail.get("plugin_hash") else "")),
        ("results", f"{len(ok)} ok seed(s): {results or '-'}"),
    ]
    return [(k, " ".join(v.split())[:2000]) for k, v in rows]


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


def _time_cells(r: dict[str, Any], network: str) -> dict[str, str]:
    """A row's time-to-target at ``network``: mean ± sd over the seeds that reached the target
    (how many of how many), the difference from the baseline with its test (paired by seed or
    Welch, and whether it is resolved at p < 0.05), and every seed's time."""
    n = int(r["n"])
    t, reached = _num(r.get(f"time_to_target_s@{network}")), _num(r.get(f"reached@{network}", 0.0))
    k = int(round(reached * n)) if n and reached == reached else 0
    sd = _num(r.get(f"time_sd@{network}", math.nan))
    if n == 0:
        text = "-"
    elif math.isnan(t):
        text = f"not reached (0/{n})"
    else:
        text = (f"{t:.1f} ± {sd:.1f} s" if not math.isnan(sd) else f"{t:.1f} s") + f" ({k}/{n})"
        if not bool(r.get("time_calibrated", True)):
            text += " †"  # priced partly on the cell's own measured seconds: no calibration for this row
    test = str(r.get(f"time_test@{network}") or "")
    delta, p = _num(r.get(f"time_delta@{network}", math.nan)), _num(r.get(f"time_p@{network}", math.nan))
    if test in ("baseline", "not reached", ""):
        dtext = test or "no baseline"
    elif math.isnan(p):
        dtext = f"{delta:+.1f} s, {test}"
    else:
        resolved = r.get(f"time_resolved@{network}")
        dtext = f"{delta:+.1f} s, {test} p={p:.2g}" + ("" if resolved is True else ", not resolved")
    times = r.get(f"times@{network}") or {}
    per_seed = " / ".join("-" if math.isinf(v) else f"{v:.1f}" for _, v in sorted(times.items()))
    return {f"time-to-target @ {network}": text, "Δ time vs none": dtext, "time per seed": per_seed or "-"}


# the significance words of the Δ columns, shortened where space is short (the page's grid at 1400 px; a
# report past 120 columns), with the legend said once next to the table
_SHORT_MARKS = (
    ("n too small", "n<2"),
    (", not resolved", " ~"),
    ("paired by seed", "paired"),
    (" (vs maintainers', other machine)", " (m*)"),
    (" (vs maintainers')", " (m)"),
)
MARKS_LEGEND = (
    "Δ: * p<0.05, ** p<0.01, *** p<0.001; n<2 = fewer than 2 seeds on a side (no test); ~ = not resolved (within the "
    "minimal detectable difference, or p >= 0.05 for times); paired = paired t-test by seed; (m) = against the "
    "maintainers' baseline, (m*) = theirs on another machine"
)


def compact_marks(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` (:func:`display_table`) with its Δ columns' words shortened (:data:`MARKS_LEGEND` says them)."""
    out = table.copy()
    for col in ("Δ vs none", "Δ time vs none"):
        if col in out:
            for long, short in _SHORT_MARKS:
                out[col] = out[col].str.replace(long, short, regex=False)
    return out


VERIFICATION_LABELS = {"verified": "✓ verified", "failed": "✗ failed verification", "not verified": "not verified"}


def display_table(
    ranked: pd.DataFrame,
    *,
    network: str | None = None,
    direction: str = "total",
    quality: str = "compressed",
) -> pd.DataFrame:
    """Human-readable ranking table (strings) from :meth:`leaderboard.rules.Rule.rank` output:
    rank (the rule's ``rank_label``, with its "not resolved" marks, e.g. ``"4 (≈3)"``), entry, compressor with its parameters where the
    records spell them out, quality ``mean ± std (n)`` (the metric the task reports, headed
    with its name; ``"(no compression at eval)"`` when ``quality="uncompressed"``), delta
    against the baseline with its significance marker (``"not resolved"`` below the MDD,
    ``"vs maintainers'"`` when the entry has no baseline of its own), compression ratio per
    direction (``-``: nothing sent that way) and for ``direction``, wire bytes per step,
    measured step and train time with the machine and its load next to them, modeled
    time-to-target at ``network`` with how many seeds reached the target, the number of
    failed seeds and ``warnings`` (``⚠ N``; each column left out when no row has any).
    ``setup`` / ``machine`` columns (after compressor) appear only when the rows come from
    more than one run setup / machine class."""
    rows = []
    several_setups = "setup" in ranked and ranked["setup"].nunique() > 1
    several_machines = "machine" in ranked and ranked["machine"].nunique() > 1
    names = [n for n in ranked.get("metric_name", pd.Series(dtype=str)) if n]
    metric_header = (names[0] if names else "quality") + (
        " (no compression at eval)" if quality == "uncompressed" else ""
    )
    qcol = "metric_mean" if quality == "compressed" else "metric_uncompressed_mean"
    for r in ranked.to_dict("records"):
        std = r.get("metric_std") if quality == "compressed" else math.nan
        q = _num(r.get(qcol, math.nan))
        quality_text = (
            "-"
            if r["n"] == 0 or math.isnan(q)
            else (f"{q:.4f} ± {std:.4f} (n={r['n']})" if not math.isnan(std) else f"{q:.4f} (n={r['n']})")
        )
        if r["significance"] in ("baseline", "no baseline", "no results"):
            delta = r["significance"]
        else:
            delta = f"{r['delta']:+.4f} {r['significance']}"
            if r.get("resolved") is False:
                delta += ", not resolved"
        if r.get("baseline_kind") == "maintainers":
            delta += (
                " (vs maintainers'" + ("" if r.get("baseline_same_machine") is not False else ", other machine") + ")"
            )
        rank_text = r.get("rank_label") or ("-" if pd.isna(r["rank"]) else str(int(r["rank"])))
        row = {
            "rank": rank_text,
            "entry": r["entry"],
            "compressor": r.get("display") or display_name(r["compressor"]),
            **({"setup": r["setup"] or "-"} if several_setups else {}),
            **({"machine": r["machine"] or "-"} if several_machines else {}),
            metric_header: quality_text,
            "Δ vs none": delta,
        }
        if direction == "total":
            row["ratio fwd / bwd / dp"] = " / ".join(
                _fmt(r.get(f"ratio_{d}", math.nan), ".3g") for d in PIPELINE_DIRECTIONS
            )
            tp = [r.get(f"ratio_{d}", math.nan) for d in TP_DIRECTIONS]
            if any(not math.isnan(_num(v)) for v in tp):
                row["ratio tp fwd / bwd"] = " / ".join(_fmt(v, ".3g") for v in tp)
        row[f"ratio {direction}"] = _fmt(r.get(f"ratio_{direction}", math.nan), ".3g", "x")
        row[f"bytes/step {direction}"] = _fmt_bytes(r.get(f"bytes_per_step_{direction}", math.nan))
        # the cell's own measured seconds (its machine and load): provenance, never what ranks (time_model)
        row["cell step (raw)"] = _fmt(r.get("step_s", math.nan), ".3g", " s")
        row["cell train (raw)"] = _fmt(r.get("total_train_s", math.nan), ".3g", " s")
        row["measured on (load)"] = measured_on(r)
        if network and f"time_to_target_s@{network}" in r:
            row.update(_time_cells(r, network))
        if r.get("n_failed"):
            row["failed"] = str(r["n_failed"])
        else:
            row["failed"] = ""
        n_warn = r.get("n_warnings")
        n_warn = int(n_warn) if isinstance(n_warn, (int, float)) and not math.isnan(n_warn) else 0
        row["warnings"] = f"⚠ {n_warn}" if n_warn else ""
        # `mpcbench verify` re-ran this row (records/<entry>/verification.json): the mark says which cells
        mark = VERIFICATION_LABELS.get(r.get("verification") or "", "")
        cells = str(r.get("verified_cells") or "")
        row["verified"] = f"{mark} ({cells})" if mark and cells and r.get("verification") != "not verified" else mark
        row["spec"] = r.get("compressor_label") or r["compressor"]  # every parameter spelled out
        rows.append(row)
    table = pd.DataFrame(rows)
    # the answer first (at 1400 px the grid must not hide "which one, how good, how fast on my link"):
    # rank, name, quality, its delta, time-to-target and its delta, the ratio; then who, where, the rest
    answer = [
        "rank",
        "compressor",
        metric_header,
        "Δ vs none",
        f"time-to-target @ {network}",
        "Δ time vs none",
        f"ratio {direction}",
    ]
    first = [c for c in answer if c in table]
    table = table[first + [c for c in table.columns if c not in first]]
    if "verified" in table and not table["verified"].astype(bool).any():
        table = table.drop(columns="verified")  # no row came from a records/ entry
    for col in ("failed", "warnings"):
        if col in table and not table[col].astype(bool).any():
            table = table.drop(columns=col)  # nothing to flag here: no empty column
    return table


def _delta_cell(r: dict[str, Any]) -> str:
    """A row's quality difference to none with its marks, short (:data:`MARKS_LEGEND`)."""
    if r["significance"] in ("baseline", "no baseline", "no results"):
        return r["significance"]
    text = f"{r['delta']:+.4f} {r['significance']}".strip() + (", not resolved" if r.get("resolved") is False else "")
    text += f" (n={int(r['n'])})"
    for long, short in _SHORT_MARKS:
        text = text.replace(long, short)
    return text


def overview_table(agg: pd.DataFrame, score: pd.DataFrame | None = None) -> pd.DataFrame:
    """One line per (entry, compressor) of one tier's aggregate (:func:`leaderboard.statistics.aggregate`):
    its Δ vs none on each task, in the task's setup with the most compressors (:func:`setups_by_size`),
    then its benchmark score (``score``: :class:`leaderboard.score.ScoreResult`'s table; ``-`` where a
    row is not scored). Ordered by score, then name."""
    cells: dict[tuple[str, str], dict[str, str]] = {}
    names: dict[tuple[str, str], str] = {}
    tasks = sorted(agg["task"].unique()) if len(agg) else []
    for task in tasks:
        rows = agg[agg["task"] == task]
        setups = setups_by_size(rows)
        rows = rows[rows["setup"] == setups[0]] if setups else rows
        metric = next((m for m in rows["metric_name"] if m), "quality")
        for r in rows.to_dict("records"):
            key = (r["entry"], r["compressor"])
            names.setdefault(key, short_name(r))
            cells.setdefault(key, {})[f"{task} Δ {metric}"] = _delta_cell(r)
    scores: dict[tuple[str, str], tuple[float, str]] = {}
    if score is not None and len(score):
        for r in score.to_dict("records"):
            ranked = bool(r.get("ranked", True))
            scores[(r["entry"], r["compressor"])] = (
                float(r["score"]) if ranked else -1.0,
                f"{r['score']:.3f}" + ("" if ranked else f" ({int(r.get('seeds', 0))} seeds)"),
            )
    columns = [f"{t} Δ {next((m for m in agg.loc[agg['task'] == t, 'metric_name'] if m), 'quality')}" for t in tasks]
    out = []
    for key, row in cells.items():
        value, text = scores.get(key, (math.nan, "-"))
        out.append(
            {
                "compressor": names[key],
                "entry": key[0],
                **{c: row.get(c, "") for c in columns},
                "score": text,
                "_s": value,
            }
        )
    table = pd.DataFrame(out, columns=["compressor", "entry", *columns, "score", "_s"])
    table = table.sort_values(["_s", "compressor", "entry"], ascending=[False, True, True], na_position="last")
    return table.drop(columns="_s").reset_index(drop=True)


def search_overview(table: pd.DataFrame, text: str) -> pd.DataFrame:
    """The lines of :func:`overview_table` whose compressor or entry contains ``text`` (any case; all when blank)."""
    needle = text.strip().lower()
    if not needle:
        return table
    hit = lambda col: table[col].str.lower().str.contains(needle, regex=False)  # noqa: E731
    return table[hit("compressor") | hit("entry")]
