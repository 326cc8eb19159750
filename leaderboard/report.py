"""The text report (``mpcbench report``): the leaderboard's views as terminal, markdown or CSV text.

    opts = ReportOptions(rule="time_to_target", network="100Mbps")
    write_report(frame, opts, sys.stdout)       # frame: leaderboard.index's rows

Every number comes from the same functions the page calls (:func:`leaderboard.statistics.aggregate`,
:meth:`leaderboard.rules.Rule.rank`, :func:`leaderboard.views.display_table`); the rule says
which question it answers and how it marks ranks. Record text is untrusted: it reaches the
terminal through :func:`leaderboard.safe_text.plain` and markdown through ``markdown_cell``.
A bad option (unknown rule or network) raises ``ValueError`` naming the valid ones.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import pandas as pd

from leaderboard.crossover import crossover_text, crossovers, time_to_target_by_bandwidth
from leaderboard.frame import view_target
from leaderboard.networks import network_profiles
from leaderboard.rules import DEFAULT_RULE, RULES
from leaderboard.safe_text import markdown_cell, plain, table_text
from leaderboard.statistics import MEASURED_SPREAD, aggregate, minimal_detectable_difference
from leaderboard.views import display_table, setup_title, setups_by_size
from suite.results.task_catalog import describe as describe_task

__all__ = [
    "REPORT_WIDTH",
    "FORMATS",
    "ReportOptions",
    "write_report",
    "write_claims",
    "write_score",
    "write_summary",
    "score_table",
    "default_network",
    "linked_records",
]

REPORT_WIDTH = 120  # the default text report fits this many columns
FORMATS = ("text", "markdown", "csv")


@dataclass(frozen=True)
class ReportOptions:
    """What ``mpcbench report`` shows: the rule, its controls, and the output format."""

    rule: str = DEFAULT_RULE
    network: str | None = None  # None: 1Gbps if present, else the middle profile
    direction: str = "total"
    min_ratio: float | None = None
    format: str = "text"
    wide: bool = False  # every column (text: else at most REPORT_WIDTH characters)


def default_network(frame: pd.DataFrame) -> str | None:
    """The report's network when none is asked for: 1Gbps if modeled, else the middle profile."""
    profiles = network_profiles(frame)
    if not profiles:
        return None
    return "1Gbps" if "1Gbps" in profiles else profiles[len(profiles) // 2]


def markdown(df: pd.DataFrame) -> str:
    """A markdown table whose cells are inert text (record text may hold markup, HTML or newlines)."""
    return table_text(df, "markdown")


def _width(table: pd.DataFrame) -> int:
    text = table.to_string(index=False)
    return max((len(line) for line in text.splitlines()), default=0)


def narrow(table: pd.DataFrame, direction: str) -> tuple[pd.DataFrame, list[str]]:
    """The default text table: the columns that answer the question, within REPORT_WIDTH characters.

    Entry, machine and load become notes above the table when one value holds for every row;
    then the least needed columns go first until the table fits. Returns (table, notes)."""
    notes = []
    keep = table.copy()
    for col, label in (("entry", "entry"), ("measured on (load)", "measured on")):
        if col in keep and keep[col].nunique() <= 1:
            notes.append(f"{label}: {keep[col].iloc[0] if len(keep) else '-'}")
            keep = keep.drop(columns=col)
    optional = [
        "spec",
        "measured on (load)",
        "cell step (raw)",
        "cell train (raw)",
        "ratio tp fwd / bwd",
        "ratio fwd / bwd / dp",
        "verified",
        f"bytes/step {direction}",
        "time per seed",
        "entry",
        "machine",
        f"ratio {direction}",
    ]
    for col in optional:
        if _width(keep) <= REPORT_WIDTH:
            break
        if col in keep:
            keep = keep.drop(columns=col)
            if col == "machine":
                notes.append("machine: the rows ran on different machines (--wide shows which)")
    if _width(keep) > REPORT_WIDTH and "Δ vs none" in keep:  # whose baseline: a mark and a note, not words per row
        marked = keep["Δ vs none"].str.replace(" (vs maintainers', other machine)", " (m*)", regex=False)
        keep["Δ vs none"] = marked.str.replace(" (vs maintainers')", " (m)", regex=False)
        if (keep["Δ vs none"] != marked).any() or marked.str.contains("(m*)", regex=False).any():
            notes.append(
                "(m) = vs the maintainers' baseline (the entry has none of its own); (m*) = on another machine"
            )
    if _width(keep) > REPORT_WIDTH and "rank" in keep:
        keep["rank"] = keep["rank"].str.replace(r"\((\d+) of (\d+) seeds\)", r"(\1/\2 seeds)", regex=True)
    if _width(keep) > REPORT_WIDTH and "compressor" in keep:  # the full spec is --wide's spec column
        long = keep["compressor"].str.len() > 28
        keep.loc[long, "compressor"] = keep.loc[long, "compressor"].str[:27] + "…"
    if _width(keep) > REPORT_WIDTH and "Δ time vs none" in keep:  # the last resort: time-to-target itself stays
        keep = keep.drop(columns="Δ time vs none")
        notes.append("Δ time vs none: left out to fit (--wide shows it)")
    if _width(keep) > REPORT_WIDTH and "Δ vs none" in keep:  # the longest text: shorten the significance words
        keep["Δ vs none"] = keep["Δ vs none"].str.replace("n too small", "n<2").str.replace(", not resolved", " ~")
        notes.append("Δ vs none: n<2 = fewer than 2 seeds (no test); ~ = within the minimal detectable difference")
    if _width(keep) > REPORT_WIDTH and "Δ time vs none" in keep:
        short = keep["Δ time vs none"].str.replace("paired by seed", "paired").str.replace("n too small", "n<2")
        keep["Δ time vs none"] = short.str.replace(", not resolved", " ~")
        notes.append("Δ time vs none: paired = paired t-test by seed, Welch = unpaired; ~ = not resolved (p >= 0.05)")
    if any(c.startswith("time-to-target @") and keep[c].astype(str).str.endswith("†").any() for c in keep):
        notes.append(
            "† = no calibration of this row: its codec (or compute) is priced on its cell's own measured seconds"
        )
    return keep, notes


def terminal(df: pd.DataFrame) -> pd.DataFrame:
    """The table with every text cell and header passed through ``plain`` (no escape sequences reach the terminal)."""
    return df.astype(str).map(plain).rename(columns=plain)


def mdd_line(task: str, tier: str, g: pd.DataFrame) -> str:
    """The minimal detectable difference of a task and tier: per row from the row's and its
    baseline's seeds, and for 3 vs 3 seeds at the task's measured seed std."""
    parts = []
    rows = g["mdd"].dropna() if "mdd" in g else []
    if len(rows):
        lo, hi = float(rows.min()), float(rows.max())
        parts.append(f"{lo:.3g}" + (f"-{hi:.3g}" if hi > lo else "") + " for these rows")
    known = MEASURED_SPREAD.get((task, tier))
    if known is not None:
        mdd3 = minimal_detectable_difference(known.seed_std, 3, 3)
        parts.append(f"{mdd3:.3g} for 3 vs 3 seeds at the measured seed std {known.seed_std:.3g}")
    if not parts:
        return "minimal detectable difference: unknown (fewer than 2 seeds and no measured spread for this tier)"
    return (
        "minimal detectable difference (two-sided t-test, alpha 0.05, power 0.5): "
        + "; ".join(parts)
        + "; smaller differences are not resolved"
    )


def linked_records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """Full records (from their source files) of the index rows that ran over a real or emulated link."""
    from leaderboard.index import _scan  # noqa: PLC2701 - the index's own validated reader

    if "measured_link_step_s" not in frame or "source" not in frame:
        return []
    linked = frame[frame["measured_link_step_s"].notna()]
    out: list[dict[str, Any]] = []
    for source, g in linked.groupby("source", sort=False):
        p = Path(source)
        files = sorted(f for f in p.iterdir() if f.suffix == ".jsonl") if p.is_dir() else [p]
        out += list(_scan(files, set(g["record_id"])).values())
    return out


def _latency(network: str | None) -> float:
    """The one-way latency of a named profile (the crossover sweep keeps it while the bandwidth varies)."""
    from suite.results.network import PROFILES

    profile = PROFILES.get(network or "1Gbps") or PROFILES["1Gbps"]
    return float(profile.latency_s)


def rank_by_setup(rule: Any, agg: pd.DataFrame, **kw: Any) -> pd.DataFrame:
    """``rule.rank`` within each setup (pipeline, tensor-parallel, data-parallel): a tp=2 row competes with the
    tp=2 rows and its own none, never with another layout's (the page's setup selector shows one at a time)."""
    if "setup" not in agg or agg["setup"].nunique() <= 1:
        return rule.rank(agg, **kw)
    parts = [rule.rank(g, **kw) for _, g in agg.groupby("setup", sort=True)]
    return pd.concat(parts, ignore_index=True)


def write_report(
    frame: pd.DataFrame,
    opts: ReportOptions,
    out: TextIO,
    *,
    links_text: str = "",
    timed: pd.DataFrame | None = None,
) -> None:
    """Write the ranked tables of every (task, tier, setup) in ``frame`` to ``out`` (see the module
    docstring); ``links_text``: the measured-over-links table to print after them. ``timed``: the same
    rows with their ``timing_inputs`` (``Index.heavy``): each table is followed by the bandwidth below which
    each compressor reaches the target before none (:mod:`leaderboard.crossover`)."""
    if opts.rule not in RULES:
        raise ValueError(f"unknown ranking rule {opts.rule!r}; valid rules: {', '.join(RULES)}")
    if opts.format not in FORMATS:
        raise ValueError(f"unknown format {opts.format!r}; valid: {', '.join(FORMATS)}")
    rule = RULES[opts.rule]
    profiles = network_profiles(frame)
    if opts.network and opts.network not in profiles:
        raise ValueError(
            f"unknown network profile {opts.network!r}; valid: {', '.join(profiles) or '(none in these records)'}"
        )
    network = opts.network or default_network(frame)
    agg = aggregate(frame)
    ranked = rank_by_setup(rule, agg, min_ratio=opts.min_ratio, network=network, direction=opts.direction)
    if opts.format == "csv":
        lists = [c for c in ranked.columns if ranked[c].map(lambda v: isinstance(v, (list, dict))).any()]
        ranked.drop(columns=lists).to_csv(out, index=False)
        return

    def say(text: str = "") -> None:
        out.write(text + "\n")

    say(
        f"ranking: {rule.title}"
        + (f" (network {network})" if network else "")
        + ("" if opts.wide or opts.format != "text" else f"; at most {REPORT_WIDTH} columns (--wide: every column)")
    )
    targets = {key: view_target(g) for key, g in frame.groupby(["task", "tier"])}
    setups = ranked.groupby(["task", "tier"])["setup"].nunique() if "setup" in ranked else pd.Series(dtype=int)
    by = ["task", "tier", "setup"] if "setup" in ranked else ["task", "tier"]
    # per task and tier, its setups in the page's order: the one with the most compressors first
    order = {
        (t, r, s): i
        for (t, r), g in ranked.groupby(["task", "tier"], sort=False)
        for i, s in enumerate(setups_by_size(g) if "setup" in g else [""])
    }
    groups = sorted(ranked.groupby(by, sort=True), key=lambda kg: (kg[0][0], kg[0][1], order.get(tuple(kg[0]), 0)))
    described: set[str] = set()
    with pd.option_context("display.max_columns", None, "display.width", 250, "display.max_colwidth", 60):
        for key, g in groups:
            task, tier = key[0], key[1]
            # one table per setup (pipeline, tensor-parallel, data-parallel): its own none row, no setup column
            setup = setup_title(str(key[2])) if len(key) > 2 and setups.get((task, tier), 1) > 1 else ""
            table = display_table(g, network=network, direction=opts.direction)
            table = table.drop(columns="setup") if "setup" in table else table
            n_seeds = sorted({int(n) for n in g["n"]})
            metric = g["metric_name"].iloc[0] or "quality"
            higher = bool(g["higher_is_better"].iloc[0]) if "higher_is_better" in g else True
            say()
            # record text (the metric name, the task) in a line of its own: escaped for the format it is written in
            inert = markdown_cell if opts.format == "markdown" else plain
            where = f"{task} / {tier}" + (f" / {setup}" if setup else "")
            say(inert(f"== {where}  (metric: {metric}; seeds per entry: {', '.join(map(str, n_seeds))}) =="))
            desc = describe_task(str(task))  # the task module's DESCRIPTION: what it is, chance, CPU caveat
            if desc is not None and task not in described:  # once per task, not once per setup and tier
                described.add(str(task))
                text = inert(desc.page_text())
                say(text if opts.wide else "\n".join(textwrap.wrap(text, REPORT_WIDTH, subsequent_indent="  ")))
            question = rule.question(
                metric,
                higher_is_better=higher,
                target=targets.get((task, tier)),
                network=network,
                min_ratio=opts.min_ratio,
            )
            question = inert(question)
            say(question if opts.wide else "\n".join(textwrap.wrap(question, REPORT_WIDTH, subsequent_indent="  ")))
            mdd = inert(mdd_line(task, tier, g))
            say(mdd if opts.wide else "\n".join(textwrap.wrap(mdd, REPORT_WIDTH, subsequent_indent="  ")))
            if opts.format == "text":
                table = terminal(table)  # record text: no control characters reach the terminal
            if not opts.wide and opts.format == "text":
                table, notes = narrow(table, opts.direction)
                for note in notes:
                    say(plain(note))
            say(markdown(table) if opts.format == "markdown" else table.to_string(index=False))
            if timed is not None and len(timed):
                sub = timed[(timed["task"] == task) & (timed["tier"] == tier)]
                if len(key) > 2:
                    sub = sub[sub["setup"] == key[2]]
                latency = _latency(network)
                for line in crossover_text(crossovers(time_to_target_by_bandwidth(sub, latency)), latency):
                    say(
                        inert(line)
                        if opts.wide
                        else "\n".join(textwrap.wrap(inert(line), REPORT_WIDTH, subsequent_indent="    "))
                    )
    if links_text:  # runs over real or emulated links
        say("\nmeasured over links next to the network model (mpcbench links):")
        say("\n".join(plain(line) for line in links_text.splitlines()))
    failed = frame[(frame["status"] != "ok") & frame["latest"]]
    if len(failed):
        say(f"\n{len(failed)} failed cell(s) (latest record per cell):")
        for r in failed.itertuples(index=False):
            say((markdown_cell if opts.format == "markdown" else plain)(f"  {r.status}: {r.cell_id}: {r.error}"))
    say()
    say(
        textwrap.fill(
            "significance: Welch's t-test vs the 'none' baseline over seeds (* p<0.05, ** p<0.01, "
            "*** p<0.001); 'n too small' with fewer than 2 seeds on either side (run with --seeds 3)",
            REPORT_WIDTH,
        )
    )
    if network:
        say(
            textwrap.fill(
                f"time-to-target @ {network}: mean ± sd over the seeds that reached the target (reached/ok seeds); "
                "Δ time: a paired t-test by seed when both rows reached the target on the same seeds, Welch's "
                "t-test otherwise; 'not resolved' at p >= 0.05",
                REPORT_WIDTH,
            )
        )


SUMMARY_COLUMNS = ("task", "compressor", "setup", "quality", "Δ vs none", "ratio total")


def summary_table(frame: pd.DataFrame, cell_keys: set[str], network: str | None = None) -> pd.DataFrame:
    """One row per (task, compressor, setup) that ``cell_keys`` ran: quality against the ``none``
    baseline, the total compression ratio and time-to-target at ``network`` (default as the report's),
    from the same aggregation and rule as :func:`write_report` (every seed in ``frame`` counts)."""
    ran = frame[frame["cell_key"].isin(cell_keys)]
    if ran.empty:
        return pd.DataFrame(columns=list(SUMMARY_COLUMNS))
    network = network or default_network(frame)
    groups = ran[["task", "tier"]].drop_duplicates()
    sub = frame.merge(groups, on=["task", "tier"])
    ranked = rank_by_setup(RULES[DEFAULT_RULE], aggregate(sub), network=network)
    wanted = set(map(tuple, ran[["task", "tier", "entry", "compressor", "setup"]].astype(str).values))
    parts = []
    for (task, tier), g in ranked.groupby(["task", "tier"], sort=True):
        keep = g[[(task, tier, e, c, st) in wanted for e, c, st in zip(g["entry"], g["compressor"], g["setup"])]]
        if keep.empty:
            continue
        table = display_table(keep, network=network)
        metric = str(keep["metric_name"].iloc[0] or "quality")
        out = pd.DataFrame(
            {
                "task": str(task) if tier == "quick" else f"{task} / {tier}",
                "compressor": table["compressor"],
                "setup": table["setup"] if "setup" in table else "",
                "quality": metric + " " + table[metric].astype(str),
                "Δ vs none": table["Δ vs none"],
                "ratio total": table["ratio total"],
            }
        )
        time_col = f"time-to-target @ {network}"
        if time_col in table:
            out[time_col] = table[time_col]
        parts.append(out)
    table = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=list(SUMMARY_COLUMNS))
    if "setup" in table and not table["setup"].astype(bool).any():
        table = table.drop(columns="setup")
    return table


