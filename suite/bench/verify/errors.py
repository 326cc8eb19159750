"""The verifier's one error type."""

from __future__ import annotations

__all__ = ["VerifyError"]


class VerifyError(RuntimeError):
    """The entry or cell cannot be verified (one line)."""
