"""The image family: SCC on 16x16 images, VIF on 41x41 ones (its smallest), two channels; nothing is deferred."""

import torch

from tests.example_families import BATCH, Example

_SIZES = {"SpatialCorrelationCoefficient": 16, "VisualInformationFidelity": 41}


def example(origin: type, generator: torch.Generator) -> Example | None:
    if not origin.__module__.startswith("torchmetrics.image") or origin.__name__ not in _SIZES:
        return None
    size = _SIZES[origin.__name__]
    preds = torch.rand(BATCH, 2, size, size, generator=generator)
    return Example({}, (preds, (preds + torch.rand(preds.shape, generator=generator)) / 2))
