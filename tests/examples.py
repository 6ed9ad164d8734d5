"""Example constructor arguments and inputs for every registered class, by family: the one place tests get them.

``example_for(cls)`` reads the class's module and name, so a class added to the registry is covered by the contract
tests without editing a list; a class of a family this module does not know raises ``LookupError`` (the contract test
then fails: it never skips).
"""

import inspect
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from tests.classification._binary_multilabel import NUM_LABELS, base_kwargs
from torchmetrics_async._torchmetrics import BaseAggregator, torchmetrics_origin

NUM_CLASSES = 3
BATCH = 4


@dataclass(frozen=True)
class Example:
    """Arguments to build the metric and one batch of valid inputs for ``update``/``forward``."""

    init: dict[str, Any]
    inputs: tuple[Tensor, ...]

    def to(self, device: str) -> tuple[Tensor, ...]:
        return tuple(x.to(device) for x in self.inputs)


def _is_task_wrapper(cls: type) -> bool:
    return "task" in inspect.signature(cls.__new__).parameters


def _classification(name: str, generator: torch.Generator) -> Example:
    kwargs = base_kwargs(name)  # beta for FBeta, num_labels for Multilabel*
    if name.startswith("Binary"):
        preds, target = torch.rand(BATCH, generator=generator), torch.randint(0, 2, (BATCH,), generator=generator)
    elif name.startswith("Multilabel"):
        preds = torch.rand(BATCH, NUM_LABELS, generator=generator)
        target = torch.randint(0, 2, (BATCH, NUM_LABELS), generator=generator)
    elif name.startswith("Multiclass"):
        kwargs["num_classes"] = NUM_CLASSES
        preds = torch.randn(BATCH, NUM_CLASSES, generator=generator)
        target = torch.randint(0, NUM_CLASSES, (BATCH,), generator=generator)
    else:
        raise LookupError(name)
    return Example(kwargs, (preds, target))


def example_for(cls: type, seed: int = 0) -> Example:
    """Constructor arguments and a batch for a registered torchmetrics class (or its accelerated class).

    Raises:
        LookupError: for a family this module has no example for.
    """
    origin = cls if cls.__module__.split(".")[0] == "torchmetrics" else torchmetrics_origin(cls)
    if origin is None:
        raise LookupError(f"{cls.__qualname__} is neither a torchmetrics class nor an accelerated one")
    name, module = origin.__name__, origin.__module__
    generator = torch.Generator().manual_seed(seed)
    if module.startswith("torchmetrics.aggregation") or issubclass(origin, BaseAggregator):
        init = {"window": 3} if name.startswith("Running") else {}
        return Example(init, (torch.randn(BATCH, generator=generator),))
    if module.startswith("torchmetrics.classification"):
        if _is_task_wrapper(origin):  # Accuracy(task=...): the multiclass task
            example = _classification(f"Multiclass{name}", generator)
            return Example({"task": "multiclass", **example.init}, example.inputs)
        try:
            return _classification(name, generator)
        except LookupError:
            pass
    raise LookupError(
        f"no example inputs for {module}.{name}: add its family to tests/examples.py (the contract tests need one)"
    )


def violating_example_for(cls: type, seed: int = 0) -> Example:
    """Arguments and a batch that violate a deferred check: a NaN under ``nan_strategy="error"``, a label out of range.

    Raises:
        LookupError: for a family this module has no example for.
    """
    example = example_for(cls, seed)
    inputs = [x.clone() for x in example.inputs]
    if "window" in example.init or len(inputs) == 1:  # an aggregator
        inputs[0][1] = float("nan")
        return Example({**example.init, "nan_strategy": "error"}, tuple(inputs))
    inputs[1][1] = 5  # outside every task's labels: {0, 1}, range(NUM_CLASSES)
    return Example(example.init, tuple(inputs))
