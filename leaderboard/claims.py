"""The seed papers' claims tested against the records: a verdict per claim, with the tier's state.

    claims = load_claims()                 # leaderboard/claims.yaml
    verdicts = [judge(c, frame) for c in claims]
    claims_table(verdicts)                 # the reproductions page's table

Each claim names a published configuration (a matrix entry), the row it is compared with and
the expected direction. :func:`judge` takes the maintainers' latest ok records of the claim's
row, in its best-sampled (setup, machine class), and the comparison's records in the same
setup (the same setup-matching the rankings use), preferring the same machine class. It
compares the final metric over seeds: paired by seed only when both sides ran the same seeds
on one machine class (a seed fixes initialization and data order; across machine classes the
same seed gives different runs), Welch's t-test otherwise. Before any verdict it reads the
tier's state (:class:`TierState`):

- **records**: none, or fewer than 2 seeds a side: ``not testable at this tier``;
- **floor**: both sides' means within the comparison's MDD of the task's strongest trivial
  predictor (``DESCRIPTION["trivial"]``): both failed to learn, ``not testable at this tier``;
- **ratio**: a claim that names the compression its code stands for (``min_ratio``, of one
  direction or the total) is not testable when the arm's measured ratio falls short of it (AQ-SGD
  sending its first visits in full is mostly uncompressed training);
- **plateau, on the gap**: the claim is about a difference, so what must have stopped moving is
  the gap. Per seed, each side's change over the last quarter of its curve (the metric at the last
  evaluation minus the metric interpolated at three quarters of the steps, in "better" units); the
  gap's change is the arm's minus the comparison's (paired seeds: the mean of the per-seed
  differences). It must be within ± the comparison's MDD (the smallest effect it resolves), and
  for a ``close`` claim the arm's own change too (a gap of zero that both sides
  still move through says nothing yet). Otherwise ``not testable at this tier``. The uncompressed
  baseline's own change is shown beside it and decides nothing: a baseline that still rises or
  falls back alike with the arm leaves the gap where it is. The step judged is the tier's last
  evaluation, the step count the matrix fixes before any cell runs (no step is chosen on the
  reported evaluation: an earlier "past its best" rule re-judged at the baseline's best reported
  evaluation and was dropped);

then decides (alpha 0.05, the 95% interval of the effect in "better" units):

- ``reproduced``: a ``better``/``worse`` effect in the claimed direction at p < 0.05; a
  ``close`` claim's interval within ±tolerance; a ``not_better`` claim's upper end below +tolerance;
- ``contradicted``: a significant effect against the claimed direction; a ``close`` claim's
  interval entirely outside ±tolerance; a ``not_better`` claim's lower end above +tolerance;
  ``contradicted in this configuration`` when the claim says how its run departs from what the
  paper describes (``departs``): the line names the optimizer, rate and code that ran;
- ``refuted in this configuration``: the interval excludes the effect the claim states
  (``min_effect``, metric units) without a significant effect against it: the claimed size is
  ruled out here, not its sign;
- ``not resolvable at this tier``: none of these; the MDD (the interval's half-width: the
  effect that just reaches p < 0.05 with this spread and these seeds) says how large an effect
  the tier could show;
- ``measured (no direction stated)``: a ``stated`` claim, whose source text names what was
  measured but no outcome; the effect is shown with the tier's state, no verdict (the floor and
  plateau checks withhold verdicts, and it has none).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from leaderboard.frame import BASELINE, MAINTAINERS
from leaderboard.statistics import paired_p, t_ppf, tier_seeds, welch_p
from suite.results.task_catalog import describe as describe_task

__all__ = [
    "CLAIMS_PATH",
    "SEED_PAPERS",
    "source_text",
    "EXPECTS",
    "EVALUATIONS",
    "COLUMNS",
    "VERDICTS",
    "NOT_TESTABLE",
    "CONTRADICTED_HERE",
    "OWN_QUESTION",
    "NOT_RESOLVABLE",
    "Claim",
    "TierState",
    "Verdict",
    "load_claims",
    "judge",
    "claims_table",
    "last_quarter_gain",
    "plateau_curves",
    "panel_title",
    "CURVE_COLUMNS",
    "evaluation_means",
    "EVALUATION_COLUMNS",
]

CLAIMS_PATH = Path(__file__).with_name("claims.yaml")
# the seed papers' texts (summaries kept outside the repository, /work/shared/papers): a claim's ``seed``
# names one, its ``quote`` holds that file's own words (tests/leaderboard/test_claims.py checks them there)
SEED_PAPERS = {
    "000": "000_6e1d4023f211cff7.txt",
    "001": "001_7eee4c8e14e49089.txt",
    "002": "002_0e07a32f8836937e.txt",
    "003": "003_3acb983fbc866c9c.txt",
}
EXPECTS = ("better", "worse", "close", "not_better", "not_worse", "stated")
# what a claim may compare besides the final metric: the column, and whether lower is better
COLUMNS = {"final_metric": None, "compress_s": "lower"}  # None: the task metric's own direction
EVALUATIONS = ("compressed", "uncompressed_vs_compressed", "uncompressed")
ALPHA = 0.05
NOT_TESTABLE = "not testable at this tier"
NOT_RESOLVABLE = "not resolvable at this tier"
CONTRADICTED_HERE = "contradicted in this configuration"
# what a row reads when its source text does not state the finding (no quote)
OWN_QUESTION = "the project's own question"
RATIO_OF = ("total", "forward", "backward", "dp", "tp_forward", "tp_backward")
VERDICTS = (
    "reproduced",
    "contradicted",
    CONTRADICTED_HERE,
    "refuted in this configuration",
    NOT_RESOLVABLE,
    NOT_TESTABLE,
    "measured (no direction stated)",
)
NARROW_TIERS = ("smoke", "quick", "plateau")  # CPU tiers: narrowed models (each task's tier budget says how)


@dataclass(frozen=True)
class Claim:
    """One published finding (see ``claims.yaml`` for the fields)."""

    id: str
    paper: str
    claim: str
    task: str
    tier: str
    entry: Any  # the matrix entry: a spec string or {forward: ..., backward: ...}
    compressor: str
    compare_to: str
    expect: str
    tolerance: float | None = None
    evaluation: str = "compressed"
    min_effect: float | None = None  # the effect size the claim states (metric units, claimed direction)
    seed: str = ""  # the seed paper's file (/work/shared/papers) the claim comes from; "" for other sources
    setup: str | None = None  # words the rows' setup label must hold (", "-separated, e.g. "dp=2", or a whole label)
    column: str = "final_metric"  # what is compared (COLUMNS); compress_s: the compressor's seconds per step
    # the source's own words stating the finding (a short quote from the seed paper's file); "" when
    # the text does not state it: the row is the project's own question
    quote: str = ""
    # how this run departs from what the source describes (optimizer, rate, code); "" when it does not:
    # a contradiction is then "contradicted in this configuration", naming what ran
    departs: str = ""
    min_ratio: float | None = None  # the compression the claim's code stands for, measured on ``ratio_of``
    ratio_of: str = "total"
    seeds: tuple[int, ...] | None = None  # the judged seeds (others, e.g. a rate sweep's, are left out)
    compare_setup: str | None = None  # words of the comparison's setup when it differs (its own tuned rate)

    def __post_init__(self) -> None:
        if self.expect not in EXPECTS:
            raise ValueError(f"claim {self.id!r}: unknown expect {self.expect!r}; valid: {', '.join(EXPECTS)}")
        if self.evaluation not in EVALUATIONS:
            raise ValueError(
                f"claim {self.id!r}: unknown evaluation {self.evaluation!r}; valid: {', '.join(EVALUATIONS)}"
            )
        if self.column not in COLUMNS:
            raise ValueError(f"claim {self.id!r}: unknown column {self.column!r}; valid: {', '.join(COLUMNS)}")
        if self.expect in ("close", "not_better", "not_worse") and not (self.tolerance and self.tolerance > 0):
            raise ValueError(f"claim {self.id!r}: expect {self.expect} needs a positive tolerance (metric units)")
        if self.min_effect is not None and not (self.expect in ("better", "worse") and self.min_effect > 0):
            raise ValueError(f"claim {self.id!r}: min_effect is a positive size, for a better / worse claim")
        if self.ratio_of not in RATIO_OF:
            raise ValueError(f"claim {self.id!r}: unknown ratio_of {self.ratio_of!r}; valid: {', '.join(RATIO_OF)}")
        if self.min_ratio is not None and not self.min_ratio > 1:
            raise ValueError(f"claim {self.id!r}: min_ratio is a compression ratio above 1")
        if self.quote and self.seed not in SEED_PAPERS:
            raise ValueError(
                f"claim {self.id!r}: a quote needs the seed paper it is from (seed: one of {', '.join(SEED_PAPERS)})"
            )
        if self.seeds is not None:
            object.__setattr__(self, "seeds", tuple(int(x) for x in self.seeds))

    @property
    def entry_text(self) -> str:
        """The matrix entry in one line."""
        if isinstance(self.entry, dict):
            return "{" + ", ".join(f"{k}: {v}" for k, v in self.entry.items()) + "}"
        return str(self.entry)


@dataclass(frozen=True)
class TierState:
    """What the tier can establish for one claim. ``plateaued``: the gap's mean last-quarter change
    ``gap_gain`` (arm minus comparison, "better" units) is within ± ``gain_limit`` (the comparison's
    MDD), and for a close claim the arm's own ``arm_gain`` too; None
    when a curve is too short to tell. ``gain``: the uncompressed ``baseline``'s own change (shown,
    deciding nothing). ``floor``: both sides within the MDD of the trivial predictor ``trivial``.
    ``same_machine``: both sides ran on one machine class. ``narrow``: the tier trains narrowed CPU
    models."""

    plateaued: bool | None = None
    gain: float = math.nan
    gain_limit: float = math.nan
    baseline: str = ""
    gap_gain: float = math.nan
    arm_gain: float = math.nan
    close: bool = False  # a close claim: the arm's own change counts too
    floor: bool = False
    trivial: float = math.nan
    same_machine: bool | None = None
    machines: tuple[str, ...] = ()
    setup: str = ""
    narrow: bool = False
    timing: bool = False  # a claim about seconds per step: plateau and floor do not apply
    seeds: int = 0  # the fewer seeds of the two sides (plateau and floor need 2 or more)
    # the tier's designed seed count (matrix.yaml): a verdict from fewer is interim, since adding
    # seeds until p < 0.05 would be optional stopping, so the line says how many of them ran
    designed_seeds: int = 0

    def trend(self) -> str:
        """The gap's change over the last quarter (and the arm's, the baseline's level beside them)."""
        if self.timing:
            return "no gap trend (a timing claim)"
        if self.gap_gain != self.gap_gain:
            return "gap trend unknown (curves with fewer than 2 evaluations)"
        limit = f"; limit ±{self.gain_limit:.3g}" if self.gain_limit == self.gain_limit else ""
        own = f", the arm itself {self.arm_gain:+.3g}" if self.arm_gain == self.arm_gain else ""
        base = (
            f"; {self.baseline}'s own level {self.gain:+.3g} (shown, not deciding)"
            if self.baseline and self.gain == self.gain
            else ""
        )
        return f"the gap changes by {self.gap_gain:+.3g} over its last quarter{own}{limit}{base}"

    def text(self) -> str:
        """One line: the gap's trend (plateaued or not), floor or not, same machine class or not."""
        if self.seeds < 2:
            machine = (
                ""
                if self.same_machine is None
                else ("; same machine class" if self.same_machine else "; different machine classes")
            )
            return f"not judged ({self.seeds} seed(s) on a side); {self.trend()}{machine}"
        if self.timing:
            plateau = "a timing claim (plateau and floor do not apply; no gap trend)"
        elif self.plateaued is None:
            plateau = self.trend()
        else:
            plateau = ("plateaued" if self.plateaued else "not plateaued") + f" ({self.trend()})"
        floor = (
            ""
            if self.timing
            else f"at the floor (both sides near the trivial predictor {self.trivial:g})"
            if self.floor
            else (f"above the floor ({self.trivial:g})" if self.trivial == self.trivial else "floor unknown")
        )
        if self.same_machine is None:
            machine = "machine class unknown"
        elif self.same_machine:
            machine = "same machine class"
        else:
            machine = "different machine classes (Welch, no pairing)"
        narrow = "; narrow CPU model (the tier's budget)" if self.narrow else ""
        interim = (
            f"; {self.seeds} of {self.designed_seeds} designed seeds (interim: may change with the rest)"
            if 0 < self.seeds < self.designed_seeds
            else ""
        )
        return "; ".join(x for x in (plateau, floor, machine) if x) + narrow + interim


