"""The lean update wrapper alone: torchmetrics' own ``update``, ``compute`` and ``forward``.

For classes whose torchmetrics ``update`` is sync-free and whose states are not plain sums: they gain the lean update
wrapper, in-place reset, the fused sync and registration; every value is torchmetrics' code unchanged.
"""

from torchmetrics_async.metric import SyncFreeMixin

__all__ = ["SyncFreeLean"]


class SyncFreeLean(SyncFreeMixin):
    """Base of a class registered through the lean wrapper: ``class X(SyncFreeLean, torchmetrics.X)``."""
