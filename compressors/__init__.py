"""mpcbench compressors: the plugin API, the registry and the built-in library.

Write a plugin by subclassing :class:`Compressor` and decorating it with
``@register("name")``; see ``docs/writing-a-compressor.md``.
"""

from .api import (
    Compressor,
    CompressorError,
    Payload,
    TensorInfo,
    TensorRole,
    chain,
    check_finite,
    completed,
    payload_nbytes,
)
from .registry import (
    ENTRY_POINT_GROUP,
    available,
    build,
    canonical_spec,
    check_choice,
    check_range,
    describe,
    discover,
    get_class,
    load_plugin,
    parse_spec,
    plugin_errors,
    register,
    source_hash,
)

__all__ = [
    "Compressor",
    "CompressorError",
    "Payload",
    "TensorInfo",
    "TensorRole",
    "chain",
    "completed",
    "check_finite",
    "payload_nbytes",
    "ENTRY_POINT_GROUP",
    "available",
    "build",
    "canonical_spec",
    "check_choice",
    "check_range",
    "describe",
    "discover",
    "get_class",
    "load_plugin",
    "parse_spec",
    "plugin_errors",
    "register",
    "source_hash",
]
