"""This checkout's pytest settings: the mpcbench options' short spellings (``--tier``, ``--plugin``,
``--device``...) next to the plugin's ``--mpcbench-*`` ones, for ``pytest suite --tier quick``
and ``pytest tests/compressors/test_roundtrip.py --plugin FILE`` run from here. The plugin itself
registers only the prefixed spellings, so other projects' pytest sessions keep their own names."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    from suite.bench.pytest_plugin import add_short_aliases

    add_short_aliases(parser)
