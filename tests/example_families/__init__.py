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
        return tuple(x.to(device) for x in self.inputs)


def is_task_wrapper(cls: type) -> bool:
    """``Accuracy(task=...)`` and the like: ``__new__`` takes the task."""
    return "task" in inspect.signature(cls.__new__).parameters
