"""The developer tools under ``tools/``: not in the wheel, and their doctests run (the package's doctest collection
no longer reaches them)."""

from __future__ import annotations

import doctest
import importlib
import sys
from pathlib import Path

import pytest
import setuptools

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ["tools.conformance", "tools.conformance_plugin", "tools.coverage_table", "tools.demo"]


@pytest.mark.parametrize("name", TOOLS)
def test_doctests(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
    assert result.attempted > 0


def test_the_wheel_has_the_package_and_no_tools() -> None:
    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    # pyproject's package discovery (namespace packages, setuptools' default there) over the repository root
    packages = setuptools.find_namespace_packages(
        where=str(ROOT), include=find["include"], exclude=find.get("exclude", ())
    )
    assert "torchmetrics_async.testing" in packages
    assert all(name == "torchmetrics_async" or name.startswith("torchmetrics_async.") for name in packages)
