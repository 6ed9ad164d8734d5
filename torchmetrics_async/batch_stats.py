"""The sync-free base of metrics whose ``update`` folds batch statistics (``_batch_stats``) into states."""

from abc import abstractmethod
from typing import Any, ClassVar, NamedTuple

import torch
from torch import Tensor

from torchmetrics_async._torchmetrics import dim_zero_cat
from torchmetrics_async.deferred import mark_static_address
from torchmetrics_async.metric import OWNED_STATES, SyncFreeMixin

__all__ = ["BatchStats", "SyncFreeBatchStats", "all_kept", "assign_state", "in_state_dtypes"]


class BatchStats(NamedTuple):
    """What ``_batch_stats`` returns: values aligned with ``_stat_states`` and check name -> bool violation tensor."""

    values: tuple[Any, ...]
    violations: dict[str, Tensor]


def assign_state(metric: Any, name: str, value: Tensor) -> None:
    """Give state ``name`` torchmetrics' new value, in place where that keeps its dtype and shape.

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


def all_kept(values: list[Tensor] | Tensor) -> list[Tensor] | Tensor:
    """All-true keep-masks for a list state (or its synced concatenation) whose entries all count."""
    if isinstance(values, Tensor):
        return torch.ones_like(values, dtype=torch.bool)
    return [torch.ones_like(v, dtype=torch.bool) for v in values]


def in_state_dtypes(metric: Any, stats: BatchStats) -> BatchStats:
    """``stats`` in the states' dtypes (which ``set_dtype()`` may have cast)."""
    state = metric.__dict__
    values = tuple(
        value.to(state[name].dtype)
        if isinstance(state[name], Tensor) and isinstance(value, Tensor) and value.dtype != state[name].dtype
        else value
        for name, value in zip(metric._stat_states, stats.values, strict=True)
    )
    return BatchStats(values, stats.violations)


class SyncFreeBatchStats(SyncFreeMixin):
    """Base of a family: implement ``_batch_stats``; optionally ``_deferred_checks`` and ``_stat_states``."""

    _stat_states: tuple[str, ...] = ("tp", "fp", "tn", "fn")
    #: States torchmetrics updates as ``state = state + value`` (promoted dtype, broadcast shape), not ``+=``.
    _reassigned_states: ClassVar[frozenset[str]] = frozenset()

    @abstractmethod
    def _batch_stats(self, *args: Any, **kwargs: Any) -> BatchStats:
        """Reduce one batch to its statistics and violations, without a host sync."""

    def _deferred_checks(self) -> dict[str, str]:
        return {}

    def _add_extra_states(self) -> None:
        # torchmetrics' dist_reduce_fx=None leaves out a list state a rank holds nothing in (the other ranks then hang
        # in its gather); "cat" travels in the fused, rank-symmetric gather, and compute() concatenates either.
        for name in self._stat_states:
            if isinstance(self._defaults.get(name), list) and self._reductions[name] is None:
                self._reductions[name] = dim_zero_cat
        for name, message in self._deferred_checks().items():
            self._add_deferred_check(name, message)
        super()._add_extra_states()

    def update(self, preds: Tensor, target: Tensor) -> None:  # the signature of most families; others override
        """Accumulate a batch without a host sync."""
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
        violations = [violated.any() for violated in stats[1].values() if violated.numel()]
        return torch.stack(violations).any() if violations else None

    def _batch_value(self, stats: BatchStats) -> Any:
        """The torchmetrics class's own ``compute`` on the batch statistics alone (checks skipped)."""
        state = self.__dict__
        saved = {name: state[name] for name in self._stat_states}
        defaults = self._defaults
        for name, value in zip(self._stat_states, stats[0], strict=True):
            # torchmetrics' batch value comes from a default state plus the batch: their promoted dtype (the
            # default's, not the held state's, which an earlier float64 batch may have promoted).
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
        """Raise deferred value errors (torchmetrics' messages), then compute as torchmetrics does."""
        self._raise_deferred_checks()
        return super().compute()
