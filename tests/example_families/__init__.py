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

    def to(self, device: str) -> tuple[Any, ...]:
        return tuple(_to(x, device) for x in self.inputs)


def _to(value: Any, device: str) -> Any:
    """A tensor on ``device``; lists and dicts of them (detection's per-image dicts) moved item by item."""
    if isinstance(value, list):
        return [_to(item, device) for item in value]
    if isinstance(value, dict):
        return {key: _to(item, device) for key, item in value.items()}
    return value.to(device)


def is_task_wrapper(cls: type) -> bool:
    """``Accuracy(task=...)`` and the like: ``__new__`` takes the task."""
    return "task" in inspect.signature(cls.__new__).parameters
