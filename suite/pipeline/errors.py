"""Errors a run ends with. Messages are one line and name the failing rank or stage."""

from __future__ import annotations

__all__ = ["RunError", "RunTimeout"]


class RunError(RuntimeError):
    """A training run failed (a rank crashed, a compressor raised, a peer stalled)."""


class RunTimeout(RunError):
    """A training run exceeded its wall-clock limit (``CellConfig.time_limit_s``)."""
