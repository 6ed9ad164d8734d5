"""The nominal family (categories as integers; the examples avoid degenerate tables, whose bias-correction NaN and
Theil's integer 0 are covered by tests/test_nominal.py); a category >= num_classes violates."""

import torch

from tests.example_families import BATCH, NUM_CLASSES, Example
from torchmetrics_async import nominal

_NAMES = frozenset(name for name in nominal.__all__ if name[0].isupper())


def _mine(origin: type) -> bool:
    return origin.__module__.startswith("torchmetrics.nominal") and origin.__name__ in _NAMES


def example(origin: type, generator: torch.Generator) -> Example | None:
    if not _mine(origin):
        return None
    if origin.__name__ == "FleissKappa":  # scores (samples, categories, raters): raters >= categories, as valid
        return Example({"mode": "probs"}, (torch.randn(BATCH * 3, NUM_CLASSES, NUM_CLASSES + 2, generator=generator),))
    # Every category in both series (a permutation each), so no batch table is degenerate; BATCH * 3 entries.
    size = BATCH * 3
    preds = torch.arange(size) % NUM_CLASSES
    target = torch.randint(0, NUM_CLASSES, (size,), generator=generator)
    target[:NUM_CLASSES] = torch.arange(NUM_CLASSES)
    init = {"num_classes": NUM_CLASSES}
    if "bias_correction" in origin.__init__.__code__.co_varnames:
        init["bias_correction"] = False  # with 12 entries the corrected table is often degenerate (NaN)
    return Example(init, (preds[torch.randperm(size, generator=generator)], target))


def violating_example(origin: type, example: Example) -> Example | None:
    if not _mine(origin):
        return None
    if origin.__name__ == "FleissKappa":  # category NUM_CLASSES - 1 picked by a rater index below it: too large
        scores = torch.zeros(BATCH, NUM_CLASSES, NUM_CLASSES - 1)
        scores[:, -1] = 1.0
        return Example(example.init, (scores,))
    preds, target = (x.clone() for x in example.inputs)
    target[1] = NUM_CLASSES
    return Example(example.init, (preds, target))
