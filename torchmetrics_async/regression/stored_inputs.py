"""Regression metrics that keep their inputs in list states: CosineSimilarity, SpearmanCorrCoef, KendallRankCorrCoef.

Lean-wrapped (sync-free ``update``). Spearman and Kendall rank and count ties with ``torch.unique`` in ``compute()``,
so their ``forward()`` (``compute`` on the batch) reads the host too.
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
