"""The segmentation family (index inputs, so every label passes through the one-hot checks); a label >= num_classes
violates."""

import torch

from tests.example_families import BATCH, NUM_CLASSES, Example
from torchmetrics_async import segmentation

_NAMES = frozenset(segmentation.__all__)


def _mine(origin: type) -> bool:
    return origin.__module__.startswith("torchmetrics.segmentation") and origin.__name__ in _NAMES


def example(origin: type, generator: torch.Generator) -> Example | None:
    if not _mine(origin):
        return None
    preds = torch.randint(0, NUM_CLASSES, (BATCH, 5, 5), generator=generator)
    target = torch.randint(0, NUM_CLASSES, (BATCH, 5, 5), generator=generator)
    return Example({"num_classes": NUM_CLASSES, "input_format": "index"}, (preds, target))


def violating_example(origin: type, example: Example) -> Example | None:
    if not _mine(origin):
        return None
    preds, target = (x.clone() for x in example.inputs)
    target[1, 2, 3] = NUM_CLASSES
    return Example(example.init, (preds, target))
