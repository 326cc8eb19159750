"""Short display names of compressors: what the page's and the report's ``compressor`` column shows.

A record's ``compressor`` is the spec as the user typed it (``topk``, ``ef(topk)``,
``fwd=ae,bwd=none``, ``none|tp=quant``); its full resolved spec (every parameter spelled out)
stays in the ``spec`` column and on hover. A built-in's label is in :data:`BUILTIN_LABELS` (its
default setting, in words); a plugin declares its own as a class attribute ``label`` (the
runner records the name it gives in the record's ``display``, which the board shows as it is). A piece the tables do not know,
or one written with parameters (``topk(ratio=0.01)``), is shown as typed. Torch-free: the report
and the page never import the compressors.
"""

from __future__ import annotations

import re
from typing import Mapping

__all__ = ["BUILTIN_LABELS", "display_name"]

# every built-in compressor at its default setting (tests/leaderboard/test_names.py keeps this complete)
BUILTIN_LABELS = {
    "none": "none",
    "fp16": "fp16",
    "bf16": "bf16",
    "fp8": "fp8",
    "quant": "int8",
    "qsgd": "QSGD",
    "aqsgd": "AQ-SGD 4-bit",
    "topk": "top-k 10%",
    "randomk": "random-k 10%",
    "threshold": "threshold 1%",
    "dgc": "DGC 0.1%",
    "powersgd": "PowerSGD r4",
    "ae": "autoencoder 1/8",
    "subspace": "subspace",
    "ef": "EF",
    "ef21": "EF21",
}
_BARE = re.compile(r"[A-Za-z_]\w*")
_WRAPPED = re.compile(r"([A-Za-z_]\w*)\(([A-Za-z_]\w*)\)")


def _pieces(spec: str) -> list[str]:
    """``spec`` split at top-level ``,`` and ``|`` (separators kept), never inside parentheses."""
    out, depth, cur = [], 0, ""
    for ch in spec:
        depth += ch == "("
        depth -= ch == ")"
        if ch in ",|" and depth == 0:
            out += [cur, ch]
            cur = ""
        else:
            cur += ch
    return [*out, cur]


def _one(value: str, labels: dict[str, str]) -> str:
    if _BARE.fullmatch(value):
        return labels.get(value, value)
    if m := _WRAPPED.fullmatch(value):  # a wrapper around a default inner compressor: ef(topk)
        return f"{labels.get(m[1], m[1])}({labels.get(m[2], m[2])})"
    return value


def display_name(compressor: str, labels: Mapping[str, str] | None = None) -> str:
    """The short name of a row: ``compressor`` (the spec as typed) with each compressor at its default
    setting replaced by its label (``labels``, a plugin's declared ones, before :data:`BUILTIN_LABELS`):
    ``ef(topk)`` -> ``EF(top-k 10%)``, ``fwd=ae,bwd=none`` -> ``fwd=autoencoder 1/8,bwd=none``."""
    known = {**BUILTIN_LABELS, **(labels or {})}
    out = []
    for piece in _pieces(compressor):
        # "fwd=ae": a direction and its spec; "topk(ratio=0.1)": its "=" is a parameter's
        key, eq, value = piece.partition("=") if "=" in piece.split("(", 1)[0] else ("", "", piece)
        out.append(f"{key}{eq}{_one(value.strip(), known)}" if piece not in (",", "|") else piece)
    return "".join(out)
