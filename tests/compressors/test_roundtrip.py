"""The generic compressor contract (``compressors/contract.py``) over the registry.

Every name in ``compressors.available()`` at collection time is tested (built-ins and
installed plugins), so a newly registered plugin is covered without editing a list;
``--plugin my_comp.py`` tests only that plugin's compressors and ``--compressor SPEC`` only
those specs (``mpcbench check`` runs the same tests).
"""

from __future__ import annotations

import compressors
from compressors.contract import *  # noqa: F401,F403 - the contract's tests, fixture and parametrization hook


def test_registry_lists_the_builtins():
    expected = {"none", "fp16", "bf16", "fp8", "quant", "qsgd", "topk", "randomk", "threshold", "powersgd"}
    assert expected <= set(compressors.available())
