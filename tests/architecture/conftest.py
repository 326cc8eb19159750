"""The type check runs beside the rest of the test session, not in front of it.

mypy takes about a minute of CPU cold (most of it reading torch's annotations). Once the session's
tests are known, and when the packages' type check is one of them, its mypy starts in the background
(``test_types.start_in_background``) and the two type tests move to the end of the session: the
packages' check collects the result, then the contracts' check runs on the warm cache. On a machine
with a second core the rest of the suite runs meanwhile; the check itself is the same.
"""

from __future__ import annotations

import pytest

PACKAGES_CHECK = "test_types.py::test_the_packages_type_check"


@pytest.hookimpl(trylast=True)  # after -k / -m deselection
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    typed = [i for i in items if i.nodeid.split("/")[-1].startswith("test_types.py::")]
    check = next((i for i in typed if i.nodeid.endswith(PACKAGES_CHECK)), None)
    if check is None or len(typed) == len(items) or config.getoption("collectonly"):
        return  # nothing else to overlap with
    items[:] = [i for i in items if i not in typed] + sorted(typed, key=lambda i: i is not check)
    check.module.start_in_background()  # type: ignore[attr-defined]


def pytest_sessionfinish(session: pytest.Session) -> None:
    for item in session.items:
        if item.nodeid.endswith(PACKAGES_CHECK):
            item.module.stop_background()  # type: ignore[attr-defined]  # an aborted session (-x) leaves no mypy
            return
