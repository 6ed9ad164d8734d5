"""CosineSimilarity, SpearmanCorrCoef, KendallRankCorrCoef: list states, torchmetrics' sync-free ``update``.

Spearman and Kendall rank and count ties with ``torch.unique`` in ``compute()``, so their ``forward()`` reads the host.
"""

import torchmetrics.regression as tm

from torchmetrics_async.metric import SyncFreeMixin

__all__ = ["CosineSimilarity", "KendallRankCorrCoef", "SpearmanCorrCoef"]


class CosineSimilarity(SyncFreeMixin, tm.CosineSimilarity):
    """No host sync in ``update()`` or ``forward()``."""


class SpearmanCorrCoef(SyncFreeMixin, tm.SpearmanCorrCoef):
    """No host sync in ``update()``; ``forward()`` ranks the batch on the host, as ``compute()`` does."""


class KendallRankCorrCoef(SyncFreeMixin, tm.KendallRankCorrCoef):
    """No host sync in ``update()``; ``forward()`` counts ties on the host, as ``compute()`` does."""
