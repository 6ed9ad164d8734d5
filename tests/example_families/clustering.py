"""The clustering family: integer cluster labels (extrinsic scores), or embeddings and labels with every one of
NUM_CLASSES clusters present (intrinsic scores). No violating example: the one deferred check (a ``forward()`` batch
with a cluster count torchmetrics rejects) is not recorded by ``update()``; tests/test_clustering.py covers it."""

import torch

from tests.example_families import BATCH, NUM_CLASSES, Example
from torchmetrics_async import clustering

_NAMES = frozenset(name for name in clustering.__all__ if name[0].isupper())
_INTRINSIC = ("CalinskiHarabaszScore", "DaviesBouldinScore", "DunnIndex")


def example(origin: type, generator: torch.Generator) -> Example | None:
    if not (origin.__module__.startswith("torchmetrics.clustering") and origin.__name__ in _NAMES):
        return None
    size = BATCH * 3
    labels = torch.randint(0, NUM_CLASSES, (size,), generator=generator)
    labels[:NUM_CLASSES] = torch.arange(NUM_CLASSES)
    if origin.__name__ in _INTRINSIC:
        return Example({}, (torch.randn(size, 2, generator=generator) + labels[:, None] * 3.0, labels))
    return Example({}, (torch.randint(0, NUM_CLASSES + 1, (size,), generator=generator), labels))
