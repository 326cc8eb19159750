"""Built-in compressors, one family per module. Importing this package registers them all."""

from . import baseline, floats, powersgd, quantization, sparsification  # noqa: F401
from . import aqsgd, autoencoder, error_feedback, subspace  # noqa: F401

__all__ = ["baseline", "floats", "powersgd", "quantization", "sparsification", "aqsgd", "autoencoder", "error_feedback", "subspace"]
