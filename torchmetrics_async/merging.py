"""``merge_state`` for accelerated metrics that also accepts plain torchmetrics instances of the same class.

Example:
    >>> import torch, torchmetrics
    >>> from torchmetrics_async import MeanMetric
    >>> driver, worker = MeanMetric(), torchmetrics.MeanMetric()
    >>> driver.update(torch.tensor(1.0))
    >>> worker.update(torch.tensor(3.0))
    >>> driver.merge_state(worker)
    >>> driver.compute()
    tensor(2.)
"""

from typing import Any

from torchmetrics_async._torchmetrics import Metric
from torchmetrics_async.registry import torchmetrics_base

__all__ = ["is_same_torchmetrics_class", "merge_state_accepting_torchmetrics"]


def is_same_torchmetrics_class(metric: Any, incoming: Any) -> bool:
    """Whether ``metric`` is an instance of ``incoming``'s class and both stand for the same torchmetrics class."""
    cls = type(incoming)
    tm_class = torchmetrics_base(cls)
    return isinstance(metric, cls) and tm_class is not None and tm_class is torchmetrics_base(type(metric))


def merge_state_accepting_torchmetrics(self: Any, incoming_state: dict[str, Any] | Metric) -> None:
    """``SyncFreeMixin.merge_state``: also merges a plain instance of this metric's torchmetrics class."""
    if (
        isinstance(incoming_state, Metric)
        and not isinstance(incoming_state, type(self))
        and is_same_torchmetrics_class(self, incoming_state)
    ):
        incoming_state = incoming_state.metric_state
    Metric.merge_state(self, incoming_state)
