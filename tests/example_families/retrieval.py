"""The retrieval family, with an ``ignore_index`` (so the keep-mask path runs): three queries, one entry ignored.

A non-binary target violates (graded targets are valid for ``RetrievalNormalizedDCG``: there a batch whose every
entry is ignored violates).
"""

import torch

from tests.example_families import BATCH, Example
from torchmetrics_async import retrieval

_IGNORE = -100
_SIZE = 3 * BATCH


def _mine(origin: type) -> bool:
    return origin.__module__.startswith("torchmetrics.retrieval") and origin.__name__ in retrieval.__all__


def example(origin: type, generator: torch.Generator) -> Example | None:
    if not _mine(origin):
        return None
    preds = torch.rand(_SIZE, generator=generator)
    target = torch.randint(0, 2, (_SIZE,), generator=generator)
    target[:3] = 1  # every query (indexes 0, 1, 2, 0, 1, 2, ...) has a positive and a negative entry
    target[3:6] = 0
    target[6] = _IGNORE
    indexes = torch.arange(_SIZE) % 3
    return Example({"ignore_index": _IGNORE}, (preds, target, indexes))


def violating_example(origin: type, example: Example) -> Example | None:
    if not _mine(origin):
        return None
    preds, target, indexes = (x.clone() for x in example.inputs)
    if origin.__name__ == "RetrievalNormalizedDCG":
        target.fill_(_IGNORE)
    else:
        target[3] = 2
    return Example(example.init, (preds, target, indexes))
