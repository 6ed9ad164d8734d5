"""The sync-free base of the classification metrics: deferred value checks and the batch-statistics forward.

torchmetrics' stat-score family shares one ``update`` per task (``BinaryStatScores``, ``MulticlassStatScores``,
``MultilabelStatScores``); the subclasses (``Accuracy``, ``Precision``, ``F1Score``, ...) only change ``compute``.
The same split holds here: a task mixin supplies ``_batch_stats`` (a sync-free kernel that turns ``preds``/``target``
into the batch's statistics, e.g. ``(tp, fp, tn, fn)``), :class:`SyncFreeClassification` folds them into the states
in place and derives ``forward``'s batch value by running the torchmetrics class's own ``compute`` on them.

Value checks that need device data (labels out of range, non-binary targets, probabilities outside [0, 1]) cannot be
raised in ``update`` without a host sync. They are recorded in bool metric states (reduced with ``max``, so synced
and checkpointed with the metric) and raised by ``compute()``: one host read for all of them. Shape, dtype and
argument checks need no device data and stay eager.

Example:
    >>> import torch
    >>> from torchmetrics_async.deferred import DeferredChecks
    >>> issubclass(SyncFreeClassification, DeferredChecks)
    True
"""

import inspect
from typing import Any

import torch
from torch import Tensor

from torchmetrics_async._torchmetrics import torchmetrics_origin
from torchmetrics_async.deferred import DeferredChecks
from torchmetrics_async.metric import OnePassForward, SyncFreeMixin

__all__ = ["SyncFreeClassification"]


def _forwarding_init(cls: type, origin: type) -> Any:
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        super(cls, self).__init__(*args, **kwargs)
        self._init_sync_free()

    __init__.__signature__ = inspect.signature(origin.__init__)  # type: ignore[attr-defined]
    __init__.__doc__ = f"Same arguments as ``{origin.__module__}.{origin.__name__}``."
    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    return __init__


class SyncFreeClassification(SyncFreeMixin, OnePassForward, DeferredChecks):
    """Mixin for torchmetrics classification metrics; a task mixin adds ``_batch_stats`` and ``_deferred_checks``.

    ``_batch_stats(preds, target)`` returns ``(values, violations)``: ``values`` aligned with ``_stat_states`` (added in
    place to tensor states, appended to list states) and ``violations`` a dict check name -> bool tensor.
    ``_deferred_checks()`` returns check name -> message for this metric's configuration.

    Example:
        >>> from torchmetrics_async.classification import MulticlassAccuracy
        >>> isinstance(MulticlassAccuracy(num_classes=3), SyncFreeClassification)
        True
    """

    _stat_states: tuple[str, ...] = ("tp", "fp", "tn", "fn")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Give an accelerated class torchmetrics' constructor (signature included), then the sync-free setup."""
        super().__init_subclass__(**kwargs)
        origin = torchmetrics_origin(cls)
        if origin is not None and "__init__" not in cls.__dict__:
            cls.__init__ = _forwarding_init(cls, origin)

    def _deferred_checks(self) -> dict[str, str]:
        return {}

    def _init_sync_free(self) -> None:
        """Register the checks and the constants; call at the end of ``__init__``."""
        for name, message in self._deferred_checks().items():
            self._add_deferred_check(name, message)
        self._setup_sync_free()

    def _adopt(self) -> None:
        for name, message in self._deferred_checks().items():
            self._add_deferred_check(name, message)
        super()._adopt()

    def update(self, preds: Tensor, target: Tensor) -> None:
        """Accumulate a batch without a host sync.

        Args:
            preds: predictions, as the torchmetrics class accepts them.
            target: targets, as the torchmetrics class accepts them.

        Example:
            >>> import torch
            >>> from torchmetrics_async.classification import MulticlassAccuracy
            >>> MulticlassAccuracy(num_classes=3).update(torch.tensor([0, 2]), torch.tensor([0, 1]))
        """
        self._update_from_stats(preds, target)

    def _merge_stats(self, stats: tuple) -> None:
        values, violations = stats
        for name, value in zip(self._stat_states, values, strict=True):
            state = getattr(self, name)
            if isinstance(state, list):
                state.append(value)
            else:
                state.add_(value)
        for name, violated in violations.items():
            self._record_violation(name, violated)

    def _batch_violation(self, stats: tuple) -> Tensor | None:
        violations = [violated for violated in stats[1].values() if violated.numel()]
        if not violations:
            return None
        return torch.stack([violated.any() for violated in violations]).any()

    def _batch_value(self, stats: tuple | None) -> Any:
        """The torchmetrics class's own ``compute`` on the batch statistics alone (checks skipped)."""
        state = self.__dict__
        saved = {name: state[name] for name in self._stat_states}
        for name, value in zip(self._stat_states, stats[0], strict=True):
            state[name] = [value] if isinstance(saved[name], list) else value
        try:
            return super().compute()
        finally:
            state.update(saved)

    def compute(self) -> Any:
        """Raise deferred value errors (torchmetrics' messages), then compute as torchmetrics does.

        Returns:
            The metric value.

        Example:
            >>> import torch
            >>> from torchmetrics_async.classification import BinaryAccuracy
            >>> metric = BinaryAccuracy()
            >>> metric.update(torch.tensor([0.9, 0.1]), torch.tensor([1, 1]))
            >>> metric.compute()
            tensor(0.5000)
        """
        self._raise_deferred_checks()
        return super().compute()