@dataclass(frozen=True)
class Verdict:
    """A claim's measured effect and verdict. ``effect``: mean of the claim's row minus the
    comparison's in "better" units (positive = better: higher accuracy, lower loss); ``low``,
    ``high``: its 95% interval; ``test``: ``"paired by seed"`` / ``"Welch"`` (+ why);
    ``compressed`` / ``uncompressed``: the claim's row evaluated with / without compression
    (means over its seeds), side by side. ``ratio`` / ``ratio_ref``: each side's measured compression
    ratio (mean over its seeds, per compressed direction); ``ran`` / ``ran_ref``: its optimizer and rate."""

    claim: Claim
    metric: str
    n: int
    n_ref: int
    mean: float
    mean_ref: float
    effect: float
    low: float
    high: float
    p: float
    test: str
    mdd: float
    verdict: str
    why: str
    state: TierState = field(default_factory=TierState)
    compressed: float = math.nan
    uncompressed: float = math.nan
    # what ran on each side: the measured compression ratio and the optimizer at its rate
    ratio: str = ""
    ratio_ref: str = ""
    ran: str = ""
    ran_ref: str = ""


def load_claims(path: str | Path = CLAIMS_PATH) -> list[Claim]:
    """The claims of ``path``; a missing field or a bad value names the claim and the field."""
    raw = yaml.safe_load(Path(path).read_text()) or {}
    out, seen = [], set()
    fields = set(Claim.__dataclass_fields__)
    for i, c in enumerate(raw.get("claims") or []):
        where = f"{path}: claim {i + 1} ({c.get('id', '?') if isinstance(c, dict) else '?'})"
        if not isinstance(c, dict):
            raise ValueError(f"{where}: not a mapping")
        unknown = set(c) - fields
        if unknown:
            raise ValueError(f"{where}: unknown field(s) {sorted(unknown)}; valid: {', '.join(sorted(fields))}")
        missing = [
            f
            for f in ("id", "paper", "claim", "task", "tier", "entry", "compressor", "compare_to", "expect")
            if f not in c
        ]
        if missing:
            raise ValueError(f"{where}: missing {', '.join(missing)}")
        if c["id"] in seen:
            raise ValueError(f"{where}: id {c['id']!r} used twice")
        seen.add(c["id"])
        out.append(
            Claim(**{k: (float(v) if k in ("tolerance", "min_effect", "min_ratio") else v) for k, v in c.items()})
        )
    return out


