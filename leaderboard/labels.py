"""Point labels that never overprint: a greedy placement in pixel space with leader lines.

Charts draw each label at a position in *data* units, so this module maps points to pixels
with the chart's own scales (log or linear, fixed domain, fixed size), tries candidate
offsets around each point and keeps the first whose box overlaps no label placed before it
(and no point). When every nearby candidate collides, the label moves further out along a
ring and gets a leader line back to its point (``leader`` = True).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["Scale", "Placement", "place_labels", "CHAR_PX", "LINE_PX"]

CHAR_PX = 6.6  # average width of an 11 px sans-serif character
LINE_PX = 13.0  # height of one line of 11 px text


@dataclass(frozen=True)
class Scale:
    """A chart axis: data domain (lo, hi), pixel length, log or linear, reversed (pixels grow
    the other way: a y axis grows downwards on screen, so an unreversed y has ``flip``)."""

    lo: float
    hi: float
    px: float
    log: bool = False
    flip: bool = False

    def _t(self, v: float) -> float:
        return math.log10(v) if self.log else v

    def to_px(self, v: float) -> float:
        a, b = self._t(self.lo), self._t(self.hi)
        f = (self._t(v) - a) / (b - a) if b != a else 0.5
        return (1 - f if self.flip else f) * self.px

    def to_data(self, p: float) -> float:
        a, b = self._t(self.lo), self._t(self.hi)
        f = p / self.px
        f = 1 - f if self.flip else f
        t = a + f * (b - a)
        return 10**t if self.log else t


@dataclass(frozen=True)
class Placement:
    """Where a label goes: its anchor in data units (left-aligned text, baseline-centred),
    its box in pixels (x0, y0, x1, y1) and whether it needs a leader line."""

    x: float
    y: float
    box: tuple[float, float, float, float]
    leader: bool


def _overlaps(a: tuple[float, float, float, float], b: tuple[float, float, float, float], pad: float = 2.0) -> bool:
    return a[0] < b[2] + pad and b[0] < a[2] + pad and a[1] < b[3] + pad and b[1] < a[3] + pad


def place_labels(xs: list[float], ys: list[float], texts: list[str], sx: Scale, sy: Scale) -> list[Placement]:
    """A non-overlapping place for every label (points in the given order, usually most
    important first). Boxes are estimated from the text length (:data:`CHAR_PX`)."""
    pts = [(sx.to_px(x), sy.to_px(y)) for x, y in zip(xs, ys)]
    dots = [(px - 4, py - 4, px + 4, py + 4) for px, py in pts]
    placed: list[tuple[float, float, float, float]] = []
    out = []
    for (px, py), text in zip(pts, texts):
        w, h = CHAR_PX * len(text), LINE_PX
        best = None
        for ring, leader in ((10, False), (26, True), (44, True), (64, True), (90, True), (120, True)):
            for ang in range(0, 360, 30):
                # candidate: box left edge or right edge at the ring, vertically centred on the ray
                cx = px + ring * math.cos(math.radians(ang))
                cy = py - ring * math.sin(math.radians(ang))
                x0 = cx if math.cos(math.radians(ang)) >= -1e-9 else cx - w
                box = (x0, cy - h / 2, x0 + w, cy + h / 2)
                inside = box[0] >= 0 and box[2] <= sx.px and box[1] >= 0 and box[3] <= sy.px
                if not inside or any(_overlaps(box, b) for b in placed) or any(_overlaps(box, d, 0) for d in dots):
                    continue
                best = (box, leader)
                break
            if best:
                break
        if best is None:  # crowded beyond every ring: stack below the lowest label
            y0 = max((b[3] for b in placed), default=py) + 2
            best = ((px + 10, y0, px + 10 + w, y0 + h), True)
        box, leader = best
        placed.append(box)
        out.append(Placement(sx.to_data(box[0]), sy.to_data((box[1] + box[3]) / 2), box, leader))
    return out
