"""Sync-free classification metrics with torchmetrics' names (``torchmetrics.classification``).

Example:
    >>> import torch, torchmetrics
    >>> from torchmetrics_async.classification import MulticlassAccuracy
    >>> isinstance(MulticlassAccuracy(num_classes=3), torchmetrics.classification.MulticlassAccuracy)
    True
"""

# Each module's names are its own `__all__`; the list below leaves out the helpers some of them also export.
# ruff: noqa: F405 (the names below come from these star imports: a name none defines fails `import *`)
from torchmetrics_async.classification import hinge, multiclass, multilabel, ranking, roc_scores, tasks
from torchmetrics_async.classification.binary import *  # noqa: F403
from torchmetrics_async.classification.calibration import *  # noqa: F403
from torchmetrics_async.classification.confusion_derived import *  # noqa: F403
from torchmetrics_async.classification.curves import *  # noqa: F403
from torchmetrics_async.classification.fixed_point import *  # noqa: F403
from torchmetrics_async.classification.group_fairness import *  # noqa: F403
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