# --------------------------------------------------------------------------- the records of a claim
def _ok_rows(frame: pd.DataFrame, c: Claim, compressor: str, words: str | None = None) -> pd.DataFrame:
    """The maintainers' latest ok records of one row of the claim's task and tier whose setup holds
    ``words`` (default: the claim's ``setup``)."""
    rows = frame[
        (frame["task"] == c.task)
        & (frame["tier"] == c.tier)
        & (frame["compressor"] == compressor)
        & (frame["status"] == "ok")
    ]
    if "latest" in rows:
        rows = rows[rows["latest"].astype(bool)]
    if "maintainers" in rows:
        rows = rows[rows["maintainers"].astype(bool) | (rows["entry"] == MAINTAINERS)]
    for col in ("setup", "machine"):
        if col not in rows:
            rows = rows.assign(**{col: ""})
    for word in (w.strip() for w in ((c.setup if words is None else words) or "").split(",") if w.strip()):
        # a part of the label equal to the word, or starting with it and a space ("sgd momentum 0.9
        # clip 1" holds "sgd momentum 0.9 clip 1 lr 0.3": any rate of that optimizer)
        keep = [
            any(x == word or x.startswith(word + " ") for x in (y.strip() for y in str(s).split(",")))
            for s in rows["setup"]
        ]
        rows = rows.loc[pd.Series(keep, index=rows.index, dtype=bool)]
    if c.seeds is not None:  # the judged seeds only (a sweep's seed chose the rates): before the setup is picked
        rows = rows[rows["seed"].isin(c.seeds)]
    return rows


