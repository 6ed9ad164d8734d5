"""Regression metrics that keep their inputs in list states: CosineSimilarity, SpearmanCorrCoef, KendallRankCorrCoef.

Their torchmetrics ``update`` validates shapes and dtypes (metadata) and appends the batch: sync-free. They are
registered through the lean wrapper (:class:`~torchmetrics_async.regression.lean.SyncFreeLean`) and sync their lists
in the fused all_gather. Their ``compute`` needs all inputs at once; SpearmanCorrCoef ranks with ``torch.unique`` and
KendallRankCorrCoef counts ties with ``torch.unique``/``bincount`` (data-dependent shapes), so their ``compute()`` reads
the host, and so does ``forward()``, whose batch value is that ``compute`` on the batch (listed as a caveat of
``forward()``: ``update()`` is sync-free). CosineSimilarity's ``compute`` does not read the host.

Example:
    >>> import torch
    >>> from torchmetrics_async.regression import SpearmanCorrCoef
    >>> metric = SpearmanCorrCoef()
    >>> metric.update(torch.tensor([2.5, 0.0, 2.0, 8.0]), torch.tensor([3.0, -0.5, 2.0, 7.0]))  # no host sync
    >>> metric.compute()
    tensor(1.0000)
"""

import torchmetrics.regression as tm

from torchmetrics_async.regression.lean import SyncFreeLean

__all__ = ["CosineSimilarity", "KendallRankCorrCoef", "SpearmanCorrCoef"]


class CosineSimilarity(SyncFreeLean, tm.CosineSimilarity):
    """No host sync in ``update()`` or ``forward()``."""


class SpearmanCorrCoef(SyncFreeLean, tm.SpearmanCorrCoef):
    """No host sync in ``update()``; ``forward()`` ranks the batch on the host, as ``compute()`` does."""


class KendallRankCorrCoef(SyncFreeLean, tm.KendallRankCorrCoef):
    """No host sync in ``update()``; ``forward()`` counts ties on the host, as ``compute()`` does."""
