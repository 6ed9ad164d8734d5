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
from torchmetrics_async import retrieval
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
    Accuracy,
    ConfusionMatrix,
    ExactMatch,
    F1Score,
    FBetaScore,
    HammingDistance,
    NegativePredictiveValue,
    Precision,
    Recall,
    Specificity,
    StatScores,
)
from torchmetrics_async.collector import AsyncMetricCollector
from torchmetrics_async.coverage import CoverageRow, accelerated_coverage
from torchmetrics_async.decorators import scalar_to_tensor_updates, suppress_nan_check, sync_free
from torchmetrics_async.distributed import MetricCollection, sync_metrics
from torchmetrics_async.retrieval import *  # noqa: F403 - every retrieval class, as listed in its __all__
from torchmetrics_async.segmentation import DiceScore, GeneralizedDiceScore, MeanIoU
from torchmetrics_async.text import Perplexity

__all__ = [
    "Accuracy",
    "AsyncMetricCollector",
    "CatMetric",
    "ConfusionMatrix",
    "CoverageRow",
    "ExactMatch",
    "F1Score",
    "FBetaScore",
    "HammingDistance",
    "MaxMetric",
    "MeanMetric",
    "MetricCollection",
    "MinMetric",
    "NegativePredictiveValue",
    "Precision",
    "Recall",
    "RunningMean",
    "RunningSum",
    "Specificity",
    "StatScores",
    "SumMetric",
    "accelerate",
    "accelerated_coverage",
    "is_patched",
    "patch",
    "scalar_to_tensor_updates",
    "suppress_nan_check",
    "sync_free",
    "sync_metrics",
    "unpatch",
]

__all__ += ["DiceScore", "GeneralizedDiceScore", "MeanIoU", "Perplexity"]
__all__ += retrieval.__all__