def _pick(rows: pd.DataFrame, setup: str | None = None, machine: str | None = None) -> pd.DataFrame:
    """The records of one (setup, machine class): ``setup`` fixed when given (else the best-sampled),
    ``machine`` preferred when given (else the best-sampled)."""
    if setup is not None:
        rows = rows[rows["setup"] == setup]
    if rows.empty:
        return rows
    counts = rows.groupby(["setup", "machine"]).size().reset_index(name="n")
    counts["same"] = counts["machine"] == machine if machine is not None else False
    counts = counts.sort_values(["same", "n", "setup", "machine"], ascending=[False, False, True, True])
    best = counts.iloc[0]
    if machine is not None and bool(best["same"]) and int(best["n"]) < 2:  # too few there: the best-sampled
        best = counts.sort_values(["n", "setup", "machine"], ascending=[False, True, True]).iloc[0]
    return rows[(rows["setup"] == best["setup"]) & (rows["machine"] == best["machine"])]


def _values(rows: pd.DataFrame, column: str) -> dict[int, float]:
    return {int(s): float(v) for s, v in zip(rows["seed"], rows[column]) if v == v}


def _with_curves(rows: pd.DataFrame) -> pd.DataFrame | None:
    """``rows`` with their ``curve`` column (read back when the rows are an index's light rows);
    None when there is none to read."""
    if "curve" in rows:
        return rows
    if "source" not in rows or rows.empty:
        return None
    from leaderboard.index import load_details

    return load_details(rows)


def _curves(rows: pd.DataFrame, key: str = "metric") -> dict[int, list[tuple[float, float]]]:
    """Per seed, the record's curve as (step, ``key``) points (``metric`` or ``metric_uncompressed``;
    the details are read back when the rows are an index's light rows)."""
    rows = _with_curves(rows)
    if rows is None:
        return {}
    out = {}
    for seed, curve in zip(rows["seed"], rows["curve"]):
        pts = []
        for p in curve if isinstance(curve, list) else []:
            if isinstance(p, dict) and isinstance(p.get("step"), (int, float)) and isinstance(p.get(key), (int, float)):
                if p[key] == p[key]:
                    pts.append((float(p["step"]), float(p[key])))
        if pts:
            out[int(seed)] = sorted(pts)
    return out


def _gains(rows: pd.DataFrame, key: str, hib: bool, seeds: set[int] | None = None) -> dict[int, float]:
    """Per seed (of ``seeds`` when given), the last-quarter change of the curve's ``key``, better units."""
    out = {}
    for seed, pts in _curves(rows, key).items():
        g = last_quarter_gain(pts, hib)
        if g == g and (seeds is None or seed in seeds):
            out[seed] = g
    return out


def _mean(xs: Any) -> float:
    xs = list(xs)
    return sum(xs) / len(xs) if xs else math.nan


_DIRECTIONS = ("forward", "backward", "dp", "tp_forward", "tp_backward")
_SHORT = {"forward": "fwd", "backward": "bwd", "dp": "dp", "tp_forward": "tp fwd", "tp_backward": "tp bwd"}


