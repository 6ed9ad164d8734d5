"""Registration through the lean update wrapper alone: torchmetrics' own ``update``, ``compute`` and ``forward``.

For a class whose torchmetrics ``update`` (and ``forward``) is already sync-free and whose states are not plain sums
(running means and extrema, lists of inputs), subclassing :class:`SyncFreeLean` gives the package's lean update
wrapper (less host time per call, a compile-safe update count), in-place reset and the fused distributed sync, and
registers the class, while every value comes from torchmetrics' code unchanged.

Example:
    >>> import torch
    >>> from torchmetrics_async.regression import NormalizedRootMeanSquaredError
    >>> metric = NormalizedRootMeanSquaredError()
    >>> metric.update(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 3.0]))
    >>> isinstance(metric, SyncFreeLean)
    True
"""

from typing import Any

from torchmetrics_async._torchmetrics import torchmetrics_origin
from torchmetrics_async.batch_stats import _forwarding_init
from torchmetrics_async.metric import SyncFreeMixin

__all__ = ["SyncFreeLean"]


class SyncFreeLean(SyncFreeMixin):
    """Base of a class registered through the lean wrapper: ``class X(SyncFreeLean, torchmetrics.X)``.

    Example:
        >>> from torchmetrics_async.regression import CosineSimilarity
        >>> issubclass(CosineSimilarity, SyncFreeLean)
        True
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Give the class torchmetrics' constructor (signature included), followed by the sync-free setup."""
        super().__init_subclass__(**kwargs)
        origin = torchmetrics_origin(cls)
        if origin is not None and "__init__" not in cls.__dict__:
            cls.__init__ = _forwarding_init(cls, origin)

    def _init_sync_free(self) -> None:
        self._setup_sync_free()
