"""The curve family (precision-recall curves, ROC, AUROC, average precision, fixed-point metrics, task wrappers as
the multiclass task), with torchmetrics' default ``thresholds=None``; a target out of range violates."""

import torch

from tests.example_families import BATCH, NUM_CLASSES, Example, is_task_wrapper
from torchmetrics_async.classification.curves import CURVE_ORIGINS

NUM_LABELS = 3
# The constructor argument each fixed-point metric cannot do without.
_FIXED_POINT = {
    "RecallAtFixedPrecision": {"min_precision": 0.5},
    "PrecisionAtFixedRecall": {"min_recall": 0.5},
    "SensitivityAtSpecificity": {"min_specificity": 0.5},
    "SpecificityAtSensitivity": {"min_sensitivity": 0.5},
}


def _curve(name: str, generator: torch.Generator) -> Example:
    kind = name.removeprefix("Binary").removeprefix("Multiclass").removeprefix("Multilabel")
    kwargs = dict(_FIXED_POINT.get(kind, {}))
    if name.startswith("Binary"):
        preds, target = torch.rand(BATCH, generator=generator), torch.tensor([0, 1, 1, 0])
    elif name.startswith("Multilabel"):
        kwargs["num_labels"] = NUM_LABELS
        preds = torch.rand(BATCH, NUM_LABELS, generator=generator)
        target = torch.tensor([[0, 1, 1], [1, 0, 1], [1, 1, 0], [0, 0, 1]])
    else:
        kwargs["num_classes"] = NUM_CLASSES
        preds = torch.randn(BATCH, NUM_CLASSES, generator=generator)
        target = torch.tensor([0, 1, 2, 1])
    return Example(kwargs, (preds, target))


def example(origin: type, generator: torch.Generator) -> Example | None:
    if origin not in CURVE_ORIGINS:
        return None
    if is_task_wrapper(origin):  # AUROC(task=...): the multiclass task
        example = _curve(f"Multiclass{origin.__name__}", generator)
        return Example({"task": "multiclass", **example.init}, example.inputs)
    return _curve(origin.__name__, generator)


def violating_example(origin: type, example: Example) -> Example | None:
    if origin not in CURVE_ORIGINS:
        return None
    preds, target = (x.clone() for x in example.inputs)
    if target.ndim == 1 and preds.ndim == 2:  # multiclass: more distinct labels than classes
        target = torch.tensor([0, 1, 2, 5])
    else:
        target[1] = 5  # binary/multilabel: not in {0, 1}
    # Binned: the deferred-check contract tests run forward() under no_host_sync().
    return Example({**example.init, "thresholds": 5, "validate_args": True}, (preds, target))  # BinaryLogAUC: off
