"""Sync-free classification metrics with torchmetrics' names (``torchmetrics.classification``).

Example:
    >>> import torch, torchmetrics
    >>> from torchmetrics_async.classification import MulticlassAccuracy
    >>> isinstance(MulticlassAccuracy(num_classes=3), torchmetrics.classification.MulticlassAccuracy)
    True
"""

from torchmetrics_async.classification import hinge, multiclass, multilabel, ranking, roc_scores, tasks
from torchmetrics_async.classification.binary import (
    BinaryAccuracy,
    BinaryConfusionMatrix,
    BinaryF1Score,
    BinaryFBetaScore,
    BinaryHammingDistance,
    BinaryNegativePredictiveValue,
    BinaryPrecision,
    BinaryRecall,
    BinarySpecificity,
    BinaryStatScores,
)
from torchmetrics_async.classification.calibration import BinaryCalibrationError, MulticlassCalibrationError
from torchmetrics_async.classification.confusion_derived import (
    BinaryCohenKappa,
    BinaryJaccardIndex,
    BinaryMatthewsCorrCoef,
    MulticlassCohenKappa,
    MulticlassJaccardIndex,
    MulticlassMatthewsCorrCoef,
    MultilabelJaccardIndex,
    MultilabelMatthewsCorrCoef,
)
from torchmetrics_async.classification.curves import (
    BinaryAUROC,
    BinaryAveragePrecision,
    BinaryPrecisionRecallCurve,
    BinaryROC,
    MulticlassAUROC,
    MulticlassAveragePrecision,
    MulticlassPrecisionRecallCurve,
    MulticlassROC,
    MultilabelAUROC,
    MultilabelAveragePrecision,
    MultilabelPrecisionRecallCurve,
    MultilabelROC,
)
from torchmetrics_async.classification.fixed_point import (
    BinaryPrecisionAtFixedRecall,
    BinaryRecallAtFixedPrecision,
    BinarySensitivityAtSpecificity,
    BinarySpecificityAtSensitivity,
    MulticlassPrecisionAtFixedRecall,
    MulticlassRecallAtFixedPrecision,
    MulticlassSensitivityAtSpecificity,
    MulticlassSpecificityAtSensitivity,
    MultilabelPrecisionAtFixedRecall,
    MultilabelRecallAtFixedPrecision,
    MultilabelSensitivityAtSpecificity,
    MultilabelSpecificityAtSensitivity,
)
from torchmetrics_async.classification.group_fairness import BinaryFairness, BinaryGroupStatRates
from torchmetrics_async.classification.hinge import *  # noqa: F403
from torchmetrics_async.classification.multiclass import *  # noqa: F403
from torchmetrics_async.classification.multilabel import *  # noqa: F403
from torchmetrics_async.classification.ranking import *  # noqa: F403
from torchmetrics_async.classification.roc_scores import *  # noqa: F403
from torchmetrics_async.classification.tasks import *  # noqa: F403

__all__ = [
    "BinaryAUROC",
    "BinaryAccuracy",
    "BinaryAveragePrecision",
    "BinaryCalibrationError",
    "BinaryCohenKappa",
    "BinaryConfusionMatrix",
    "BinaryF1Score",
    "BinaryFBetaScore",
    "BinaryFairness",
    "BinaryGroupStatRates",
    "BinaryHammingDistance",
    "BinaryJaccardIndex",
    "BinaryMatthewsCorrCoef",
    "BinaryNegativePredictiveValue",
    "BinaryPrecision",
    "BinaryPrecisionAtFixedRecall",
    "BinaryPrecisionRecallCurve",
    "BinaryROC",
    "BinaryRecall",
    "BinaryRecallAtFixedPrecision",
    "BinarySensitivityAtSpecificity",
    "BinarySpecificity",
    "BinarySpecificityAtSensitivity",
    "BinaryStatScores",
    "MulticlassAUROC",
    "MulticlassAveragePrecision",
    "MulticlassCalibrationError",
    "MulticlassCohenKappa",
    "MulticlassJaccardIndex",
    "MulticlassMatthewsCorrCoef",
    "MulticlassPrecisionAtFixedRecall",
    "MulticlassPrecisionRecallCurve",
    "MulticlassROC",
    "MulticlassRecallAtFixedPrecision",
    "MulticlassSensitivityAtSpecificity",
    "MulticlassSpecificityAtSensitivity",
    "MultilabelAUROC",
    "MultilabelAveragePrecision",
    "MultilabelJaccardIndex",
    "MultilabelMatthewsCorrCoef",
    "MultilabelPrecisionAtFixedRecall",
    "MultilabelPrecisionRecallCurve",
    "MultilabelROC",
    "MultilabelRecallAtFixedPrecision",
    "MultilabelSensitivityAtSpecificity",
    "MultilabelSpecificityAtSensitivity",
]
__all__ += hinge.__all__
__all__ += multiclass.__all__
__all__ += multilabel.__all__
__all__ += ranking.__all__
__all__ += roc_scores.__all__
__all__ += tasks.__all__
