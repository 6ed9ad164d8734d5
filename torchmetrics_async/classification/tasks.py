"""Task wrappers (``Accuracy(task=...)``, ...) that return the accelerated task metric.

Each runs the torchmetrics wrapper's own ``__new__`` with the task classes it names resolved to the accelerated ones,
so the task metric is built as direct construction builds it, with every argument (converting torchmetrics' instance
would lose what its constructors drop, e.g. ``BinaryAUROC``'s ``validate_args``).
"""

import inspect
import types
from typing import Any

import torchmetrics

from torchmetrics_async._torchmetrics import Metric
from torchmetrics_async.registry import _REGISTRY, AutoRegistered

__all__ = [
    "AUROC",
    "EER",
    "ROC",
    "Accuracy",
    "AveragePrecision",
    "CalibrationError",
    "CohenKappa",
    "ConfusionMatrix",
    "ExactMatch",
    "F1Score",
    "FBetaScore",
    "HammingDistance",
    "HingeLoss",
    "JaccardIndex",
    "LogAUC",
    "MatthewsCorrCoef",
    "NegativePredictiveValue",
    "Precision",
    "PrecisionAtFixedRecall",
    "PrecisionRecallCurve",
    "Recall",
    "RecallAtFixedPrecision",
    "SensitivityAtSpecificity",
    "Specificity",
    "SpecificityAtSensitivity",
    "StatScores",
]


class _AcceleratedTaskWrapper(AutoRegistered):
    """``__new__``: torchmetrics' wrapper code, constructing the accelerated task class directly."""

    _torchmetrics_wrapper: type

    def __new__(cls, *args: Any, **kwargs: Any) -> Metric:
        # The wrapper's __new__ with its registered task classes resolved to ours (at each call).
        new = cls._torchmetrics_wrapper.__new__
        names = {
            name: _REGISTRY.get(value, value) if isinstance(value, type) else value
            for name, value in new.__globals__.items()
        }
        built = types.FunctionType(new.__code__, names, new.__name__, new.__defaults__, new.__closure__)
        built.__kwdefaults__ = new.__kwdefaults__
        return built(cls, *args, **kwargs)


def _task_wrapper(wrapper: type) -> type:
    """The accelerated class of one torchmetrics task wrapper: its name, this module (so pickled by reference)."""
    namespace = {
        "__module__": __name__,
        "__qualname__": wrapper.__name__,
        "__doc__": (
            "The task metric it returns is the accelerated ``Binary...``/``Multiclass...``/``Multilabel...`` class,"
            " built by torchmetrics' own wrapper code with every argument."
        ),
        "_torchmetrics_wrapper": wrapper,
        # Same constructor arguments as the torchmetrics wrapper, for help() and inspect.signature().
        "__signature__": inspect.signature(wrapper),
    }
    return type(wrapper.__name__, (_AcceleratedTaskWrapper, wrapper), namespace)


# The table: one accelerated class per torchmetrics task wrapper (torchmetrics' docstring, see _docs.py).
StatScores = _task_wrapper(torchmetrics.StatScores)
Accuracy = _task_wrapper(torchmetrics.Accuracy)
Precision = _task_wrapper(torchmetrics.Precision)
Recall = _task_wrapper(torchmetrics.Recall)
FBetaScore = _task_wrapper(torchmetrics.FBetaScore)
F1Score = _task_wrapper(torchmetrics.F1Score)
Specificity = _task_wrapper(torchmetrics.Specificity)
HammingDistance = _task_wrapper(torchmetrics.HammingDistance)
NegativePredictiveValue = _task_wrapper(torchmetrics.NegativePredictiveValue)
ExactMatch = _task_wrapper(torchmetrics.ExactMatch)
ConfusionMatrix = _task_wrapper(torchmetrics.ConfusionMatrix)
JaccardIndex = _task_wrapper(torchmetrics.JaccardIndex)
CohenKappa = _task_wrapper(torchmetrics.CohenKappa)
MatthewsCorrCoef = _task_wrapper(torchmetrics.MatthewsCorrCoef)
CalibrationError = _task_wrapper(torchmetrics.CalibrationError)
HingeLoss = _task_wrapper(torchmetrics.HingeLoss)
PrecisionRecallCurve = _task_wrapper(torchmetrics.PrecisionRecallCurve)
ROC = _task_wrapper(torchmetrics.ROC)
AUROC = _task_wrapper(torchmetrics.AUROC)
AveragePrecision = _task_wrapper(torchmetrics.AveragePrecision)
RecallAtFixedPrecision = _task_wrapper(torchmetrics.RecallAtFixedPrecision)
PrecisionAtFixedRecall = _task_wrapper(torchmetrics.PrecisionAtFixedRecall)
SensitivityAtSpecificity = _task_wrapper(torchmetrics.SensitivityAtSpecificity)
SpecificityAtSensitivity = _task_wrapper(torchmetrics.SpecificityAtSensitivity)
EER = _task_wrapper(torchmetrics.classification.EER)
LogAUC = _task_wrapper(torchmetrics.classification.LogAUC)
