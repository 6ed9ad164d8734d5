"""Regression: positive float vectors (distributions for the divergences, ensembles for CRPS); a negative prediction
violates TweedieDevianceScore's domain (its one deferred check), under ``power=1.5``."""

import torch

from tests.example_families import BATCH, Example
from torchmetrics_async import regression

_NAMES = frozenset(regression.__all__)
_INIT = {
    "CriticalSuccessIndex": {"threshold": 0.5},
    "MinkowskiDistance": {"p": 3},
    "TweedieDevianceScore": {"power": 1.5},
}


def _mine(origin: type) -> bool:
    return origin.__module__.startswith("torchmetrics.regression") and origin.__name__ in _NAMES


def example(origin: type, generator: torch.Generator) -> Example | None:
    if not _mine(origin):
        return None
    name = origin.__name__
    if name in ("KLDivergence", "JensenShannonDivergence", "CosineSimilarity"):
        shape = (BATCH, 3)
    elif name == "ContinuousRankedProbabilityScore":
        preds, target = torch.rand(BATCH, 5, generator=generator), torch.rand(BATCH, generator=generator)
        return Example({}, (preds, target))
    else:
        shape = (BATCH,)
    preds = torch.rand(*shape, generator=generator) + 0.1
    target = torch.rand(*shape, generator=generator) + 0.1
    return Example(dict(_INIT.get(name, {})), (preds, target))


def violating_example(origin: type, example: Example) -> Example | None:
    if not (_mine(origin) and origin.__name__ == "TweedieDevianceScore"):
        return None
    preds, target = (x.clone() for x in example.inputs)
    preds[1] = -1.0
    return Example(example.init, (preds, target))
