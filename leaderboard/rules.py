"""Ranking rules as objects: each :class:`Rule` ranks an aggregate within every (task, tier).

The app's rule picker, ``mpcbench report --rule`` and the docs iterate :data:`RULES`; adding
a rule is one subclass of :class:`Rule` (its keys, its question, its rank labels) and one
entry in :data:`RULES`, in this file only::

    for rule in RULES.values():
        table = rule.rank(agg, network="1Gbps")     # + "rank", sorted
        print(rule.title, rule.explain("val_loss", higher_is_better=False))

Quality is the metric the task reports, evaluated with compression (``quality="compressed"``,
the records' ``final_metric``) or without it (``"uncompressed"``: ``final_metric_uncompressed``,
the same trained model evaluated on plain activations); the page says which one ranks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from leaderboard.frame import BYTE_DIRECTIONS
from leaderboard.networks import network_profiles
from leaderboard.statistics import tier_seeds, time_test

__all__ = [
    "QUALITIES",
    "CONTROLS",
    "Rule",
    "goal_text",
    "QualityAtRatio",
    "TimeToTarget",
    "ParetoRank",
    "RULES",
    "DEFAULT_RULE",
    "rank",
    "pareto_ranks",
    "pareto_front",
]

# which evaluation ranks: name -> (aggregate column, words for the page)
QUALITIES = {
    "compressed": ("metric_mean", "evaluated with compression"),
    "uncompressed": ("metric_uncompressed_mean", "evaluated without compression"),
}


# --------------------------------------------------------------------------- Pareto
def pareto_ranks(df: pd.DataFrame, x: str, y: str, *, minimize_x: bool = True, maximize_y: bool = True) -> pd.Series:
    """Non-dominated sorting: 1 = on the frontier, 2 = on the frontier once rank 1 is removed, ...

    A point dominates another if it is at least as good on both axes and strictly better on
    one; identical points share a rank. Rows with NaN in x or y get rank NA.
    """
    out = pd.Series(pd.NA, index=df.index, dtype="Int64")
    valid = df[[x, y]].dropna()
    xs = valid[x].to_numpy(float) * (1 if minimize_x else -1)  # smaller is better after the sign flip
    ys = valid[y].to_numpy(float) * (-1 if maximize_y else 1)
    # one sweep in order of x (then y): a point joins the first level none of whose points
    # dominates it. Within a level sorted by x, y strictly falls, so the level's last point
    # (its smallest y) decides, and the levels' last y values grow with the level: O(n log n)
    tails: list[tuple[float, float]] = []  # per level: (y, x) of its last point
    levels = np.zeros(len(valid), dtype=np.int64)
    for i in np.lexsort((ys, xs)):
        px, py = xs[i], ys[i]
        lo, hi = 0, len(tails)
        while lo < hi:  # first level whose last point does not dominate (px, py)
            mid = (lo + hi) // 2
            ty, tx = tails[mid]
            if ty < py or (ty == py and tx < px):
                lo = mid + 1
            else:
                hi = mid
        if lo == len(tails):
            tails.append((py, px))
        else:
            tails[lo] = (py, px)
        levels[i] = lo + 1
    out.loc[valid.index] = levels
    return out


def pareto_front(df: pd.DataFrame, x: str, y: str, *, minimize_x: bool = True, maximize_y: bool = True) -> pd.Series:
    """Boolean mask of the rows on the Pareto frontier (rank 1 of :func:`pareto_ranks`)."""
    return (pareto_ranks(df, x, y, minimize_x=minimize_x, maximize_y=maximize_y) == 1).fillna(False).astype(bool)


# --------------------------------------------------------------------------- rules
# the page's and the report's controls a rule may use, beyond task, tier, quality and direction
CONTROLS = {
    "network": "the network profile or link whose modeled times rank (time_to_target_s@<network>)",
    "min_ratio": "the minimum mean compression ratio a row needs to be ranked",
}


def goal_text(metric: str, higher_is_better: bool, target: float | None) -> str:
    """``"accuracy >= 0.73"``: the task's target in words (the metric alone when unknown)."""
    if target is None or target != target:
        return metric
    return f"{metric} {'>=' if higher_is_better else '<='} {target:g}"


