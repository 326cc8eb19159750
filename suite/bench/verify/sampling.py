"""Which cells a verification re-runs: rows of the board, drawn with a seed nobody chose in advance.

The unit is the board's row (:mod:`suite.results.entries`): every row with ``ok`` records gets one
re-run cell (a random seed of it), plus :data:`FRACTION` of the remaining cells. Every latest record
of a sampled row is then compared with the row's re-run (:mod:`.compare`), so a forged record cannot
sit unsampled inside a row that shows as verified. Rows are drawn from the same latest records the
board shows: a record superseded on the board is not what the verifier checks.
"""

from __future__ import annotations

import math
import random
from typing import Any

from suite.results.entries import RowKey, rows_of

__all__ = ["FRACTION", "sample_rows", "sample_records", "inclusion_probabilities"]

FRACTION = 0.1  # of the cells beyond one per row (docs/leaderboard.md: the detection table)


def sample_rows(
    records: list[dict[str, Any]], seed: int, fraction: float = FRACTION
) -> dict[RowKey, list[dict[str, Any]]]:
    """Row -> the records of it to re-run: one latest ``ok`` record of every row, plus
    ``ceil(fraction * rest)`` of the rest, drawn uniformly with ``random.Random(seed)``."""
    rows = rows_of(records, ok_only=True)
    rng = random.Random(seed)
    picked: dict[RowKey, list[dict[str, Any]]] = {}
    rest: list[tuple[RowKey, dict[str, Any]]] = []
    for key in sorted(rows):
        members = sorted((records[i] for i in rows[key]), key=lambda r: (r["cell_id"], r["record_id"]))
        i = rng.randrange(len(members))
        picked[key] = [members[i]]
        rest += [(key, r) for r in members[:i] + members[i + 1 :]]
    for key, r in rng.sample(rest, math.ceil(fraction * len(rest))):
        picked[key].append(r)
    return {k: sorted(v, key=lambda r: r["cell_id"]) for k, v in picked.items()}


def sample_records(records: list[dict[str, Any]], seed: int, fraction: float = FRACTION) -> list[dict[str, Any]]:
    """The cells :func:`sample_rows` re-runs, as one list sorted by cell id."""
    return sorted((r for rs in sample_rows(records, seed, fraction).values() for r in rs), key=lambda r: r["cell_id"])


def inclusion_probabilities(records: list[dict[str, Any]], fraction: float = FRACTION) -> dict[str, Any]:
    """What the sample gives a forger. Every row is re-run and every latest record of a re-run row
    is compared with that re-run, so a forged record is always compared; what the sample decides is
    whether the comparison is the exact one of its own re-run (probability ``1/g + (1 - 1/g) m / R``
    in a row of ``g`` cells, ``m`` of the ``R`` remaining drawn) or the seed-spread one."""
    sizes = [len(v) for v in rows_of(records, ok_only=True).values()]
    n, g = sum(sizes), len(sizes)
    rest = n - g
    m = math.ceil(fraction * rest)
    frac = m / rest if rest else 0.0
    p_min = min((1 / s + (1 - 1 / s) * frac for s in sizes), default=0.0)
    return {
        "cells": n,
        "rows": g,
        "sampled": g + m,
        "fraction_of_rest": fraction,
        "p_min": round(p_min, 4),
        "compared_with_a_rerun": "every latest ok record of every row",
    }
