"""Sync-free regression metrics with torchmetrics' names: ``from torchmetrics_async.regression import R2Score``."""

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
