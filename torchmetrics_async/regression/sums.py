"""The base of regression metrics whose states are sums: batch sums folded in place, the batch value from them.

Most torchmetrics regression metrics (the mean errors, R2, explained variance, the divergences) reduce a batch to a
few sums (``sum_squared_error``, ``total``, ...) and add them to their states; their ``compute`` divides. Their
``update`` is sync-free already; what this base adds is the package's lean update wrapper, in-place reset, fused sync,
compile-safe update count and a one-pass ``forward`` (the batch sums are computed once, added to the states, and the
batch value is torchmetrics' own ``compute`` on them), where torchmetrics' ``forward`` copies, resets, updates,
computes and merges every state.

torchmetrics adds some states in place (``self.total += n``: the state keeps its dtype) and reassigns others
(``self.sum_error = self.sum_error + x``: the state takes the promoted dtype and the broadcast shape, e.g. a 0-dim
default becomes a vector on a multi-output batch). A class names the reassigned ones in ``_reassigned_states``; both
are reproduced exactly, in place wherever the result keeps the state's dtype and shape.

Example:
    >>> import torch
    >>> from torchmetrics_async.regression import MeanSquaredError
    >>> metric = MeanSquaredError()
    >>> metric(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 4.0])), metric.compute()
    (tensor(2.), tensor(2.))
"""

from typing import Any

import torch

from torchmetrics_async.batch_stats import BatchStats, SyncFreeBatchStats

__all__ = ["SyncFreeSums"]


class SyncFreeSums(SyncFreeBatchStats):
    """Batch sums added into sum-reduced states; the batch value is torchmetrics' ``compute`` on the batch sums.

    A subclass implements ``_batch_stats`` (torchmetrics' functional update, values aligned with ``_stat_states``,
    Python numbers welcome) and lists the states torchmetrics reassigns rather than adds in place.

    Example:
        >>> import torch
        >>> from torchmetrics_async.regression import MeanSquaredError
        >>> metric = MeanSquaredError()
        >>> metric(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 4.0])), metric.sum_squared_error, metric.total
        (tensor(2.), tensor([4.]), tensor(2))
    """

    _stat_states: tuple[str, ...] = ()

    def _batch_states(self, values: tuple[Any, ...]) -> tuple[Any, ...]:
        """What torchmetrics' states hold after ``reset()`` and an ``update`` of the batch alone (tensors, lists)."""
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
