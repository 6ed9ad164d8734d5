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
    >>> metric.compute()
    tensor(0.3536)
"""

from torchmetrics_async.metric import SyncFreeMixin

__all__ = ["SyncFreeLean"]


class SyncFreeLean(SyncFreeMixin):
    """Base of a class registered through the lean wrapper: ``class X(SyncFreeLean, torchmetrics.X)``.

    Example:
        >>> import torch
        >>> from torchmetrics_async.regression import CosineSimilarity
        >>> CosineSimilarity(reduction="mean")(torch.tensor([[1.0, 0.0]]), torch.tensor([[1.0, 1.0]]))
        tensor(0.7071)
    """
