"""What the distribution ships: the package (and nothing of tools/, tests/ or benchmarks/), its version, and messages
that name only what a user has."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest
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


# What a user of the wheel does not have: the repository's tools, tests, scripts and benchmarks, and the distribution
# itself on a package index (it is installed from its source: pip install .).
UNPUBLISHED = re.compile(r"\btools\.|\b(?:tools|tests|scripts|benchmarks|docs)/|\btests\.|torchmetrics[-_]async\[")
PIP_INSTALL = re.compile(r"pip install '?([A-Za-z0-9_.-]+)")


def _messages(path: Path) -> list[tuple[int, str]]:
    """The string literals of ``path`` that are not docstrings (f-strings by their literal parts), with their lines."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            text = "".join(part.value for part in node.values if isinstance(part, ast.Constant))
            found.append((node.lineno, text))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            found.append((node.lineno, node.value))
    return found


@pytest.mark.parametrize(
    "path", sorted((ROOT / "torchmetrics_async").rglob("*.py")), ids=lambda path: str(path.relative_to(ROOT))
)
def test_messages_name_only_published_packages(path: Path) -> None:
    extras = PYPROJECT["project"]["optional-dependencies"].values()
    dependencies = [*PYPROJECT["project"]["dependencies"], *(requirement for extra in extras for requirement in extra)]
    published = {re.split(r"[<>=!~;\[ ]", requirement)[0].lower() for requirement in dependencies}
    for lineno, text in _messages(path):
        assert not UNPUBLISHED.search(text), f"line {lineno}: {text!r}"
        for name in PIP_INSTALL.findall(text):
            assert name.lower() in published, f"line {lineno}: pip install {name}: not a published dependency"