def _ratio(rows: pd.DataFrame, of: str) -> float:
    """The mean measured compression ratio (raw / wire bytes) of ``of`` over the rows' seeds."""
    col = f"ratio_{of}"
    vals = [float(x) for x in rows[col] if isinstance(x, (int, float)) and x == x] if col in rows else []
    return _mean(vals)


def _ratio_text(rows: pd.DataFrame) -> str:
    """Each compressed direction's measured ratio (``"1.45x fwd, 7.9x bwd"``); "uncompressed" when none is."""
    if not len(rows):
        return "-"
    parts = []
    for d in _DIRECTIONS:
        specs = {str(x) for x in rows[f"spec_{d}"]} if f"spec_{d}" in rows else set()
        r = _ratio(rows, d)
        if specs - {"none", "", "None", "nan"} and r == r:
            parts.append(f"{r:.0f}x {_SHORT[d]}" if r >= 100 else f"{r:.3g}x {_SHORT[d]}")
    return ", ".join(parts) if parts else "uncompressed (1x)"


def _ran_text(rows: pd.DataFrame) -> str:
    """The optimizer and rate the rows trained with (their configs), e.g. ``sgd(momentum=0.9, clip=1) at
    lr 0.3``; the task's own optimizer and the tier's rate when the config does not set them."""
    seen = set()
    detailed = _with_curves(rows) if len(rows) else None  # an index's light rows: config read back with the curves
    for cfg in detailed["config"] if detailed is not None and "config" in detailed else []:
        cfg = cfg if isinstance(cfg, dict) else {}
        opt, lr = cfg.get("optimizer"), cfg.get("lr")
        seen.add(
            (opt or "the task's optimizer")
            + (f" at lr {lr:g}" if isinstance(lr, (int, float)) else " at the tier's rate")
        )
    return " / ".join(sorted(seen)) if seen else "-"


def last_quarter_gain(points: list[tuple[float, float]], higher_is_better: bool) -> float:
    """The metric at the last evaluation minus the metric at three quarters of the steps (linear
    between evaluations; from the first evaluation when it comes later), in "better" units; NaN
    for fewer than 2 evaluations."""
    if len(points) < 2:
        return math.nan
    end_step, end = points[-1]
    at = 0.75 * end_step
    prev = points[0]
    value = prev[1]
    for step, metric in points:
        if step >= at:
            if step == prev[0] or at <= prev[0]:
                value = metric if at > prev[0] else prev[1]
            else:
                value = prev[1] + (at - prev[0]) / (step - prev[0]) * (metric - prev[1])
            break
        prev = (step, metric)
    return (end - value) * (1.0 if higher_is_better else -1.0)


def _compare(a: dict[int, float], b: dict[int, float], pair: bool) -> tuple[float, float, float, float, str]:
    """(mean a - mean b, half-width of its 95% interval, p, df, test) of two sides' seed values."""
    ma, mb = sum(a.values()) / len(a), sum(b.values()) / len(b)
    va = sum((x - ma) ** 2 for x in a.values()) / (len(a) - 1)
    vb = sum((x - mb) ** 2 for x in b.values()) / (len(b) - 1)
    if pair:
        seeds = sorted(a)
        d = [a[k] - b[k] for k in seeds]
        md = sum(d) / len(d)
        sd = math.sqrt(sum((x - md) ** 2 for x in d) / (len(d) - 1))
        se, df = sd / math.sqrt(len(d)), float(len(d) - 1)
        p = paired_p([a[k] for k in seeds], [b[k] for k in seeds])
        test = "paired by seed"
    else:
        se = math.sqrt(va / len(a) + vb / len(b))
        df = (
            (va / len(a) + vb / len(b)) ** 2 / ((va / len(a)) ** 2 / (len(a) - 1) + (vb / len(b)) ** 2 / (len(b) - 1))
            if se > 0
            else 1.0
        )
        p = welch_p(ma, va, len(a), mb, vb, len(b))
        test = "Welch"
    half = t_ppf(1 - ALPHA / 2, max(1.0, df)) * se
    return ma - mb, half, p, df, test


