"""Image quality metrics with host constants moved to the device: random images (grayscale for PSNRB)."""

import torch

from tests.example_families import BATCH, Example
from torchmetrics_async import image as image_quality

# SCC and VIF: tests/example_families/image.py.
_NAMES = frozenset(name for name in image_quality.__all__ if name[0].isupper()) - {
    "SpatialCorrelationCoefficient",
    "VisualInformationFidelity",
}


def example(origin: type, generator: torch.Generator) -> Example | None:
    if not (origin.__module__.startswith("torchmetrics.image") and origin.__name__ in _NAMES):
        return None
    if origin.__name__ == "PeakSignalNoiseRatioWithBlockedEffect":
        shape, init = (BATCH, 1, 20, 17), {"data_range": 1.0}
    elif origin.__name__ == "MultiScaleStructuralSimilarityIndexMeasure":  # 2 scales: small images suffice
        shape, init = (BATCH, 1, 32, 32), {"data_range": 1.0, "betas": (0.4, 0.6)}
    elif origin.__name__ == "StructuralSimilarityIndexMeasure":  # data_range=None: tests/test_compile_registry.py
        shape, init = (BATCH, 3, 16, 16), {"data_range": 1.0}
    else:
        shape, init = (BATCH, 3, 16, 16), {}
    return Example(init, (torch.rand(shape, generator=generator), torch.rand(shape, generator=generator)))