def write_summary(frame: pd.DataFrame, cell_keys: set[str], out: TextIO, network: str | None = None) -> None:
    """The closing summary of ``mpcbench run`` and ``pytest suite`` (:func:`summary_table`), as text."""
    table = summary_table(frame, cell_keys, network)
    if table.empty:
        return
    network = network or default_network(frame)
    out.write(
        "\nsummary of this run (mean over the stored seeds; Δ: Welch's t-test vs none, n<2 = one seed"
        + (f"; time-to-target modeled at {network}" if network else "")
        + "):\n"
    )
    table = terminal(table)
    table["Δ vs none"] = table["Δ vs none"].str.replace("n too small", "n<2").str.replace(", not resolved", " ~")
    out.write(table.to_string(index=False) + "\n")


def write_claims(
    frame: pd.DataFrame, fmt: str, out: TextIO, *, tasks: Collection[str] = (), tiers: Collection[str] = ()
) -> None:
    """The seed papers' claims (:mod:`leaderboard.claims`) with their verdicts from ``frame``: per
    claim the verdict, the effect with its interval and test, and the tier's state (plateaued or
    not, floor or not, same machine class or not). ``tasks`` / ``tiers``: only the claims made on
    these (empty: all), so that a frame narrowed to one tier does not list the other tiers' claims
    as having no records."""
    from leaderboard.claims import claims_table, judge, load_claims

    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; valid: {', '.join(FORMATS)}")
    claims = [c for c in load_claims() if (not tasks or c.task in tasks) and (not tiers or c.tier in tiers)]
    table = claims_table([judge(c, frame) for c in claims])
    if fmt == "csv":
        table.to_csv(out, index=False)
        return
    if fmt == "markdown":
        out.write(markdown(table) + "\n")
        return
    out.write("reproductions: the seed papers' claims against the records (leaderboard/claims.yaml)\n")
    keys = ("finding", "configuration", "vs", "seeds", "effect (+ = better)", "test", "MDD", "expected")
    for r in terminal(table).to_dict("records"):
        out.write("\n" + f"{r['verdict'].upper()}: {r['claim']} ({r['paper']}, {r['task / tier']})" + "\n")
        for k in (*keys, "tier state", "why", "with / without compression at evaluation"):
            out.write(
                "\n".join(textwrap.wrap(f"{k}: {r[k]}", REPORT_WIDTH, initial_indent="  ", subsequent_indent="    "))
                + "\n"
            )
        out.write(f"  means: {r['means']}\n")


