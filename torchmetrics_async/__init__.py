"""torchmetrics-async: torchmetrics without host syncs in ``update()``/``forward()``.

Swap one import (``from torchmetrics_async import MeanMetric``) or one line (``accelerate(metric)``).

Example:
    >>> import torch, torchmetrics
    >>> import torchmetrics_async
    >>> metric = torchmetrics_async.MeanMetric()
    >>> isinstance(metric, torchmetrics.MeanMetric)
    True
"""

# --- segmentation, text, retrieval families
from torchmetrics_async import retrieval, wrappers  # noqa: F401 - wrappers: registers the accelerated Running
from torchmetrics_async.accelerate import accelerate, is_patched, patch, unpatch
from torchmetrics_async.aggregation import (
    CatMetric,
    MaxMetric,
    MeanMetric,
    MinMetric,
    RunningMean,
    RunningSum,
    SumMetric,
)
from torchmetrics_async.classification.tasks import (
    AUROC,
    ROC,
    Accuracy,
    AveragePrecision,
    CalibrationError,
    CohenKappa,
    ConfusionMatrix,
    ExactMatch,
    F1Score,
    FBetaScore,
    HammingDistance,
    HingeLoss,
    JaccardIndex,
    MatthewsCorrCoef,
    NegativePredictiveValue,
    Precision,
    PrecisionAtFixedRecall,
    PrecisionRecallCurve,
    Recall,
    RecallAtFixedPrecision,
    SensitivityAtSpecificity,
    Specificity,
    SpecificityAtSensitivity,
    StatScores,
)
from torchmetrics_async.collector import AsyncMetricCollector
from torchmetrics_async.coverage import CoverageRow, accelerated_coverage
from torchmetrics_async.decorators import scalar_to_tensor_updates, suppress_nan_check, sync_free
from torchmetrics_async.distributed import MetricCollection, sync_metrics
from torchmetrics_async.errors import ShapeMismatchError
from torchmetrics_async.image import SpatialCorrelationCoefficient, VisualInformationFidelity
from torchmetrics_async.nominal import CramersV, FleissKappa, PearsonsContingencyCoefficient, TheilsU, TschuprowsT
from torchmetrics_async.regression import (
    ConcordanceCorrCoef,
    ContinuousRankedProbabilityScore,
    CosineSimilarity,
    CriticalSuccessIndex,
    ExplainedVariance,
    JensenShannonDivergence,
    KendallRankCorrCoef,
    KLDivergence,
    LogCoshError,
    MeanAbsoluteError,
    MeanAbsolutePercentageError,
    MeanSquaredError,
    MeanSquaredLogError,
    MinkowskiDistance,
    NormalizedRootMeanSquaredError,
    PearsonCorrCoef,
    R2Score,
    RelativeSquaredError,
    SpearmanCorrCoef,
    SymmetricMeanAbsolutePercentageError,
    TweedieDevianceScore,
    WeightedMeanAbsolutePercentageError,
)
from torchmetrics_async.retrieval import *  # noqa: F403 - every retrieval class, as listed in its __all__
from torchmetrics_async.segmentation import DiceScore, GeneralizedDiceScore, MeanIoU
from torchmetrics_async.teardown import shutdown
from torchmetrics_async.text import Perplexity

__all__ = [
    "AUROC",
    "ROC",
    "Accuracy",
    "AsyncMetricCollector",
    "AveragePrecision",
    "CalibrationError",
    "CatMetric",
    "CohenKappa",
    "ConcordanceCorrCoef",
    "ConfusionMatrix",
    "ContinuousRankedProbabilityScore",
    "CosineSimilarity",
    "CoverageRow",
    "CriticalSuccessIndex",
    "ExactMatch",
    "ExplainedVariance",
    "F1Score",
    "FBetaScore",
    "HammingDistance",
    "HingeLoss",
    "JaccardIndex",
    "JensenShannonDivergence",
    "KLDivergence",
    "KendallRankCorrCoef",
    "LogCoshError",
    "MatthewsCorrCoef",
    "MaxMetric",
    "MeanAbsoluteError",
    "MeanAbsolutePercentageError",
    "MeanMetric",
    "MeanSquaredError",
    "MeanSquaredLogError",
    "MetricCollection",
    "MinMetric",
    "MinkowskiDistance",
    "NegativePredictiveValue",
    "NormalizedRootMeanSquaredError",
    "PearsonCorrCoef",
    "Precision",
    "PrecisionAtFixedRecall",
    "PrecisionRecallCurve",
    "R2Score",
    "Recall",
    "RecallAtFixedPrecision",
    "RelativeSquaredError",
    "RunningMean",
    "RunningSum",
    "SensitivityAtSpecificity",
    "ShapeMismatchError",
    "SpearmanCorrCoef",
    "Specificity",
    "SpecificityAtSensitivity",
    "StatScores",
    "SumMetric",
    "SymmetricMeanAbsolutePercentageError",
    "TweedieDevianceScore",
    "WeightedMeanAbsolutePercentageError",
    "accelerate",
    "accelerated_coverage",
    "is_patched",
    "patch",
    "scalar_to_tensor_updates",
    "shutdown",
    "suppress_nan_check",
    "sync_free",
    "sync_metrics",
    "unpatch",
]

__all__ += ["DiceScore", "GeneralizedDiceScore", "MeanIoU", "Perplexity"]
__all__ += ["CramersV", "FleissKappa", "PearsonsContingencyCoefficient", "TheilsU", "TschuprowsT"]
__all__ += retrieval.__all__
__all__ += ["SpatialCorrelationCoefficient", "VisualInformationFidelity"]

#: The release, as pyproject.toml's ``version`` (``tests/test_package.py`` keeps the two equal).
__version__ = "0.1.0"
