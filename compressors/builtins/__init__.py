"""Built-in compressors, one family per module. Importing this package registers them all."""

from . import baseline, floats  # noqa: F401

__all__ = ["baseline", "floats"]