@dataclass(frozen=True)
class Rule:
    """A ranking rule: ``name`` (the CLI's ``--rule``), ``title`` (the page's picker),
    ``explanation`` (what it means; ``{better}`` is filled by :meth:`explain`), ``controls``
    (which of :data:`CONTROLS` the page shows and the report passes for it).

    A rule owns everything that differs between rules: its sort keys (:meth:`keys`), the
    question it answers (:meth:`question`), and how a rank is written, with its "not
    resolved" marks (:meth:`rank_labels`); the page and the report only call these."""

    name: str
    title: str
    explanation: str
    controls: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        unknown = [c for c in self.controls if c not in CONTROLS]
        if unknown:
            raise ValueError(f"rule {self.name!r}: unknown control(s) {unknown}; valid: {', '.join(CONTROLS)}")

    @property
    def needs_network(self) -> bool:
        """Whether the rule ranks modeled times (the page needs a network to show it)."""
        return "network" in self.controls

    def explain(self, metric: str = "quality", *, higher_is_better: bool = True) -> str:
        """The explanation with the task's own metric name, e.g. "lower val_loss first"."""
        return self.explanation.replace("{better}", f"{'higher' if higher_is_better else 'lower'} {metric} first")

    def question(
        self,
        metric: str,
        *,
        higher_is_better: bool = True,
        target: float | None = None,
        network: str | None = None,
        min_ratio: float | None = None,
    ) -> str:
        """The question the ranking answers, in one line ("Q: which compressor ...?")."""
        raise NotImplementedError

    def keys(self, out: pd.DataFrame, quality_key: pd.Series, *, min_ratio, network, direction) -> list[pd.Series]:
        """Lexicographic sort keys, smaller is better; NaN in the first key: not ranked."""
        raise NotImplementedError

    def rank_labels(self, ranked: pd.DataFrame) -> list[str]:
        """The rank as shown, for the rows of one (task, tier) in rank order: ``"-"`` for an
        unranked row. Rules that can tell resolved from unresolved order mark it here."""
        return ["-" if pd.isna(r) else str(int(r)) for r in ranked["rank"]]

    def rank(
        self,
        agg: pd.DataFrame,
        *,
        min_ratio: float | None = None,
        network: str | None = None,
        direction: str = "total",
        quality: str = "compressed",
    ) -> pd.DataFrame:
        """Rank ``agg`` (:func:`leaderboard.statistics.aggregate`) within each (task, tier).

        Returns a copy with ``rank`` (Int64; NA = not ranked: below ``min_ratio``, no ok
        seeds, no value for the rule, or a failed verification) sorted by task, tier, rank, ``rank_label`` (the rank
        as shown, :meth:`rank_labels`) and ``quality`` (the ranked metric column's values).
        ``direction`` picks which bytes / ratio the rules use; ``network`` is a column suffix
        (``time_to_target_s@<network>``; default: the fastest profile present); ``quality``
        is a key of :data:`QUALITIES`.
        """
        if direction not in BYTE_DIRECTIONS:
            raise ValueError(f"unknown direction {direction!r}; valid: {', '.join(BYTE_DIRECTIONS)}")
        if quality not in QUALITIES:
            raise ValueError(f"unknown quality {quality!r}; valid: {', '.join(QUALITIES)}")
        out = agg.copy()
        out["rank"] = pd.Series(pd.NA, index=out.index, dtype="Int64")
        out["rank_label"] = "-"
        if out.empty:
            return out
        col = QUALITIES[quality][0]
        out["quality"] = out[col] if col in out else np.nan
        sign = np.where(out["higher_is_better"].astype(bool), -1.0, 1.0)  # smaller key = better
        quality_key = pd.Series(out["quality"].to_numpy(float) * sign, index=out.index)
        # rows with fewer seeds than the tier was designed for rank after every row that has them,
        # in every rule: one seed can lead only where nothing better established exists
        out["seeds_wanted"] = [tier_seeds(str(tier)) for tier in out["tier"]]
        out["short_of_seeds"] = out["n"].to_numpy() < out["seeds_wanted"].to_numpy()
        keys = self.keys(out, quality_key, min_ratio=min_ratio, network=network, direction=direction)
        # a row whose verification failed never ranks: it is listed after the ranked rows, its
        # mark and reason on its line (leaderboard.submissions.row_verification)
        failed = out["verification"].eq("failed") if "verification" in out else pd.Series(False, index=out.index)
        keys = [out["short_of_seeds"].astype(float).where(keys[0].notna()), *keys]
        key_cols = []
        for i, k in enumerate(keys):
            out[f"_k{i}"] = k.astype(float).where(~failed) if i == 0 else k.astype(float)
            key_cols.append(f"_k{i}")
        for _, g in out.groupby(["task", "tier"], sort=False):
            g = g[g["_k0"].notna()]
            if g.empty:
                continue
            out.loc[g.index, "rank"] = self._positions(g, key_cols)
        out["_rank_sort"] = out["rank"].astype(float).fillna(np.inf)
        ties = ["entry", "compressor"] + (["setup"] if "setup" in out else [])
        out = out.sort_values(["task", "tier", "_rank_sort", *key_cols, *ties], kind="stable")
        out = out.drop(columns=[*key_cols, "_rank_sort"]).reset_index(drop=True)
        for _, g in out.groupby(["task", "tier"], sort=False):
            out.loc[g.index, "rank_label"] = [
                f"{label} ({int(n)} of {int(wanted)} seeds)"
                if short and label != "-" and " seeds)" not in label
                else label
                for label, short, n, wanted in zip(self.rank_labels(g), g["short_of_seeds"], g["n"], g["seeds_wanted"])
            ]
        return out

    def _positions(self, g: pd.DataFrame, key_cols: list[str]) -> list[int]:
        """Dense position of the lexicographic key; equal keys share the smaller rank."""
        tuples = list(zip(*(g[c] for c in key_cols)))
        counts: dict[tuple, int] = {}
        for t in tuples:
            counts[t] = counts.get(t, 0) + 1
        pos, r = {}, 1
        for tup in sorted(counts):
            pos[tup] = r
            r += counts[tup]
        return [pos[t] for t in tuples]


