"""The stat-score family (and its task wrappers, as the multiclass task); a label out of range violates."""

import torch

from tests.classification._binary_multilabel import NUM_LABELS, base_kwargs
from tests.example_families import BATCH, NUM_CLASSES, Example, is_task_wrapper
from torchmetrics_async.classification import binary, multiclass, multilabel, tasks

_NAMES = frozenset(name for module in (binary, multiclass, multilabel, tasks) for name in module.__all__)


def _classification(name: str, generator: torch.Generator) -> Example:
    kwargs = base_kwargs(name)  # beta for FBeta, num_labels for Multilabel*
    if name.startswith("Binary"):
        preds, target = torch.rand(BATCH, generator=generator), torch.randint(0, 2, (BATCH,), generator=generator)
    elif name.startswith("Multilabel"):
        preds = torch.rand(BATCH, NUM_LABELS, generator=generator)
        target = torch.randint(0, 2, (BATCH, NUM_LABELS), generator=generator)
    else:
        kwargs["num_classes"] = NUM_CLASSES
        preds = torch.randn(BATCH, NUM_CLASSES, generator=generator)
        target = torch.randint(0, NUM_CLASSES, (BATCH,), generator=generator)
    return Example(kwargs, (preds, target))


def _mine(origin: type) -> bool:
    return origin.__module__.startswith("torchmetrics.classification") and origin.__name__ in _NAMES


def example(origin: type, generator: torch.Generator) -> Example | None:
    if not _mine(origin):
        return None
    if is_task_wrapper(origin):  # Accuracy(task=...): the multiclass task
        example = _classification(f"Multiclass{origin.__name__}", generator)
        return Example({"task": "multiclass", **example.init}, example.inputs)
    return _classification(origin.__name__, generator)


def violating_example(origin: type, example: Example) -> Example | None:
    if not _mine(origin):
        return None
    preds, target = (x.clone() for x in example.inputs)
    target[1] = 5  # outside every task's labels: {0, 1}, range(NUM_CLASSES)
    return Example(example.init, (preds, target))
