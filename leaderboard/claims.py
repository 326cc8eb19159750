"""The seed papers' claims tested against the records: a verdict per claim.

    claims = load_claims()                 # leaderboard/claims.yaml
    verdicts = [judge(c, frame) for c in claims]
    claims_table(verdicts)                 # the reproductions page's table

Each claim names a published configuration (a matrix entry), the row it is compared with and
the expected direction. :func:`judge` takes the maintainers' latest ok records of both rows,
compares their final metric over seeds (paired by seed when both have the same seeds, Welch
otherwise; the same trained models with and without compression for
``uncompressed_vs_compressed``) and says:

- ``reproduced`` / ``contradicted``: the test (alpha 0.05) or the 95% interval of the
  difference decides in the claim's direction / against it;
- ``not resolvable at this tier``: neither, with the minimal detectable difference (MDD) of the
  comparison (the half-width of the 95% interval: the effect that just reaches p < 0.05 with
  this spread and these seeds), so a reader sees how large an effect the tier could show;
- ``not run``: fewer than 2 seeds of a side in the records.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from leaderboard.frame import MAINTAINERS
from leaderboard.statistics import paired_p, t_ppf, welch_p

__all__ = ["CLAIMS_PATH", "EXPECTS", "Claim", "Verdict", "load_claims", "judge", "claims_table"]

CLAIMS_PATH = Path(__file__).with_name("claims.yaml")
EXPECTS = ("better", "worse", "close", "not_better")
EVALUATIONS = ("compressed", "uncompressed_vs_compressed")
ALPHA = 0.05


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

    def __post_init__(self) -> None:
        if self.expect not in EXPECTS:
            raise ValueError(f"claim {self.id!r}: unknown expect {self.expect!r}; valid: {', '.join(EXPECTS)}")
        if self.evaluation not in EVALUATIONS:
            raise ValueError(
                f"claim {self.id!r}: unknown evaluation {self.evaluation!r}; valid: {', '.join(EVALUATIONS)}"
            )
        if self.expect in ("close", "not_better") and not (self.tolerance and self.tolerance > 0):
            raise ValueError(f"claim {self.id!r}: expect {self.expect} needs a positive tolerance (metric units)")

    @property
    def entry_text(self) -> str:
        """The matrix entry in one line."""
        if isinstance(self.entry, dict):
            return "{" + ", ".join(f"{k}: {v}" for k, v in self.entry.items()) + "}"
        return str(self.entry)


@dataclass(frozen=True)
class Verdict:
    """A claim's measured effect and verdict. ``effect``: mean of the claim's row minus the
    comparison's in "better" units (positive = better: higher accuracy, lower loss); ``low``,
    ``high``: its 95% interval; ``test``: ``"paired by seed"`` / ``"Welch"``."""

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
        out.append(Claim(**{k: (float(v) if k == "tolerance" else v) for k, v in c.items()}))
    return out


def _seed_values(frame: pd.DataFrame, c: Claim, compressor: str, column: str) -> dict[int, float]:
    """{seed: value} of the maintainers' latest ok records of one row."""
    rows = frame[
        (frame["task"] == c.task)
        & (frame["tier"] == c.tier)
        & (frame["compressor"] == compressor)
        & (frame["status"] == "ok")
        & frame["latest"]
    ]
    if "maintainers" in rows:
        rows = rows[rows["maintainers"].astype(bool) | (rows["entry"] == MAINTAINERS)]
    return {int(s): float(v) for s, v in zip(rows["seed"], rows[column]) if v == v}


