"""The base of regression metrics whose states are sums: batch sums folded in place, the batch value from them.

torchmetrics adds some states in place (``+=``: the dtype stays) and reassigns others (promoted dtype, broadcast
shape); a class names the latter in ``_reassigned_states``.
"""

from collections.abc import Callable
from typing import Any, ClassVar

import torch
from torch import Tensor

from torchmetrics_async.batch_stats import BatchStats, SyncFreeBatchStats

__all__ = ["SyncFreeSums"]


class SyncFreeSums(SyncFreeBatchStats):
    """Batch sums (``_batch_stats``: torchmetrics' functional update) added into states; batch value from them alone."""

    _stat_states: tuple[str, ...] = ()  # a property where it depends on a constructor argument
    # torch.jit.script compiles properties unless listed here.
    __jit_unused_properties__: ClassVar[list[str]] = [*SyncFreeBatchStats.__jit_unused_properties__, "_stat_states"]
    #: torchmetrics' functional update, where it gives the batch sums of ``(preds, target)`` in ``_stat_states`` order.
    _sums_update: Callable[[Tensor, Tensor], tuple] | None = None

    def _batch_stats(self, preds: Tensor, target: Tensor) -> BatchStats:
        return BatchStats(self._sums_update(preds, target), {})  # type: ignore[misc]

    def _batch_states(self, values: tuple[Any, ...]) -> tuple[Any, ...]:
        """What torchmetrics' states hold after ``reset()`` and an ``update`` of the batch alone."""
        states = []
        for name, value in zip(self._stat_states, values, strict=True):
            default = self._defaults[name]
            if isinstance(default, list):
                states.append(value)  # SyncFreeBatchStats._batch_value wraps it in a list
            elif name in self._reassigned_states:
                states.append(default + value)
            else:  # `default += value`: the default's dtype, computed in the promoted one
                states.append(torch.add(default, value).to(default.dtype))
        return tuple(states)

    def _batch_value(self, stats: BatchStats) -> Any:
        """Torchmetrics' own ``compute`` on the states the batch alone gives."""
        return super()._batch_value(BatchStats(self._batch_states(stats[0]), stats[1]))
