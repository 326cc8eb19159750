"""Errors a run refuses or ends with. Messages are one line and name the offender (field, rank or stage)."""

from __future__ import annotations

__all__ = ["ConfigError", "RunError", "RunTimeout"]


class ConfigError(ValueError):
    """A cell configuration is invalid; the message names the field and the fix."""


class RunError(RuntimeError):
    """A training run failed (a rank crashed, a compressor raised, a peer stalled)."""


class RunTimeout(RunError):
    """A training run exceeded its wall-clock limit (``CellConfig.time_limit_s``)."""
