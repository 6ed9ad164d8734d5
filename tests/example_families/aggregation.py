"""Aggregators: one float vector; a NaN under ``nan_strategy="error"`` violates."""

import torch

from tests.example_families import BATCH, Example
from torchmetrics_async._torchmetrics import BaseAggregator


def example(origin: type, generator: torch.Generator) -> Example | None:
    if not (origin.__module__.startswith("torchmetrics.aggregation") or issubclass(origin, BaseAggregator)):
        return None
    init = {"window": 3} if origin.__name__.startswith("Running") else {}
    return Example(init, (torch.randn(BATCH, generator=generator),))


def violating_example(origin: type, example: Example) -> Example | None:
    if not (origin.__module__.startswith("torchmetrics.aggregation") or issubclass(origin, BaseAggregator)):
        return None
    value = example.inputs[0].clone()
    value[1] = float("nan")
    return Example({**example.init, "nan_strategy": "error"}, (value,))
