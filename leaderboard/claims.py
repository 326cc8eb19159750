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
- **plateau**: the uncompressed baseline's mean change over the last quarter of its curve (the
  metric at the last evaluation minus the metric interpolated at three quarters of the steps,
  in "better" units) must be within ± the comparison's MDD (or a close claim's tolerance when
  smaller): still rising, more training could move the verdict: ``not testable at this tier``;
  falling back, the run is past its best and the final metric depends on when it stopped, so the
  comparison is decided again at the baseline's best evaluation (its seed-mean curve's best step,
  chosen from the baseline alone): the same verdict there and at the end stands, and the state
  says so; a different one is ``not testable at this tier``;

then decides (alpha 0.05, the 95% interval of the effect in "better" units):

- ``reproduced``: a ``better``/``worse`` effect in the claimed direction at p < 0.05; a
  ``close`` claim's interval within ±tolerance; a ``not_better`` claim's upper end below +tolerance;
- ``contradicted``: a significant effect against the claimed direction; a ``close`` claim's
  interval entirely outside ±tolerance; a ``not_better`` claim's lower end above +tolerance;
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
    "EXPECTS",
    "EVALUATIONS",
    "COLUMNS",
    "VERDICTS",
    "NOT_TESTABLE",
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
EXPECTS = ("better", "worse", "close", "not_better", "not_worse", "stated")
# what a claim may compare besides the final metric: the column, and whether lower is better
COLUMNS = {"final_metric": None, "compress_s": "lower"}  # None: the task metric's own direction
EVALUATIONS = ("compressed", "uncompressed_vs_compressed", "uncompressed")
ALPHA = 0.05
NOT_TESTABLE = "not testable at this tier"
NOT_RESOLVABLE = "not resolvable at this tier"
VERDICTS = (
    "reproduced",
    "contradicted",
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

    @property
    def entry_text(self) -> str:
        """The matrix entry in one line."""
        if isinstance(self.entry, dict):
            return "{" + ", ".join(f"{k}: {v}" for k, v in self.entry.items()) + "}"
        return str(self.entry)


@dataclass(frozen=True)
class TierState:
    """What the tier can establish for one claim. ``plateaued``: the baseline's mean last-quarter
    change ``gain`` is within ± ``gain_limit`` (the comparison's MDD, or a close claim's tolerance); None when the curve is too
    short to tell. ``floor``: both sides within the MDD of the trivial predictor ``trivial``.
    ``same_machine``: both sides ran on one machine class. ``narrow``: the tier trains narrowed
    CPU models."""

    plateaued: bool | None = None
    gain: float = math.nan
    gain_limit: float = math.nan
    baseline: str = ""
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
    # a baseline past its best (falling back over the last quarter): the step of its best
    # evaluation, and whether the verdict there equals the verdict at the end (None: not checked)
    best_step: float = math.nan
    holds_at_best: bool | None = None

    def text(self) -> str:
        """One line: plateaued or not, floor or not, same machine class or not."""
        if self.seeds < 2:
            base = (
                f"; the baseline {self.baseline} changes by {self.gain:+.3g} over its last quarter"
                if self.baseline and self.gain == self.gain
                else ""
            )
            machine = (
                ""
                if self.same_machine is None
                else ("; same machine class" if self.same_machine else "; different machine classes")
            )
            return f"not judged ({self.seeds} seed(s) on a side){base}{machine}"
        if self.timing:
            plateau = "a timing claim (plateau and floor do not apply)"
        elif self.plateaued is None:
            plateau = "plateau unknown (the baseline's curve has fewer than 2 evaluations)"
        else:
            plateau = ("plateaued" if self.plateaued else "not plateaued") + (
                f" ({self.baseline} changes by {self.gain:+.3g} over its last quarter; limit ±{self.gain_limit:.3g})"
            )
            if self.holds_at_best is not None:
                plateau += f"; past its best: the verdict at its best evaluation (step {self.best_step:g}) " + (
                    "is the same" if self.holds_at_best else "differs"
                )
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
    (means over its seeds), side by side."""

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
        out.append(Claim(**{k: (float(v) if k in ("tolerance", "min_effect") else v) for k, v in c.items()}))
    return out


# --------------------------------------------------------------------------- the records of a claim
def _ok_rows(frame: pd.DataFrame, c: Claim, compressor: str) -> pd.DataFrame:
    """The maintainers' latest ok records of one row of the claim's task and tier."""
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
    for word in (w.strip() for w in (c.setup or "").split(",") if w.strip()):
        keep = [word in [x.strip() for x in str(s).split(",")] for s in rows["setup"]]
        rows = rows.loc[pd.Series(keep, index=rows.index, dtype=bool)]
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


def _values_at(rows: pd.DataFrame, key: str, step: float) -> dict[int, float]:
    """Per seed, the curve's ``key`` (``metric`` or ``metric_uncompressed``) at evaluation ``step``."""
    rows = _with_curves(rows)
    if rows is None:
        return {}
    out: dict[int, float] = {}
    for seed, curve in zip(rows["seed"], rows["curve"]):
        for p in curve if isinstance(curve, list) else []:
            v = p.get(key) if isinstance(p, dict) and p.get("step") == step else None
            if isinstance(v, (int, float)) and v == v:
                out[int(seed)] = float(v)
    return out


def _best_step(curves: list[list[tuple[float, float]]], sign: float) -> float:
    """The evaluation step where the mean of ``curves`` (over the curves evaluated there, all of
    them) is best; NaN when they share no step."""
    common = set.intersection(*(set(s for s, _ in pts) for pts in curves)) if curves else set()
    if not common:
        return math.nan
    by_step = [dict(pts) for pts in curves]
    means = {st: sum(c[st] for c in by_step) / len(by_step) for st in common}
    return max(sorted(means), key=lambda st: sign * means[st])


def _curves(rows: pd.DataFrame) -> list[list[tuple[float, float]]]:
    """Each record's curve as (step, metric) points (the details are read back when the rows are
    an index's light rows)."""
    rows = _with_curves(rows)
    if rows is None:
        return []
    out = []
    for curve in rows["curve"]:
        pts = []
        for p in curve if isinstance(curve, list) else []:
            if (
                isinstance(p, dict)
                and isinstance(p.get("step"), (int, float))
                and isinstance(p.get("metric"), (int, float))
            ):
                if p["metric"] == p["metric"]:
                    pts.append((float(p["step"]), float(p["metric"])))
        if pts:
            out.append(sorted(pts))
    return out


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
    ref = (
        arm if c.evaluation == "uncompressed_vs_compressed" else _pick(_ok_rows(frame, c, c.compare_to), setup, machine)
    )
    col_a = "final_metric_uncompressed" if c.evaluation != "compressed" else "final_metric"
    col_b = "final_metric_uncompressed" if c.evaluation == "uncompressed" else "final_metric"
    timing = c.column != "final_metric"
    if timing:  # seconds per step: lower is better; no floor or plateau applies
        col_a = col_b = c.column
        metric, hib, sign, trivial = c.column, COLUMNS[c.column] != "lower", -1.0, math.nan
    a, b = _values(arm, col_a), _values(ref, col_b)
    compressed = sum(_values(arm, "final_metric").values()) / max(1, len(_values(arm, "final_metric")))
    uncomp = _values(arm, "final_metric_uncompressed")
    uncompressed = sum(uncomp.values()) / len(uncomp) if uncomp else nan
    if not len(arm):
        compressed = nan
    machines = tuple(sorted(set(arm["machine"]) | set(ref["machine"])))
    same_machine = (len(machines) == 1) if (len(arm) and len(ref)) else None
    # the baseline's curve: the uncompressed row of the same setup and machine class, else the comparison
    base_rows = _pick(_ok_rows(frame, c, BASELINE), setup, machine)
    base_name = BASELINE
    if len(base_rows) < 2 and len(ref) >= 2:
        base_rows, base_name = ref, c.compare_to
    gains = [] if timing else [g for g in (last_quarter_gain(pts, hib) for pts in _curves(base_rows)) if g == g]
    gain = sum(gains) / len(gains) if gains else nan
    state = TierState(
        gain=gain,
        baseline=base_name if gains else "",
        trivial=trivial,
        same_machine=same_machine,
        machines=machines,
        setup=setup or "",
        narrow=c.tier in NARROW_TIERS,
        timing=timing,
        seeds=min(len(a), len(b)),
        designed_seeds=tier_seeds(c.tier),
    )
    if len(a) < 2 or len(b) < 2:
        if not len(arm) or not len(ref):
            why = f"no records at this tier ({c.compressor if not len(arm) else c.compare_to})"
        else:
            why = (
                f"{len(a)} seed(s) of {c.compressor}, {len(b)} of {c.compare_to} in the records (2 or more each needed)"
            )
        return Verdict(c, metric, len(a), len(b), nan, nan, nan, nan, nan, nan, "", nan, NOT_TESTABLE, why, state,
                       compressed, uncompressed)  # fmt: skip
    pair = set(a) == set(b) and same_machine is True
    diff, half, p, _df, test = _compare(a, b, pair)
    if not pair:
        test += " (different machine classes: no pairing)" if same_machine is False else " (different seeds)"
    ma, mb = sum(a.values()) / len(a), sum(b.values()) / len(b)
    effect = sign * diff
    low, high = effect - half, effect + half
    mdd = half  # the effect that just reaches p < 0.05 with this spread and these seeds (power 0.5)
    # the limit: the comparison's MDD, or a close claim's tolerance when smaller (a baseline still
    # moving by more than the tolerance can neither show closeness nor rule it out)
    limit = min(mdd, float(c.tolerance)) if c.tolerance else mdd
    plateaued = None if not gains else bool(abs(gain) <= limit)  # rising or falling back: no plateau
    floor = trivial == trivial and all(sign * (m - trivial) <= mdd for m in (ma, mb))
    # the same state as above, with what only a comparison can say
    state = replace(state, plateaued=plateaued, gain_limit=limit, baseline=base_name, floor=floor)

    def verdict(v: str, why: str) -> Verdict:
        return Verdict(c, metric, len(a), len(b), ma, mb, effect, low, high, p, test, mdd, v, why, state,
                       compressed, uncompressed)  # fmt: skip

    if c.expect == "stated":
        # no direction to withhold: the effect is shown with the tier's state on its line
        return verdict(*_decide(c, effect, low, high, p, mdd))
    if floor:
        return verdict(NOT_TESTABLE, f"both sides at the trivial predictor ({trivial:g}, within the MDD {mdd:.3g})")
    if plateaued is False and gain < 0:
        # past its best: the final metric depends on when training stopped. The claims are about
        # the trained model, so judge again at the baseline's best evaluation (chosen from the
        # baseline's curve alone, never from the comparison); a verdict that is the same there and
        # at the end does not hang on the stopping time. A still-rising baseline gets no such
        # check: no evaluation says what more steps would do.
        step = _best_step(_curves(base_rows), sign)
        key = {"final_metric": "metric", "final_metric_uncompressed": "metric_uncompressed"}
        a2, b2 = _values_at(arm, key[col_a], step), _values_at(ref, key[col_b], step)
        if step == step and len(a2) >= 2 and len(b2) >= 2 and set(a2) == set(a) and set(b2) == set(b):
            d2, h2, p2, _df2, _t2 = _compare(a2, b2, pair)
            v2, why2 = _decide(c, sign * d2, sign * d2 - h2, sign * d2 + h2, p2, h2)
            v_end, why_end = _decide(c, effect, low, high, p, mdd)
            same = v2 == v_end and v_end != NOT_RESOLVABLE
            state = replace(state, best_step=step, holds_at_best=same)
            if same:
                return verdict(v_end, f"{why_end}; at {base_name}'s best evaluation (step {step:g}) too: {why2}")
            return verdict(
                NOT_TESTABLE,
                f"the baseline ({base_name}) falls back by {abs(gain):.3g} over the last quarter of training (past "
                f"its best): at its best evaluation (step {step:g}) the comparison reads {v2}, at the end {v_end}",
            )
    if plateaued is False:
        moves = "still gains" if gain > 0 else "falls back by"
        return verdict(
            NOT_TESTABLE,
            f"the baseline ({base_name}) {moves} {abs(gain):.3g} over the last quarter of training, more than "
            + (f"the tolerance {c.tolerance:g}" if limit < mdd else f"the MDD {mdd:.3g}")
            + (": more steps could change the verdict" if gain > 0 else ": it is past its best (over-fitting)"),
        )
    v, why = _decide(c, effect, low, high, p, mdd)
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
                "finding": c.claim,
                "task / tier": f"{c.task} / {c.tier}",
                "configuration": c.entry_text + evaluated,
                "vs": "the same models evaluated with compression"
                if same_models
                else c.compare_to + (" evaluated without compression" if c.evaluation == "uncompressed" else ""),
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
