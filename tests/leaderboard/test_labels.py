"""Pareto labels never overprint: every placed box is disjoint from the others."""

from __future__ import annotations

import random

from leaderboard.labels import Scale, place_labels


def _disjoint(a, b) -> bool:
    return a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1]


def test_close_points_get_disjoint_labels_inside_the_plot():
    # the case: hadamard4 / subspace and fp16 / bf16 sit almost on top of each other
    xs = [1e6, 1.02e6, 5e5, 5.1e5, 2e5, 8e6]
    ys = [0.35, 0.351, 0.30, 0.301, 0.2, 0.36]
    texts = ["hadamard4", "subspace", "fp16", "bf16", "topk(ratio=0.01)", "none"]
    sx, sy = Scale(1e5, 1e7, 860, log=True), Scale(0.15, 0.4, 400, flip=True)
    places = place_labels(xs, ys, texts, sx, sy)
    boxes = [p.box for p in places]
    assert all(_disjoint(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1 :])
    assert all(0 <= b[0] and b[2] <= 860 and 0 <= b[1] and b[3] <= 400 for b in boxes)
    # the data anchor maps back to the box (left edge, vertical middle)
    for p in places:
        assert abs(sx.to_px(p.x) - p.box[0]) < 1e-6 and abs(sy.to_px(p.y) - (p.box[1] + p.box[3]) / 2) < 1e-6


def test_a_crowded_cluster_still_does_not_overlap():
    rng = random.Random(0)
    xs = [1e6 * (1 + rng.random() * 0.05) for _ in range(25)]
    ys = [0.3 + rng.random() * 0.01 for _ in range(25)]
    places = place_labels(
        xs, ys, [f"compressor-{i}" for i in range(25)], Scale(1e5, 1e7, 860, log=True), Scale(0.2, 0.4, 400, flip=True)
    )
    boxes = [p.box for p in places]
    assert all(_disjoint(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1 :])
    assert any(p.leader for p in places)  # the far ones point back with a leader line
