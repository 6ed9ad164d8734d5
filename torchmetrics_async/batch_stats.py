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

from abc import abstractmethod
from typing import Any, ClassVar, NamedTuple

import torch
from torch import Tensor

from torchmetrics_async.deferred import mark_static_address
from torchmetrics_async.metric import OWNED_STATES, SyncFreeMixin

__all__ = ["BatchStats", "SyncFreeBatchStats", "assign_state"]


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


def assign_state(metric: Any, name: str, value: Tensor) -> None:
    """Give state ``name`` the value torchmetrics would assign, in place where that keeps its dtype and shape.

    In place keeps the state's address (CUDA graphs, compiled code); a new dtype or shape (torchmetrics promotes and
    broadcasts when it reassigns) makes it a new tensor this metric owns.

    Args:
        metric: a sync-free metric whose states it owns (its update wrapper made sure of that).
        name: the state.
        value: its new value.

    Example:
        >>> import torch
        >>> from torchmetrics_async.regression import MeanSquaredError
        >>> metric = MeanSquaredError()
        >>> before = metric.total
        >>> assign_state(metric, "total", torch.tensor(3))
        >>> metric.total is before, metric.total
        (True, tensor(3))
    """
    state = metric.__dict__
    current = state[name]
    if current.dtype == value.dtype and current.shape == value.shape:
        current.copy_(value)
        return
    mine = mark_static_address(value)
    setattr(metric, name, mine)
    state[OWNED_STATES][name] = mine


class SyncFreeBatchStats(SyncFreeMixin):
    """Base of a family: implement ``_batch_stats``; optionally ``_deferred_checks`` and ``_stat_states``.

    ``_batch_stats(*args, **kwargs)`` returns :class:`BatchStats` without a host sync. ``_deferred_checks()`` returns
    check name -> torchmetrics' message for this configuration. A subclass of a torchmetrics class of the same name
    gets that class's constructor (signature included) and registers itself (see :mod:`torchmetrics_async.registry`).

    Example:
        >>> import torch
        >>> from torchmetrics_async.classification import MulticlassAccuracy
        >>> metric = MulticlassAccuracy(num_classes=3, average="micro")
        >>> first = metric(torch.tensor([0, 2]), torch.tensor([0, 1]))  # forward: this batch's value
        >>> first, metric(torch.tensor([1]), torch.tensor([1])), metric.compute()
        (tensor(0.5000), tensor(1.), tensor(0.6667))
    """

    _stat_states: tuple[str, ...] = ("tp", "fp", "tn", "fn")
    #: States torchmetrics updates as ``state = state + value`` (promoted dtype, broadcast shape), not ``+=``.
    _reassigned_states: ClassVar[frozenset[str]] = frozenset()

    @abstractmethod
    def _batch_stats(self, *args: Any, **kwargs: Any) -> BatchStats:
        """Reduce one batch to its statistics and violations, without a host sync."""

    def _deferred_checks(self) -> dict[str, str]:
        return {}

    def _add_extra_states(self) -> None:
        for name, message in self._deferred_checks().items():
            self._add_deferred_check(name, message)
        super()._add_extra_states()

    def update(self, preds: Tensor, target: Tensor) -> None:  # the signature of most families; others override
        """Accumulate a batch without a host sync.

        Args:
            preds: predictions, as the torchmetrics class accepts them.
            target: targets, as the torchmetrics class accepts them.

        Example:
            >>> import torch
            >>> from torchmetrics_async.classification import MulticlassAccuracy
            >>> metric = MulticlassAccuracy(num_classes=3)
            >>> metric.update(torch.tensor([0, 2]), torch.tensor([0, 1]))
            >>> metric.tp, metric.fn
            (tensor([1, 0, 0]), tensor([0, 1, 0]))
        """
        stats = self._batch_stats(preds, target)  # _update_from_stats, inlined: one frame less on the hot path
        if stats is not None:
            self._merge_stats(stats)

    def _merge_stats(self, stats: BatchStats) -> None:
        values, violations = stats
        state = self.__dict__
        tensors, added = [], []
        for name, value in zip(self._stat_states, values, strict=True):
            target = state[name]
            if isinstance(target, list):
                target.append(value)
            elif name in self._reassigned_states:
                assign_state(self, name, target + value)
            elif isinstance(value, Tensor):
                tensors.append(target)
                added.append(value)
            else:  # a Python number (a count some families keep on the host): a kernel argument of add_
                target.add_(value)
        # Every tensor state in one dispatcher call (one fused launch on a GPU where dtypes and shapes match).
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
        defaults = self._defaults
        for name, value in zip(self._stat_states, stats[0], strict=True):
            # torchmetrics computes the batch value from a default state plus the batch: their promoted dtype
            # (a float64 default after set_dtype with integer counts; float64 inputs into a float32 default). The
            # default, not the held state: a reassigned state promoted by an earlier float64 batch stays float64.
            default = defaults[name]
            if isinstance(default, list):
                state[name] = [value]
            elif isinstance(value, Tensor):
                state[name] = value.to(torch.promote_types(value.dtype, default.dtype))
            else:  # a Python number (a count some families keep on the host)
                state[name] = value
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