def judge(c: Claim, frame: pd.DataFrame) -> Verdict:
    """The claim's verdict from ``frame`` (one row per record: :func:`leaderboard.frame.to_frame`
    or the index's rows)."""
    sub = frame[(frame["task"] == c.task) & (frame["tier"] == c.tier)]
    metric = next((m for m in sub.get("metric_name", []) if m), "metric")
    hib = bool(sub["higher_is_better"].iloc[0]) if len(sub) else True
    sign = 1.0 if hib else -1.0
    desc = describe_task(c.task)
    trivial = desc.trivial_score if desc is not None else math.nan
    nan = math.nan
    arm = _pick(_ok_rows(frame, c, c.compressor))
    setup = str(arm["setup"].iloc[0]) if len(arm) else None
    machine = str(arm["machine"].iloc[0]) if len(arm) else None
    ref_setup = None if c.compare_setup else setup  # the comparison at its own tuned rate when the claim says so
    if c.evaluation == "uncompressed_vs_compressed":
        ref = arm
    else:
        ref = _pick(_ok_rows(frame, c, c.compare_to, c.compare_setup), ref_setup, machine)
    col_a = "final_metric_uncompressed" if c.evaluation != "compressed" else "final_metric"
    col_b = "final_metric_uncompressed" if c.evaluation == "uncompressed" else "final_metric"
    timing = c.column != "final_metric"
    if timing:  # seconds per step: lower is better; no floor or plateau applies
        col_a = col_b = c.column
        metric, hib, sign, trivial = c.column, COLUMNS[c.column] != "lower", -1.0, math.nan
    a, b = _values(arm, col_a), _values(ref, col_b)
    compressed = _mean(_values(arm, "final_metric").values())
    uncompressed = _mean(_values(arm, "final_metric_uncompressed").values())
    machines = tuple(sorted(set(arm["machine"]) | set(ref["machine"])))
    same_machine = (len(machines) == 1) if (len(arm) and len(ref)) else None
    pair = set(a) == set(b) and same_machine is True
    # the trend of the gap (arm minus comparison) over the last quarter, per seed when paired
    key = {"final_metric": "metric", "final_metric_uncompressed": "metric_uncompressed"}
    ga = {} if timing else _gains(arm, key[col_a], hib, set(a))
    gb = {} if timing else _gains(ref, key[col_b], hib, set(b))
    if pair and set(ga) == set(gb) == set(a):
        gap_gain = _mean(ga[s] - gb[s] for s in ga)
    else:
        gap_gain = _mean(ga.values()) - _mean(gb.values()) if ga and gb else nan
    arm_gain = _mean(ga.values())
    # the uncompressed baseline's own level (same setup and machine class), shown beside the gap
    base_rows = _pick(_ok_rows(frame, c, BASELINE, c.compare_setup), ref_setup, machine)
    base_gain = nan if timing else _mean(_gains(base_rows, "metric", hib).values())
    state = TierState(
        gain=base_gain,
        baseline=BASELINE if base_gain == base_gain else "",
        gap_gain=gap_gain,
        arm_gain=arm_gain,
        close=c.expect == "close",
        trivial=trivial,
        same_machine=same_machine,
        machines=machines,
        setup=setup or "",
        narrow=c.tier in NARROW_TIERS,
        timing=timing,
        seeds=min(len(a), len(b)),
        designed_seeds=tier_seeds(c.tier),
    )
    sides = dict(
        compressed=compressed if len(arm) else nan,
        uncompressed=uncompressed,
        ratio=_ratio_text(arm),
        ratio_ref=_ratio_text(ref),
        ran=_ran_text(arm),
        ran_ref=_ran_text(ref),
    )
    if len(a) < 2 or len(b) < 2:
        if not len(arm) or not len(ref):
            why = f"no records at this tier ({c.compressor if not len(arm) else c.compare_to})"
        else:
            why = (
                f"{len(a)} seed(s) of {c.compressor}, {len(b)} of {c.compare_to} in the records (2 or more each needed)"
            )
        return Verdict(c, metric, len(a), len(b), nan, nan, nan, nan, nan, nan, "", nan, NOT_TESTABLE, why, state,
                       **sides)  # fmt: skip
    diff, half, p, _df, test = _compare(a, b, pair)
    if not pair:
        test += " (different machine classes: no pairing)" if same_machine is False else " (different seeds)"
    ma, mb = sum(a.values()) / len(a), sum(b.values()) / len(b)
    effect = sign * diff
    low, high = effect - half, effect + half
    mdd = half  # the effect that just reaches p < 0.05 with this spread and these seeds (power 0.5)
    # the limit: the comparison's MDD, the smallest effect it resolves (a gap moving by less over the
    # last quarter could not move the verdict by a resolvable amount in as many steps again)
    limit = mdd
    moving = [("gap", gap_gain)] + ([(c.compressor, arm_gain)] if c.expect == "close" else [])
    plateaued = None if gap_gain != gap_gain else all(abs(g) <= limit for _, g in moving if g == g)
    floor = trivial == trivial and all(sign * (m - trivial) <= mdd for m in (ma, mb))
    state = replace(state, plateaued=plateaued, gain_limit=limit, floor=floor)

    def verdict(v: str, why: str) -> Verdict:
        return Verdict(c, metric, len(a), len(b), ma, mb, effect, low, high, p, test, mdd, v, why, state,
                       **sides)  # fmt: skip

    if c.expect == "stated":
        # no direction to withhold: the effect is shown with the tier's state on its line
        return verdict(*_decide(c, effect, low, high, p, mdd))
    if floor:
        return verdict(NOT_TESTABLE, f"both sides at the trivial predictor ({trivial:g}, within the MDD {mdd:.3g})")
    if c.min_ratio is not None:
        measured = _ratio(arm, c.ratio_of)
        if not measured >= c.min_ratio:
            return verdict(
                NOT_TESTABLE,
                f"{c.compressor} ran at {measured:.3g}x ({c.ratio_of}), short of the {c.min_ratio:g}x its code stands "
                f"for: the comparison is not at the bytes the claim is about",
            )
    if plateaued is False:
        what, g = next((w, g) for w, g in moving if abs(g) > limit)
        name = f"the gap ({c.compressor} - {c.compare_to})" if what == "gap" else f"{c.compressor}'s own curve"
        return verdict(
            NOT_TESTABLE,
            f"{name} still moves by {g:+.3g} over the last quarter of training, more than the MDD {mdd:.3g}: "
            "more steps could change the verdict",
        )
    v, why = _decide(c, effect, low, high, p, mdd)
    if v == "contradicted" and c.departs:
        v, why = CONTRADICTED_HERE, f"{why}; ran {sides['ran']}, code {c.entry_text}; {c.departs}"
    return verdict(v, why)


