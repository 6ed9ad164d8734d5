"""Sync-free regression metrics with torchmetrics' names: ``from torchmetrics_async.regression import R2Score``.

One module per concept: :mod:`~torchmetrics_async.regression.errors` (mean errors, one-pass ``forward``),
:mod:`~torchmetrics_async.regression.moments` (R2, explained variance, Pearson, Concordance: sync-free batch values;
NRMSE), :mod:`~torchmetrics_async.regression.divergence` (KL, Jensen-Shannon),
:mod:`~torchmetrics_async.regression.tweedie` (deferred domain checks),
:mod:`~torchmetrics_async.regression.stored_inputs` (list states: cosine similarity, Spearman, Kendall), on the bases
:mod:`~torchmetrics_async.regression.sums` and :mod:`~torchmetrics_async.regression.lean`.

Example:
    >>> import torch, torchmetrics
    >>> from torchmetrics_async.regression import R2Score
    >>> isinstance(R2Score(), torchmetrics.regression.R2Score)
    True
"""

from torchmetrics_async.regression.divergence import JensenShannonDivergence, KLDivergence
from torchmetrics_async.regression.errors import (
    ContinuousRankedProbabilityScore,
    CriticalSuccessIndex,
    LogCoshError,
    MeanAbsoluteError,
    MeanAbsolutePercentageError,
    MeanSquaredError,
    MeanSquaredLogError,
    MinkowskiDistance,
    RelativeSquaredError,
    SymmetricMeanAbsolutePercentageError,
    WeightedMeanAbsolutePercentageError,
)
from torchmetrics_async.regression.moments import (
    ConcordanceCorrCoef,
    ExplainedVariance,
    NormalizedRootMeanSquaredError,
    PearsonCorrCoef,
    R2Score,
)
from torchmetrics_async.regression.stored_inputs import CosineSimilarity, KendallRankCorrCoef, SpearmanCorrCoef
from torchmetrics_async.regression.tweedie import TweedieDevianceScore

__all__ = [
    "ConcordanceCorrCoef",
    "ContinuousRankedProbabilityScore",
    "CosineSimilarity",
    "CriticalSuccessIndex",
    "ExplainedVariance",
    "JensenShannonDivergence",
    "KLDivergence",
    "KendallRankCorrCoef",
    "LogCoshError",
    "MeanAbsoluteError",
    "MeanAbsolutePercentageError",
    "MeanSquaredError",
    "MeanSquaredLogError",
    "MinkowskiDistance",
    "NormalizedRootMeanSquaredError",
    "PearsonCorrCoef",
    "R2Score",
    "RelativeSquaredError",
    "SpearmanCorrCoef",
    "SymmetricMeanAbsolutePercentageError",
    "TweedieDevianceScore",
    "WeightedMeanAbsolutePercentageError",
]