def score_table(result: Any, *, ranked: bool = True) -> pd.DataFrame:
    """The benchmark score as text cells (:class:`leaderboard.score.ScoreResult`): the headline's
    rows (``ranked``: rows with the tier's seeds on every task) or the rows listed apart."""
    rows = []
    table = result.table
    if "ranked" in table:
        table = table[table["ranked"] == ranked]
    for r in table.to_dict("records"):
        progress = r.get("progress", math.nan)
        rows.append(
            {
                "rank": str(len(rows) + 1) if ranked else "-",
                "entry / compressor": r["row"],
                "score": f"{r['score']:.3f}",
                "± sd (seed resampling)": "-" if r["score_sd"] != r["score_sd"] else f"{r['score_sd']:.3f}",
                "5-95%": "-" if r["score_p5"] != r["score_p5"] else f"{r['score_p5']:.3f}-{r['score_p95']:.3f}",
                "first in": "-" if r["first_in"] != r["first_in"] else f"{r['first_in']:.0%}",
                "fastest / reached / pairs": f"{r['pairs_fastest']} / {r['pairs_reached']} / {r['n_pairs']}",
                "quality to target": "-" if progress != progress else f"{progress:.0%}",
                "seeds": str(r["seeds"]),
            }
        )
    return pd.DataFrame(rows)


