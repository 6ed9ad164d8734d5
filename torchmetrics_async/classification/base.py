"""The sync-free base of the classification metrics (see :mod:`torchmetrics_async.batch_stats`).

torchmetrics' stat-score family shares one ``update`` per task (``BinaryStatScores``, ``MulticlassStatScores``,
``MultilabelStatScores``); the subclasses (``Accuracy``, ``Precision``, ``F1Score``, ...) only change ``compute``.
A task mixin here supplies ``_batch_stats``; :class:`~torchmetrics_async.batch_stats.SyncFreeBatchStats` does the rest.

Example:
    >>> from torchmetrics_async.classification import MulticlassAccuracy
    >>> isinstance(MulticlassAccuracy(num_classes=3), SyncFreeClassification)
    True
"""

from torchmetrics_async.batch_stats import BatchStats, SyncFreeBatchStats

__all__ = ["BatchStats", "SyncFreeClassification"]

SyncFreeClassification = SyncFreeBatchStats
