"""One module per family: ``example(origin, generator)`` gives constructor arguments and a valid batch (see
``tests/examples.py``), ``violating_example(origin, example)`` a batch that trips a deferred check."""

import inspect
from dataclasses import dataclass
from typing import Any

from torch import Tensor

__all__ = ["BATCH", "NUM_CLASSES", "Example", "is_task_wrapper"]

NUM_CLASSES = 3
BATCH = 4


@dataclass(frozen=True)
class Example:
    """Arguments to build the metric and one batch of valid inputs for ``update``/``forward``."""

    init: dict[str, Any]
    inputs: tuple[Tensor, ...]

    def to(self, device: str) -> tuple[Tensor, ...]:
        return tuple(_to(x, device) for x in self.inputs)


def _to(x: Any, device: str) -> Any:
    """A tensor, or the lists of dicts of tensors detection metrics take, on ``device``."""
    if isinstance(x, list):
        return [{key: value.to(device) for key, value in item.items()} for item in x]
    return x.to(device)


def is_task_wrapper(cls: type) -> bool:
    """``Accuracy(task=...)`` and the like: ``__new__`` takes the task."""
    return "task" in inspect.signature(cls.__new__).parameters
