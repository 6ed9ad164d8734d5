"""torchmetrics-async: torchmetrics without host syncs in ``update()``/``forward()``.

Swap one import (``from torchmetrics_async import MeanMetric``) or one line (``accelerate(metric)``).

Example:
    >>> import torch, torchmetrics
    >>> import torchmetrics_async
    >>> metric = torchmetrics_async.MeanMetric()
    >>> isinstance(metric, torchmetrics.MeanMetric)
    True
"""

from torchmetrics_async import aggregation, clustering, detection, regression, retrieval, wrappers  # noqa: F401 - wrappers registers Running
from torchmetrics_async.accelerate import accelerate, is_patched, patch, unpatch
from torchmetrics_async.aggregation import *  # noqa: F403
from torchmetrics_async.classification import tasks
from torchmetrics_async.classification.tasks import *  # noqa: F403
from torchmetrics_async.clustering import *  # noqa: F403
from torchmetrics_async.collector import AsyncMetricCollector
from torchmetrics_async.decorators import scalar_to_tensor_updates, suppress_nan_check, sync_free
from torchmetrics_async.distributed import MetricCollection, sync_metrics
from torchmetrics_async.errors import ShapeMismatchError
from torchmetrics_async.image import (
    MultiScaleStructuralSimilarityIndexMeasure,
    PeakSignalNoiseRatioWithBlockedEffect,
    RelativeAverageSpectralError,
    RootMeanSquaredErrorUsingSlidingWindow,
    SpatialCorrelationCoefficient,
    StructuralSimilarityIndexMeasure,
    VisualInformationFidelity,
)
from torchmetrics_async.nominal import CramersV, FleissKappa, PearsonsContingencyCoefficient, TheilsU, TschuprowsT
from torchmetrics_async.regression import *  # noqa: F403
from torchmetrics_async.retrieval import *  # noqa: F403
from torchmetrics_async.segmentation import DiceScore, GeneralizedDiceScore, MeanIoU
from torchmetrics_async.teardown import shutdown
from torchmetrics_async.text import Perplexity

__all__ = [
    "AsyncMetricCollector",
    "CramersV",
    "DiceScore",
    "FleissKappa",
    "GeneralizedDiceScore",
    "MeanIoU",
    "MetricCollection",
    "PearsonsContingencyCoefficient",
    "Perplexity",
    "ShapeMismatchError",
    "TheilsU",
    "TschuprowsT",
    "accelerate",
    "is_patched",
    "patch",
    "scalar_to_tensor_updates",
    "shutdown",
    "suppress_nan_check",
    "sync_free",
    "sync_metrics",
    "unpatch",
]
__all__ += aggregation.__all__ + clustering.__all__ + tasks.__all__ + regression.__all__ + retrieval.__all__
__all__ += [
    "MultiScaleStructuralSimilarityIndexMeasure",
    "PeakSignalNoiseRatioWithBlockedEffect",
    "RelativeAverageSpectralError",
    "RootMeanSquaredErrorUsingSlidingWindow",
]
__all__ += ["SpatialCorrelationCoefficient", "StructuralSimilarityIndexMeasure", "VisualInformationFidelity"]

#: The release, as pyproject.toml's ``version`` (``tests/test_package.py`` keeps the two equal).
__version__ = "0.1.0"
