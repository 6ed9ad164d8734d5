"""What the distribution ships: the package (and nothing of tools/, tests/ or benchmarks/) and its version."""

from __future__ import annotations

import sys
from pathlib import Path

import setuptools

import torchmetrics_async

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_version_is_pyprojects() -> None:
    assert torchmetrics_async.__version__ == PYPROJECT["project"]["version"]


def test_the_wheel_has_the_package_and_no_tools() -> None:
    find = PYPROJECT["tool"]["setuptools"]["packages"]["find"]
    # pyproject's package discovery (namespace packages, setuptools' default there) over the repository root
    packages = setuptools.find_namespace_packages(
        where=str(ROOT), include=find["include"], exclude=find.get("exclude", ())
    )
    assert "torchmetrics_async.testing" in packages
    assert all(name == "torchmetrics_async" or name.startswith("torchmetrics_async.") for name in packages)
