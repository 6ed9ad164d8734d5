"""The developer tools under ``tools/`` (not in the wheel: tests/test_package.py): their doctests run here, as the
package's doctest collection does not reach them."""

from __future__ import annotations

import doctest
import importlib

import pytest

TOOLS = ["tools.conformance", "tools.conformance_plugin", "tools.coverage", "tools.coverage_table", "tools.demo"]


@pytest.mark.parametrize("name", TOOLS)
def test_doctests(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
    assert result.attempted > 0
