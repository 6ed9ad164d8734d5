"""The wrappers: ``Running`` (a window of 3), ``MinMaxMetric`` and ``BootStrapper`` (3 copies, multinomial) over a
``MeanMetric`` base, a fresh base for every metric built.

``BootStrapper`` resamples with torch's global generator, which the contract tests' alternating calls to the two
classes do not share; its batches are constant, so every resampling gives the same values (tests/test_wrappers.py
compares the draws themselves under one seed).
"""

from typing import Any

import torch
import torchmetrics

from tests.example_families import BATCH, Example
from torchmetrics_async._torchmetrics import BootStrapper, MinMaxMetric, Running


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


_OPTIONS = {
    Running: {"window": 3},
    MinMaxMetric: {},
    BootStrapper: {"num_bootstraps": 3, "sampling_strategy": "multinomial"},
}


def example(origin: type, generator: torch.Generator) -> Example | None:
    if origin not in _OPTIONS:
        return None
    value = torch.randn(BATCH, generator=generator)
    if origin is BootStrapper:  # any resampling of a constant batch is the batch
        value = value[:1].expand(BATCH).clone()
    return Example(_FreshBase(base_metric={}, **_OPTIONS[origin]), (value,))


def violating_example(origin: type, example: Example) -> Example | None:
    if origin not in _OPTIONS:
        return None
    value = example.inputs[0].clone()
    value[slice(None) if origin is BootStrapper else 1] = float("nan")  # every resampling holds a NaN
    return Example(_FreshBase(base_metric={"nan_strategy": "error"}, **_OPTIONS[origin]), (value,))
