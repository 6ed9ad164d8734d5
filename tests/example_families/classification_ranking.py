"""The multilabel ranking metrics (coverage error, ranking average precision, ranking loss); a target not in {0, 1}
violates."""

import torch

from tests.example_families import BATCH, Example
from torchmetrics_async.classification import ranking

NUM_LABELS = 3


def example(origin: type, generator: torch.Generator) -> Example | None:
    if not origin.__module__.startswith("torchmetrics.") or origin.__name__ not in ranking.__all__:
        return None
    preds = torch.rand(BATCH, NUM_LABELS, generator=generator)
    target = torch.tensor([[0, 1, 1], [1, 0, 1], [1, 1, 1], [0, 0, 1]])  # a row ranking loss skips, and others
    return Example({"num_labels": NUM_LABELS}, (preds, target))


def violating_example(origin: type, example: Example) -> Example | None:
    if not origin.__module__.startswith("torchmetrics.") or origin.__name__ not in ranking.__all__:
        return None
    preds, target = (x.clone() for x in example.inputs)
    target[1, 0] = 5
    return Example(example.init, (preds, target))
