"""Built-in compressors, one family per module. Importing this package registers them all."""

from . import (  # noqa: F401 (imported to register the built-ins)
    aqsgd,
    autoencoder,
    baseline,
    dgc,
    error_feedback,
    floats,
    powersgd,
    quantization,
    sparsification,
    subspace,
)

__all__ = [
    "baseline",
    "floats",
    "powersgd",
    "quantization",
    "sparsification",
    "aqsgd",
    "autoencoder",
    "error_feedback",
    "dgc",
    "subspace",
]