class QualityAtRatio(Rule):
    def question(self, metric, *, higher_is_better=True, target=None, network=None, min_ratio=None):
        at = f" at >= {min_ratio:g}x compression" if min_ratio else ""
        best = "highest" if higher_is_better else "lowest"
        return (
            f"Q: which compressor gives the {best} {metric}{at}? (target {goal_text(metric, higher_is_better, target)})"
        )

    def rank_labels(self, ranked):
        """``"4 (≈3)"`` where the row's quality is within the minimal detectable difference of
        the ranked row above it: the data do not resolve their order."""
        labels, prev = [], None  # (quality, rank text) of the ranked row above
        for rank_, q, mdd in zip(ranked["rank"], ranked["quality"], ranked.get("mdd", [math.nan] * len(ranked))):
            if pd.isna(rank_):
                labels.append("-")
                continue
            text = str(int(rank_))
            q, mdd = float(q), float(mdd) if mdd is not None and not pd.isna(mdd) else math.nan
            if prev is not None and not math.isnan(mdd) and not math.isnan(q) and abs(q - prev[0]) < mdd:
                text += f" (≈{prev[1].split(' ')[0]})"
            prev = (q, text)
            labels.append(text)
        return labels

    def keys(self, out, quality_key, *, min_ratio, network, direction):
        eligible = (out["n"] > 0) & quality_key.notna()
        if min_ratio is not None:
            eligible &= out[f"ratio_{direction}"] >= float(min_ratio)
        return [quality_key.where(eligible)]