def judge(c: Claim, frame: pd.DataFrame) -> Verdict:
    """The claim's verdict from ``frame`` (one row per record: :func:`leaderboard.frame.to_frame`)."""
    sub = frame[(frame["task"] == c.task) & (frame["tier"] == c.tier)]
    metric = next((m for m in sub.get("metric_name", []) if m), "metric")
    hib = bool(sub["higher_is_better"].iloc[0]) if len(sub) else True
    sign = 1.0 if hib else -1.0
    if c.evaluation == "uncompressed_vs_compressed":
        a = _seed_values(sub, c, c.compressor, "final_metric_uncompressed")
        b = _seed_values(sub, c, c.compare_to, "final_metric")
    else:
        a = _seed_values(sub, c, c.compressor, "final_metric")
        b = _seed_values(sub, c, c.compare_to, "final_metric")
    nan = math.nan
    if len(a) < 2 or len(b) < 2:
        why = f"{len(a)} seed(s) of {c.compressor}, {len(b)} of {c.compare_to} in the records (2 or more each needed)"
        return Verdict(c, metric, len(a), len(b), nan, nan, nan, nan, nan, nan, "", nan, "not run", why)
    ma, mb = sum(a.values()) / len(a), sum(b.values()) / len(b)
    effect = sign * (ma - mb)
    va = sum((x - ma) ** 2 for x in a.values()) / (len(a) - 1)
    vb = sum((x - mb) ** 2 for x in b.values()) / (len(b) - 1)
    if set(a) == set(b):
        seeds = sorted(a)
        d = [a[k] - b[k] for k in seeds]
        md = sum(d) / len(d)
        sd = math.sqrt(sum((x - md) ** 2 for x in d) / (len(d) - 1))
        se, df = sd / math.sqrt(len(d)), len(d) - 1
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
    low, high = effect - half, effect + half
    mdd = half  # the effect that just reaches p < 0.05 with this spread and these seeds (power 0.5)
    verdict, why = _decide(c, effect, low, high, p, mdd)
    return Verdict(c, metric, len(a), len(b), ma, mb, effect, low, high, p, test, mdd, verdict, why)


def _decide(c: Claim, effect: float, low: float, high: float, p: float, mdd: float) -> tuple[str, str]:
    """(verdict, reason) from the effect (better units), its 95% interval and the test."""
    sig = p == p and p < ALPHA
    nr = "not resolvable at this tier"
    if c.expect in ("better", "worse"):
        want = 1.0 if c.expect == "better" else -1.0
        if sig and effect * want > 0:
            return "reproduced", f"{c.expect} at p={p:.2g}"
        if sig:
            return "contradicted", f"the opposite direction at p={p:.2g}"
        return nr, f"p={p:.2g}: |effect| below the MDD {mdd:.3g} at these seeds" if mdd == mdd else f"p={p:.2g}"
    tol = float(c.tolerance or 0.0)
    if c.expect == "close":
        if -tol <= low and high <= tol:
            return "reproduced", f"95% interval [{low:+.3g}, {high:+.3g}] within ±{tol:g}"
        if low > tol or high < -tol:
            return "contradicted", f"95% interval [{low:+.3g}, {high:+.3g}] outside ±{tol:g}"
        return nr, f"95% interval [{low:+.3g}, {high:+.3g}] wider than ±{tol:g} can decide (MDD {mdd:.3g})"
    # not_better: no gain larger than the tolerance
    if high <= tol:
        return "reproduced", f"95% interval upper end {high:+.3g} <= +{tol:g}"
    if low > tol:
        return "contradicted", f"a gain above +{tol:g}: 95% interval [{low:+.3g}, {high:+.3g}]"
    return nr, f"95% interval [{low:+.3g}, {high:+.3g}] reaches above +{tol:g} (MDD {mdd:.3g})"


def claims_table(verdicts: list[Verdict]) -> pd.DataFrame:
    """The reproductions table (strings): claim, paper, task, configuration vs comparison, the
    measured effect (better units) with its interval and test, the MDD, and the verdict."""
    rows = []
    for v in verdicts:
        c = v.claim
        same_models = c.evaluation == "uncompressed_vs_compressed"
        fmt = lambda x: "-" if x != x else f"{x:.4g}"  # noqa: E731
        rows.append(
            {
                "claim": c.id,
                "paper": c.paper,
                "finding": c.claim,
                "task / tier": f"{c.task} / {c.tier}",
                "configuration": c.entry_text + (" evaluated without compression" if same_models else ""),
                "vs": "the same models evaluated with compression" if same_models else c.compare_to,
                "seeds": f"{v.n} vs {v.n_ref}",
                "means": f"{v.metric} {fmt(v.mean)} vs {fmt(v.mean_ref)}",
                "effect (+ = better)": "-"
                if v.effect != v.effect
                else f"{v.effect:+.4f} [{v.low:+.4f}, {v.high:+.4f}]",
                "test": "-" if not v.test else f"{v.test}, p={v.p:.2g}",
                "MDD": fmt(v.mdd),
                "expected": c.expect + (f" (±{c.tolerance:g})" if c.tolerance else ""),
                "verdict": v.verdict,
                "why": v.why,
            }
        )
    return pd.DataFrame(rows)
