"""Built-in compressors, one family per module. Importing this package registers them all."""

from . import aqsgd, autoencoder, baseline, error_feedback, floats, powersgd, quantization, sparsification, subspace  # noqa: F401 (imported to register the built-ins)

__all__ = [
    "baseline",
    "floats",
    "powersgd",
    "quantization",
    "sparsification",
    "aqsgd",
    "autoencoder",
    "error_feedback",
    "subspace",
]
