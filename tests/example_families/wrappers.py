"""The wrappers: ``Running`` (a window of 3) and ``MinMaxMetric`` over a ``MeanMetric`` base, a fresh base for every
metric built."""

from typing import Any

import torch
import torchmetrics

from tests.example_families import BATCH, Example
from torchmetrics_async._torchmetrics import MinMaxMetric, Running


class _FreshBase(dict):
    """Constructor arguments whose ``base_metric`` is a new torchmetrics ``MeanMetric`` at every ``**init``.

    The contract tests build the torchmetrics class and the accelerated one from the same ``init``: one shared base
    metric would be updated by both (and converted in place by the accelerated ``Running``).
    """

    def __iter__(self) -> Any:  # not dict's: ``**init`` then reads the items through __getitem__
        return iter(dict.keys(self))

    def keys(self) -> Any:
        return dict.keys(self)

    def __getitem__(self, key: str) -> Any:
        if key == "base_metric":
            return torchmetrics.MeanMetric(**dict.__getitem__(self, key))
        return dict.__getitem__(self, key)


_OPTIONS = {Running: {"window": 3}, MinMaxMetric: {}}


def example(origin: type, generator: torch.Generator) -> Example | None:
    if origin not in _OPTIONS:
        return None
    return Example(_FreshBase(base_metric={}, **_OPTIONS[origin]), (torch.randn(BATCH, generator=generator),))


def violating_example(origin: type, example: Example) -> Example | None:
    if origin not in _OPTIONS:
        return None
    value = example.inputs[0].clone()
    value[1] = float("nan")
    return Example(_FreshBase(base_metric={"nan_strategy": "error"}, **_OPTIONS[origin]), (value,))
