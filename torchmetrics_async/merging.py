"""``merge_state`` for accelerated metrics that also accepts plain torchmetrics instances of the same class.

torchmetrics' ``Metric.merge_state`` accepts another metric only if it is an instance of the receiving metric's class.
An accelerated ``MeanMetric`` subclasses ``torchmetrics.MeanMetric``, so a plain torchmetrics driver merges an
accelerated worker already; the other way round torchmetrics would refuse the plain worker. Here a plain instance of
the torchmetrics class the accelerated class stands in for (the same torchmetrics class, not a relative) is merged
through its ``metric_state``, exactly as torchmetrics merges one of its own. The extra states it lacks (deferred
flags, ``CatMetric``'s keep-masks) count as "nothing seen" (see ``SyncFreeMixin._reduce_states``).

Everything else keeps torchmetrics' checks and messages: a metric of another class, an input that is neither a dict
nor a ``Metric``, and metrics with ``full_state_update=True`` or ``dist_sync_on_step=True``.

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
    """Whether ``incoming`` is an instance of a class ``metric``'s class derives from, with the same torchmetrics class.

    That is what an accelerated metric stands in for: ``torchmetrics.MeanMetric`` for an accelerated ``MeanMetric``,
    a user's ``MyMean(torchmetrics.MeanMetric)`` for the accelerated ``MyMean`` that
    :func:`~torchmetrics_async.accelerate` derives from it. A torchmetrics parent class (``MulticlassConfusionMatrix``
    for ``MulticlassJaccardIndex``) is another metric and does not qualify.

    Args:
        metric: the receiving metric.
        incoming: the metric to merge.

    Returns:
        ``True`` if ``incoming`` may be merged into ``metric``.

    Example:
        >>> import torchmetrics
        >>> from torchmetrics_async import MeanMetric
        >>> is_same_torchmetrics_class(MeanMetric(), torchmetrics.MeanMetric())
        True
        >>> is_same_torchmetrics_class(MeanMetric(), torchmetrics.SumMetric())
        False
    """
    cls = type(incoming)
    tm_class = torchmetrics_base(cls)
    return isinstance(metric, cls) and tm_class is not None and tm_class is torchmetrics_base(type(metric))


def merge_state_accepting_torchmetrics(self: Any, incoming_state: dict[str, Any] | Metric) -> None:
    """Merge a state dict or a metric, also a plain torchmetrics instance of this metric's torchmetrics class.

    Bound as ``SyncFreeMixin.merge_state``. A plain instance (see :func:`is_same_torchmetrics_class`) is merged
    through its ``metric_state``; any other input goes to torchmetrics' ``Metric.merge_state`` unchanged, with its
    checks and error messages.

    Args:
        self: the receiving metric.
        incoming_state: a state dict shaped like the metric's (torchmetrics' states suffice: missing extra states
            count as clean), or a metric of the same class, accelerated or not.

    Example:
        >>> import torchmetrics
        >>> from torchmetrics_async import SumMetric
        >>> driver, worker = SumMetric(), torchmetrics.SumMetric()
        >>> driver.update(1.0)
        >>> worker.update(2.0)
        >>> driver.merge_state(worker)
        >>> driver.compute()
        tensor(3.)
    """
    if (
        isinstance(incoming_state, Metric)
        and not isinstance(incoming_state, type(self))
        and is_same_torchmetrics_class(self, incoming_state)
    ):
        incoming_state = incoming_state.metric_state
    Metric.merge_state(self, incoming_state)