class TimeToTarget(Rule):
    """Modeled time-to-target at a network, with its seed statistics.

    Sort classes, in order: every seed reached the target with at least the tier's seeds
    (:func:`leaderboard.statistics.tier_seeds`); every seed reached it with fewer seeds
    (marked, and never above a row of the first class); some seeds reached it; none did.
    Within a class, by mean time. Rank labels group statistically tied rows: a row whose time
    is not resolved (p >= 0.05, :func:`leaderboard.statistics.time_test`) from the first row
    of the group above it joins that group (``"3 (≈2)"``)."""

    def question(self, metric, *, higher_is_better=True, target=None, network=None, min_ratio=None):
        goal = goal_text(metric, higher_is_better, target)
        return (
            f"Q: which compressor first reaches {goal} over a {network} link, by how much, and is that "
            "resolved? (modeled from measured compute and bytes; mean ± sd over seeds)"
        )

    def keys(self, out, quality_key, *, min_ratio, network, direction):
        profiles = [c.split("@", 1)[1] for c in out.columns if c.startswith("time_to_target_s@")]
        if not profiles:
            raise ValueError("no record has modeled times, so time_to_target cannot rank")
        network = network or network_profiles(out)[0]
        if network not in profiles:
            raise ValueError(f"unknown network profile {network!r}; valid: {', '.join(profiles)}")
        t, reached = out[f"time_to_target_s@{network}"], out[f"reached@{network}"]
        eligible = out["n"] > 0
        wanted = out["seeds_wanted"].to_numpy()
        out["time_values"] = out[f"times@{network}"] if f"times@{network}" in out else [{} for _ in range(len(out))]
        full = out["n"].to_numpy() >= wanted
        reach_class = np.where(reached >= 1.0, np.where(full, 0, 1), np.where(reached > 0, 2, 3))
        out["reach_class"] = reach_class  # 0 all reached, 1 all reached with too few seeds, 2 some, 3 none
        return [pd.Series(reach_class, index=out.index).where(eligible), t.fillna(np.inf)]

    def rank_labels(self, ranked):
        labels: list[str] = []
        leader: tuple[str, dict] | None = None  # (rank text, per-seed times) of the current tie group's first row
        for rank_, n, wanted, cls, times in zip(
            ranked["rank"], ranked["n"], ranked["seeds_wanted"], ranked["reach_class"], ranked["time_values"]
        ):
            if pd.isna(rank_):
                labels.append("-")
                continue
            text = str(int(rank_))
            if cls == 0:  # all seeds reached, enough seeds: tie groups
                if leader is not None and time_test(times, leader[1]).resolved is not True:
                    text += f" (≈{leader[0]})"
                else:
                    leader = (text, times)
            elif cls == 1:
                text += f" ({int(n)} of {int(wanted)} seeds)"
            labels.append(text)
        return labels


class ParetoRank(Rule):
    def question(self, metric, *, higher_is_better=True, target=None, network=None, min_ratio=None):
        goal = goal_text(metric, higher_is_better, target)
        return f"Q: which compressors are on the {metric}-versus-bytes frontier? (target {goal})"

    def keys(self, out, quality_key, *, min_ratio, network, direction):
        eligible = out["n"] > 0
        col = f"bytes_per_step_{direction}"
        pr = pd.Series(pd.NA, index=out.index, dtype="Int64")
        for _, g in out[eligible].groupby(["task", "tier", "short_of_seeds"], sort=False):
            hib = bool(g["higher_is_better"].iloc[0])
            pr.loc[g.index] = pareto_ranks(g, col, "quality", maximize_y=hib)
        out["pareto_rank"] = pr
        return [pr.astype(float), quality_key]

    def _positions(self, g, key_cols):
        """The rank is the Pareto level itself (ties share it); the levels of rows short of seeds
        (``_k0`` 1, :meth:`Rule.rank`) count on after the full-seed rows' last level."""
        short, level = g["_k0"].to_numpy(bool), g["_k1"].to_numpy(int)
        offset = int(level[~short].max()) if (~short).any() else 0
        return [int(lv) + (offset if s else 0) for s, lv in zip(short, level)]


