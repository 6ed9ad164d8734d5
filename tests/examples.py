"""Example constructor arguments and inputs for every registered class: the one place tests get them.

``example_for(cls)`` asks each module of ``tests/example_families`` (one per family) in turn, so a class added to the
registry is covered by the contract tests by adding its family's module, without editing a list here. A family module
defines ``example(origin, generator) -> Example | None`` (``None``: not my family) and may define
``violating_example(origin, example) -> Example | None`` (inputs that trip a deferred check). A class no family knows
raises ``LookupError`` (the contract tests then fail: they never skip).
"""

import importlib
import pkgutil
from functools import cache
from types import ModuleType

import torch

from tests.example_families import BATCH, NUM_CLASSES, Example
from torchmetrics_async.registry import torchmetrics_origin

__all__ = ["BATCH", "NUM_CLASSES", "Example", "example_for", "violating_example_for"]


@cache
def _families() -> tuple[ModuleType, ...]:
    import tests.example_families as package

    names = sorted(info.name for info in pkgutil.iter_modules(package.__path__))
    return tuple(importlib.import_module(f"{package.__name__}.{name}") for name in names)


def _origin(cls: type) -> type:
    origin = cls if cls.__module__.split(".")[0] == "torchmetrics" else torchmetrics_origin(cls)
    if origin is None:
        raise LookupError(f"{cls.__qualname__} is neither a torchmetrics class nor an accelerated one")
    return origin


def example_for(cls: type, seed: int = 0) -> Example:
    """Constructor arguments and a batch for a registered torchmetrics class (or its accelerated class).

    Raises:
        LookupError: for a family no module of ``tests/example_families`` has an example for.
    """
    origin = _origin(cls)
    for family in _families():
        example = family.example(origin, torch.Generator().manual_seed(seed))
        if example is not None:
            return example
    raise LookupError(
        f"no example inputs for {origin.__module__}.{origin.__name__}: add its family to tests/example_families "
        "(the contract tests need one)"
    )


def violating_example_for(cls: type, seed: int = 0) -> Example:
    """Arguments and a batch that violate a deferred check: a NaN under ``nan_strategy="error"``, a label out of range.

    Raises:
        LookupError: for a class without such an example.
    """
    origin = _origin(cls)
    example = example_for(origin, seed)
    for family in _families():
        violating = getattr(family, "violating_example", None)
        found = violating(origin, example) if violating is not None else None
        if found is not None:
            return found
    raise LookupError(f"no violating example for {origin.__name__}")