def _decide(c: Claim, effect: float, low: float, high: float, p: float, mdd: float) -> tuple[str, str]:
    """(verdict, reason) from the effect (better units), its 95% interval and the test."""
    sig = p == p and p < ALPHA
    nr = NOT_RESOLVABLE
    if c.expect == "stated":
        return "measured (no direction stated)", "the source text names what was measured, not an outcome"
    if c.expect in ("better", "worse"):
        want = 1.0 if c.expect == "better" else -1.0
        lo, hi = sorted((low * want, high * want))  # the interval in the claimed direction
        if sig and effect * want < 0:
            return "contradicted", f"the opposite direction at p={p:.2g}"
        if c.min_effect is not None and hi < c.min_effect:
            return (
                "refuted in this configuration",
                f"the 95% interval [{lo:+.3g}, {hi:+.3g}] (claimed direction) excludes the claimed effect "
                f"of {c.min_effect:g} or more",
            )
        if sig:
            return "reproduced", f"{c.expect} at p={p:.2g}"
        return nr, f"p={p:.2g}: |effect| below the MDD {mdd:.3g} at these seeds"
    tol = float(c.tolerance or 0.0)
    if c.expect == "close":
        if -tol <= low and high <= tol:
            return "reproduced", f"95% interval [{low:+.3g}, {high:+.3g}] within ±{tol:g}"
        if low > tol or high < -tol:
            return "contradicted", f"95% interval [{low:+.3g}, {high:+.3g}] outside ±{tol:g}"
        return nr, f"95% interval [{low:+.3g}, {high:+.3g}] wider than ±{tol:g} can decide (MDD {mdd:.3g})"
    if c.expect == "not_worse":  # no loss larger than the tolerance
        if low >= -tol:
            return "reproduced", f"95% interval lower end {low:+.3g} >= -{tol:g}"
        if high < -tol:
            return "contradicted", f"a loss beyond -{tol:g}: 95% interval [{low:+.3g}, {high:+.3g}]"
        return nr, f"95% interval [{low:+.3g}, {high:+.3g}] reaches below -{tol:g} (MDD {mdd:.3g})"
    # not_better: no gain larger than the tolerance
    if high <= tol:
        return "reproduced", f"95% interval upper end {high:+.3g} <= +{tol:g}"
    if low > tol:
        return "contradicted", f"a gain above +{tol:g}: 95% interval [{low:+.3g}, {high:+.3g}]"
    return nr, f"95% interval [{low:+.3g}, {high:+.3g}] reaches above +{tol:g} (MDD {mdd:.3g})"


def source_text(c: Claim) -> str:
    """Where the claim's finding is stated: the seed paper's file and its own words, else the
    project's own question."""
    where = SEED_PAPERS.get(c.seed, f"seed {c.seed}") if c.seed else ""
    if not c.quote:
        return OWN_QUESTION + (
            f" ({where} does not state it)" if where else f" (after {c.paper}; no stored source text)"
        )
    return f'{where}: "{c.quote}"'