RULES: dict[str, Rule] = {
    r.name: r
    for r in (
        QualityAtRatio(
            "quality_at_ratio",
            "Best quality at a compression ratio",
            "Entries whose mean compression ratio (raw bytes / bytes on the wire, measured from the "
            "tensors that crossed the wire, over the chosen direction or all directions together) is at "
            "least the chosen minimum are ranked by their mean final quality over seeds ({better}); an entry "
            "with fewer seeds than the tier asks is marked ('1 of 3 seeds') and ranked after every entry that "
            "has them. Entries below the ratio are listed without a rank. The delta column compares with the "
            "entry's own uncompressed baseline of the same task, tier, run setup and machine, or, marked "
            "as such, the maintainers' baseline; stars mark a significant difference by Welch's t-test "
            "over seeds (* p<0.05, ** p<0.01, *** p<0.001; 'n too small' when either side has fewer "
            "than 2 seeds), and 'not resolved' marks a difference smaller than the minimal detectable "
            "difference of the task and tier (measured seed spread and evaluation-set size): noise, "
            "not order.",
            controls=("min_ratio",),
        ),
        TimeToTarget(
            "time_to_target",
            "Fastest time-to-target on a network",
            "Entries are ranked by the modeled wall-clock time to first reach the task's target quality "
            "when the measured compute time and the measured bytes per step are replayed over the chosen "
            "network (bandwidth and latency); a seed's time is interpolated between the two evaluations "
            "around its crossing. The time is the mean ± sd over the seeds that reached the target, each "
            "seed's time is listed, and the difference from the entry's baseline is tested: paired by "
            "seed when both reached the target on the same seeds, Welch's t-test otherwise (the column "
            "says which); p >= 0.05 is 'not resolved'. Ranks form tie groups: '3 (≈2)' is not resolved "
            "from rank 2, the first of its group. Entries whose every seed reached the target rank first; "
            "an entry with fewer seeds than the tier asks is marked ('1 of 3 seeds') and ranked after "
            "every entry that has them; then entries where only some seeds reached the target, and last "
            "those that never did.",
            controls=("network",),
        ),
        ParetoRank(
            "pareto",
            "Pareto rank: quality versus bytes",
            "Each entry is a point (bytes per training step on the wire, mean final quality). Rank 1 is "
            "the Pareto frontier: no other entry is at least as good on both (fewer or equal bytes and "
            "equal or better quality) and strictly better on one. Rank 2 is the frontier once rank 1 is "
            "removed, and so on. Within a rank, entries are listed by quality ({better}). Entries with "
            "fewer seeds than the tier asks form their own levels, after every entry that has them, and are "
            "marked ('1 of 3 seeds'). The plot below shows the frontier highlighted.",
        ),
    )
}


# the rule the page opens on and ``mpcbench report`` / ``submit`` use unless told: the question a
# reader brings (which compressor reaches the target first over my link?), answered with seed statistics
DEFAULT_RULE = "time_to_target"


def rank(
    agg: pd.DataFrame,
    rule: str,
    *,
    min_ratio: float | None = None,
    network: str | None = None,
    direction: str = "total",
    quality: str = "compressed",
) -> pd.DataFrame:
    """``RULES[rule].rank(agg, ...)`` (see :meth:`Rule.rank`); an unknown rule lists the valid ones."""
    if rule not in RULES:
        raise ValueError(f"unknown ranking rule {rule!r}; valid rules: {', '.join(RULES)}")
    return RULES[rule].rank(agg, min_ratio=min_ratio, network=network, direction=direction, quality=quality)