def score_text(result: Any, tier: str) -> str:
    """The paragraph above the score table: what the score is, the pairs and their regime weights,
    the rows left out, the spread."""
    from leaderboard.score import TAU_MAX
    from leaderboard.statistics import tier_seeds

    regimes: dict[str, list[str]] = {}
    for (t, n), reg in result.regimes.items():
        regimes.setdefault(reg, []).append(f"{t}@{n}")
    weights = "; ".join(f"{reg}: {', '.join(v)}" for reg, v in sorted(regimes.items())) or "none"
    apart = int((~result.table["ranked"]).sum()) if "ranked" in result.table else 0
    return (
        f"benchmark score ({tier} tier): the performance profile's area over tau in [1, {TAU_MAX:g}] "
        f"(1 = fastest to the target on every pair; a target not reached by every seed counts as never), each "
        f"(task, network) pair weighted so that every task counts once and, within a task, every network regime "
        f"once (near-duplicate networks share their regime's weight). Regimes (the uncompressed run's modeled "
        f"time against its fastest network: up to 1.1x compute-bound, 2x or more communication-bound): {weights}. "
        f"Ties (e.g. rows that never reach the target) are ordered by quality to target: the share of the way from "
        f"the task's trivial predictor to its target that the row's mean final metric covers. The headline ranks "
        f"rows with the tier's {tier_seeds(tier)} seeds on every task"
        + (f"; {apart} row(s) with fewer are listed apart, scored against the headline's fastest" if apart else "")
        + ". "
        + (f"Left out (not run on every task): {', '.join(result.left_out)}. " if result.left_out else "")
        + f"Spread: {result.resamples} bootstrap draws of each ranked row's seeds."
    )


def write_score(frame: pd.DataFrame, fmt: str, out: TextIO, *, tier: str = "quick") -> None:
    """The benchmark score (:mod:`leaderboard.score`) of ``tier``: the table and the pairs it covers."""
    from leaderboard.score import benchmark_score

    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; valid: {', '.join(FORMATS)}")
    result = benchmark_score(aggregate(frame), tier=tier)
    if fmt == "csv":
        result.table.to_csv(out, index=False)
        return
    out.write("\n".join(textwrap.wrap(plain(score_text(result, tier)), REPORT_WIDTH)) + "\n\n")
    for ranked in (True, False):
        table = score_table(result, ranked=ranked)
        if ranked is False:
            if table.empty:
                break
            out.write("\nlisted apart (fewer seeds than the tier's on some task; not ranked):\n\n")
        out.write((markdown(table) if fmt == "markdown" else terminal(table).to_string(index=False)) + "\n")