def claims_table(verdicts: list[Verdict]) -> pd.DataFrame:
    """The reproductions table (strings): claim, source, task, configuration vs comparison, the
    measured effect (better units) with its interval and test, the MDD, the tier's state, the
    verdict, and the claim's row evaluated with and without compression side by side."""
    rows = []
    fmt = lambda x: "-" if x != x else f"{x:.4g}"  # noqa: E731
    for v in verdicts:
        c = v.claim
        same_models = c.evaluation == "uncompressed_vs_compressed"
        evaluated = {
            "compressed": "",
            "uncompressed_vs_compressed": " evaluated without compression",
            "uncompressed": " evaluated without compression",
        }[c.evaluation]
        rows.append(
            {
                "claim": c.id,
                "paper": c.paper + (f" (seed {c.seed})" if c.seed else ""),
                "finding": f"{c.claim} [{source_text(c)}]",
                "task / tier": f"{c.task} / {c.tier}",
                "configuration": f"{c.entry_text}{evaluated}; measured {v.ratio}; ran {v.ran}",
                "vs": (
                    "the same models evaluated with compression"
                    if same_models
                    else c.compare_to + (" evaluated without compression" if c.evaluation == "uncompressed" else "")
                )
                + f"; measured {v.ratio_ref}; ran {v.ran_ref}",
                "seeds": f"{v.n} vs {v.n_ref}",
                "means": f"{v.metric} {fmt(v.mean)} vs {fmt(v.mean_ref)}",
                "effect (+ = better)": "-"
                if v.effect != v.effect
                else f"{v.effect:+.4f} [{v.low:+.4f}, {v.high:+.4f}]",
                "test": "-" if not v.test else f"{v.test}, p={v.p:.2g}",
                "MDD": fmt(v.mdd),
                "expected": c.expect
                + (f" (±{c.tolerance:g})" if c.tolerance else "")
                + (f" (by {c.min_effect:g} or more)" if c.min_effect else ""),
                "tier state": v.state.text(),
                "verdict": v.verdict,
                "why": v.why,
                "with / without compression at evaluation": f"{fmt(v.compressed)} / {fmt(v.uncompressed)}",
            }
        )
    return pd.DataFrame(rows)


def _tier_rows(frame: pd.DataFrame, tier: str) -> pd.DataFrame:
    """The maintainers' latest ok records of ``tier``."""
    rows = frame[(frame["tier"] == tier) & (frame["status"] == "ok")]
    if "latest" in rows:
        rows = rows[rows["latest"].astype(bool)]
    if "maintainers" in rows:
        rows = rows[rows["maintainers"].astype(bool) | (rows["entry"] == MAINTAINERS)]
    return rows


CURVE_COLUMNS = ["task", "setup", "compressor", "step", "metric", "seeds"]


def panel_title(task: str, setup: str) -> str:
    """The name of one (task, setup) panel of :func:`plateau_curves`, on the page and in the docs."""
    return f"{task}, {setup}" if setup else str(task)


def plateau_curves(frame: pd.DataFrame, tier: str = "plateau") -> pd.DataFrame:
    """Mean learning curves (over seeds) of the maintainers' rows of ``tier``: task, setup,
    compressor, step, metric (mean), seeds (how many seeds have that step). What the claims page
    plots. One curve per (task, setup, compressor): the same compressor in two setups (4 stages
    for 800 steps, 2 replicas for 600) is two experiments, never averaged into one."""
    rows = _with_curves(_tier_rows(frame, tier))
    if rows is None or rows.empty:
        return pd.DataFrame(columns=CURVE_COLUMNS)
    points = []
    setups = rows["setup"] if "setup" in rows else [""] * len(rows)
    for task, setup, comp, curve in zip(rows["task"], setups, rows["compressor"], rows.get("curve", [])):
        for p in curve if isinstance(curve, list) else []:
            if isinstance(p, dict) and isinstance(p.get("metric"), (int, float)):
                points.append(
                    {"task": task, "setup": setup, "compressor": comp, "step": p.get("step"), "metric": p["metric"]}
                )
    if not points:
        return pd.DataFrame(columns=CURVE_COLUMNS)
    df = pd.DataFrame(points)
    return (
        df.groupby(["task", "setup", "compressor", "step"])["metric"]
        .agg(["mean", "count"])
        .reset_index()
        .rename(columns={"mean": "metric", "count": "seeds"})
    )


EVALUATION_COLUMNS = ["task", "setup", "compressor", "seeds", "with compression", "without compression", "difference"]


def evaluation_means(frame: pd.DataFrame, tier: str = "plateau") -> pd.DataFrame:
    """Each maintainers' row of ``tier`` evaluated with and without compression, side by side
    (strings: mean ± sd over seeds, and the mean paired difference without minus with, in metric
    units), one line per (task, setup, compressor). A model trained through a stateful compressor
    (AQ-SGD) is meant to run uncompressed; evaluated with compression it sees first visits only, so
    the two columns can differ widely."""
    rows = _tier_rows(frame, tier)
    out = []
    fmt = lambda m, s: f"{m:.4g} ± {s:.2g}" if s == s else f"{m:.4g}"  # noqa: E731
    if "setup" not in rows:
        rows = rows.assign(setup="")
    for (task, setup, comp), g in rows.groupby(["task", "setup", "compressor"], sort=True):
        both = g[["final_metric", "final_metric_uncompressed"]].astype(float).dropna()
        if both.empty:
            continue
        w, wo = both["final_metric"], both["final_metric_uncompressed"]
        out.append(
            {
                "task": task,
                "setup": setup,
                "compressor": comp,
                "seeds": str(len(both)),
                "with compression": fmt(w.mean(), w.std()),
                "without compression": fmt(wo.mean(), wo.std()),
                "difference": f"{(wo - w).mean():+.4f}",
            }
        )
    return pd.DataFrame(out, columns=EVALUATION_COLUMNS)
