"""Jaccard index, Cohen's kappa, Matthews' coefficient, calibration error and hinge loss (and their task wrappers, as
the multiclass task); a target out of range violates.

Binary and multilabel batches always hold a right and a wrong prediction (also once scores are doubled into logits,
as tests/test_forward_overrides.py does): on all-right or all-wrong ones torchmetrics' Matthews coefficient is an int64
``1``/``-1`` where ours is a float (a documented deviation, tested in tests/classification/test_confusion_derived.py).
"""

import torch

from tests.example_families import BATCH, NUM_CLASSES, Example, is_task_wrapper
from torchmetrics_async.classification import calibration, confusion_derived, hinge

NUM_LABELS = 3
_TASK_WRAPPERS = frozenset({"JaccardIndex", "CohenKappa", "MatthewsCorrCoef", "CalibrationError", "HingeLoss"})
_NAMES = frozenset(name for module in (calibration, confusion_derived, hinge) for name in module.__all__)


def _mine(origin: type) -> bool:
    return origin.__module__.startswith("torchmetrics.") and (
        origin.__name__ in _NAMES or (is_task_wrapper(origin) and origin.__name__ in _TASK_WRAPPERS)
    )


def _example(name: str, generator: torch.Generator) -> Example:
    if name.startswith(("Binary", "Multilabel")):
        shape = (BATCH,) if name.startswith("Binary") else (BATCH, NUM_LABELS)
        preds, target = torch.rand(shape, generator=generator), torch.randint(0, 2, shape, generator=generator)
        # One wrong and one right positive, one right negative: neither torchmetrics' all-right/all-wrong case nor
        # its zero-denominator one, whose result dtype depends on the data (README, Deviations).
        preds[:3], target[:3] = (
            torch.tensor([0.9, 0.9, 0.1]).view(-1, *[1] * (preds.ndim - 1)),
            torch.tensor([0, 1, 0]).view(-1, *[1] * (target.ndim - 1)),
        )
        return Example({"num_labels": NUM_LABELS} if len(shape) == 2 else {}, (preds, target))
    preds = torch.randn(BATCH, NUM_CLASSES, generator=generator)
    target = torch.randint(0, NUM_CLASSES, (BATCH,), generator=generator)
    return Example({"num_classes": NUM_CLASSES}, (preds, target))


def example(origin: type, generator: torch.Generator) -> Example | None:
    if not _mine(origin):
        return None
    if is_task_wrapper(origin):
        found = _example(f"Multiclass{origin.__name__}", generator)
        return Example({"task": "multiclass", **found.init}, found.inputs)
    return _example(origin.__name__, generator)


def violating_example(origin: type, example: Example) -> Example | None:
    if not _mine(origin):
        return None
    preds, target = (x.clone() for x in example.inputs)
    target[1] = 5  # outside every task's labels: {0, 1}, range(NUM_CLASSES)
    return Example(example.init, (preds, target))
