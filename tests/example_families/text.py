"""Perplexity (with an ``ignore_index``, so the masked path runs); a target outside the vocabulary violates."""

import torch

from tests.example_families import BATCH, NUM_CLASSES, Example
from torchmetrics_async import text

_SEQ = 5
_IGNORE = -100


def _mine(origin: type) -> bool:
    return origin.__module__.startswith("torchmetrics.text") and origin.__name__ in text.__all__


def example(origin: type, generator: torch.Generator) -> Example | None:
    if not _mine(origin):
        return None
    preds = torch.randn(BATCH, _SEQ, NUM_CLASSES, generator=generator)
    target = torch.randint(0, NUM_CLASSES, (BATCH, _SEQ), generator=generator)
    target[0, 0] = _IGNORE
    return Example({"ignore_index": _IGNORE}, (preds, target))


def violating_example(origin: type, example: Example) -> Example | None:
    if not _mine(origin):
        return None
    preds, target = (x.clone() for x in example.inputs)
    target[1, 1] = NUM_CLASSES
    return Example(example.init, (preds, target))
