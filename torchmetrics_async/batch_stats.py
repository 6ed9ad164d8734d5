"""The sync-free base of metrics whose ``update`` folds batch statistics into states: the hook contract of a family.

Most torchmetrics classes share one ``update`` per family (``BinaryStatScores``, ``MulticlassStatScores``, the binned
curves, the regression moments, ...) and differ only in ``compute``. Here a family implements one hook,
``_batch_stats`` (a sync-free kernel turning the update's arguments into :class:`BatchStats`: values aligned with
``_stat_states`` and the batch's deferred-check violations); :class:`SyncFreeBatchStats` folds them into the states
in place and derives ``forward``'s batch value by running the torchmetrics class's own ``compute`` on them.

Value checks that need device data (labels out of range, non-binary targets, probabilities outside [0, 1]) cannot be
raised in ``update`` without a host sync. They are recorded in bool metric states (reduced with ``max``, so synced
and checkpointed with the metric) and raised by ``compute()``: one host read for all of them. Shape, dtype and
argument checks need no device data and stay eager.

Example:
    >>> import torch
    >>> from torchmetrics_async.classification import MulticlassAccuracy
    >>> metric = MulticlassAccuracy(num_classes=3)
    >>> stats = metric._batch_stats(torch.tensor([0, 2]), torch.tensor([0, 1]))
    >>> isinstance(stats, BatchStats), sorted(stats.violations)
    (True, ['invalid_preds', 'invalid_target'])
"""

import inspect
from abc import abstractmethod
from typing import Any, NamedTuple

import torch
from torch import Tensor

from torchmetrics_async._torchmetrics import torchmetrics_origin
from torchmetrics_async.deferred import DeferredChecks
from torchmetrics_async.metric import OnePassForward, SyncFreeMixin

__all__ = ["BatchStats", "SyncFreeBatchStats"]


class BatchStats(NamedTuple):
    """What ``_batch_stats`` returns: the batch's statistics and the deferred checks it violated.

    Example:
        >>> import torch
        >>> BatchStats((torch.tensor(1),), {}).values
        (tensor(1),)
    """

    values: tuple[Any, ...]
    """Aligned with ``_stat_states``: added in place to tensor states, appended to list states."""
    violations: dict[str, Tensor]
    """Check name (see ``_deferred_checks``) -> bool tensor, any ``True`` meaning the batch violated it."""


def _forwarding_init(cls: type, origin: type) -> Any:
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        super(cls, self).__init__(*args, **kwargs)
        self._init_sync_free()

    __init__.__signature__ = inspect.signature(origin.__init__)  # type: ignore[attr-defined]
    __init__.__doc__ = f"Same arguments as ``{origin.__module__}.{origin.__name__}``."
    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    return __init__


class SyncFreeBatchStats(SyncFreeMixin, OnePassForward, DeferredChecks):
    """Base of a family: implement ``_batch_stats``; optionally ``_deferred_checks`` and ``_stat_states``.

    ``_batch_stats(*args, **kwargs)`` returns :class:`BatchStats` without a host sync. ``_deferred_checks()`` returns
    check name -> torchmetrics' message for this configuration. A subclass of a torchmetrics class of the same name
    gets that class's constructor (signature included) and registers itself (see :mod:`torchmetrics_async.registry`).

    Example:
        >>> from torchmetrics_async.classification import MulticlassAccuracy
        >>> isinstance(MulticlassAccuracy(num_classes=3), SyncFreeBatchStats)
        True
    """

    _stat_states: tuple[str, ...] = ("tp", "fp", "tn", "fn")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Give an accelerated class torchmetrics' constructor (signature included), then the sync-free setup."""
        super().__init_subclass__(**kwargs)
        origin = torchmetrics_origin(cls)
        if origin is not None and "__init__" not in cls.__dict__:
            cls.__init__ = _forwarding_init(cls, origin)

    @abstractmethod
    def _batch_stats(self, *args: Any, **kwargs: Any) -> BatchStats:
        """Reduce one batch to its statistics and violations, without a host sync."""

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

    def update(self, preds: Tensor, target: Tensor) -> None:  # the signature of most families; others override
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

    def _merge_stats(self, stats: BatchStats) -> None:
        values, violations = stats
        state = self.__dict__
        tensors, added = [], []
        for name, value in zip(self._stat_states, values, strict=True):
            target = state[name]
            if isinstance(target, list):
                target.append(value)
            else:
                tensors.append(target)
                added.append(value)
        # Every tensor state and every flag in one dispatcher call (one launch per dtype on a GPU).
        self._add_with_violations(tensors, added, violations)

    def _batch_violation(self, stats: BatchStats) -> Tensor | None:
        violations = [violated for violated in stats[1].values() if violated.numel()]
        if not violations:
            return None
        return torch.stack([violated.any() for violated in violations]).any()

    def _batch_value(self, stats: BatchStats) -> Any:
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
