"""Group fairness: 3 groups, each present in every batch (its value is a dict); a group id >= num_groups violates."""

import torch

from tests.example_families import BATCH, Example
from torchmetrics_async.classification import group_fairness

_GROUPS = 3


def _mine(origin: type) -> bool:
    return origin.__module__.startswith("torchmetrics.classification") and origin.__name__ in group_fairness.__all__


def example(origin: type, generator: torch.Generator) -> Example | None:
    if not _mine(origin):
        return None
    size = BATCH * 3
    preds = torch.rand(size, generator=generator)
    target = torch.randint(0, 2, (size,), generator=generator)
    groups = torch.arange(size)[torch.randperm(size, generator=generator)] % _GROUPS
    return Example({"num_groups": _GROUPS}, (preds, target, groups))


def violating_example(origin: type, example: Example) -> Example | None:
    if not _mine(origin):
        return None
    preds, target, groups = (x.clone() for x in example.inputs)
    groups[1] = _GROUPS
    return Example(example.init, (preds, target, groups))
