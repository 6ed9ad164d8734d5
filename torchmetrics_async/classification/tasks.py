"""Task wrappers (``Accuracy(task=...)``, ...) that return the accelerated task metric.

Each wrapper subclasses the torchmetrics wrapper of the same name, whose ``__new__`` returns a task-specific instance
(``BinaryAccuracy``, ``MulticlassAccuracy``, ``MultilabelAccuracy``). Ours runs that same ``__new__`` (torchmetrics'
own argument handling and errors) with the task classes it names resolved to the accelerated ones, so the task metric is
constructed exactly as direct construction does it, with every argument. (Building torchmetrics' instance and
converting it would lose what torchmetrics' constructors drop: ``BinaryAUROC`` keeps no trace of ``validate_args``.)
Under :func:`torchmetrics_async.patch` torchmetrics' wrappers do the same: they look the task classes up in their
module's globals, which ``patch()`` rebinds.

Example:
    >>> import torchmetrics
    >>> from torchmetrics_async.classification.tasks import Accuracy
    >>> metric = Accuracy(task="binary")
    >>> type(metric).__module__, isinstance(metric, torchmetrics.classification.BinaryAccuracy)
    ('torchmetrics_async.classification.binary', True)
"""

import inspect
import types
from collections.abc import Callable
from typing import Any

import torchmetrics

from torchmetrics_async._torchmetrics import Metric
from torchmetrics_async.registry import _REGISTRY, AutoRegistered

__all__ = [
    "AUROC",
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


def _building_accelerated(new: Callable) -> Callable:
    """The torchmetrics wrapper's ``__new__``, with the registered task classes it names resolved to ours.

    Resolved at each call, against the registry as it is then (a class registered later is found too).
    """
    names = {
        name: _REGISTRY.get(value, value) if isinstance(value, type) else value
        for name, value in new.__globals__.items()
    }
    built = types.FunctionType(new.__code__, names, new.__name__, new.__defaults__, new.__closure__)
    built.__kwdefaults__ = new.__kwdefaults__
    return built


class _AcceleratedTaskWrapper(AutoRegistered):
    """``__new__``: torchmetrics' wrapper code, constructing the accelerated task class directly."""

    _torchmetrics_wrapper: type

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        wrapper = next(base for base in cls.__mro__ if base.__module__.startswith("torchmetrics."))
        cls._torchmetrics_wrapper = wrapper
        # Same constructor arguments as the torchmetrics wrapper, for help() and inspect.signature().
        cls.__signature__ = inspect.signature(wrapper)

    def __new__(cls, *args: Any, **kwargs: Any) -> Metric:
        return _building_accelerated(cls._torchmetrics_wrapper.__new__)(cls, *args, **kwargs)


class StatScores(_AcceleratedTaskWrapper, torchmetrics.StatScores):
    """``torchmetrics.StatScores`` returning the accelerated ``BinaryStatScores``/``Multiclass...``/``Multilabel...``.

    Example:
        >>> import torch
        >>> metric = StatScores(task="multilabel", num_labels=3)
        >>> type(metric).__name__, metric(torch.tensor([[1, 0, 1]]), torch.tensor([[1, 1, 1]]))
        ('MultilabelStatScores', tensor([2, 0, 0, 1, 3]))
    """


class Accuracy(_AcceleratedTaskWrapper, torchmetrics.Accuracy):
    """``torchmetrics.Accuracy`` returning the accelerated task metric.

    Example:
        >>> import torch
        >>> metric = Accuracy(task="binary")
        >>> metric(torch.tensor([0.9, 0.2, 0.7, 0.4]), torch.tensor([1, 0, 0, 0]))
        tensor(0.7500)
    """


class Precision(_AcceleratedTaskWrapper, torchmetrics.Precision):
    """``torchmetrics.Precision`` returning the accelerated task metric.

    Example:
        >>> import torch
        >>> metric = Precision(task="binary")
        >>> metric(torch.tensor([1, 1, 0, 1]), torch.tensor([1, 0, 0, 1]))
        tensor(0.6667)
    """


class Recall(_AcceleratedTaskWrapper, torchmetrics.Recall):
    """``torchmetrics.Recall`` returning the accelerated task metric.

    Example:
        >>> import torch
        >>> metric = Recall(task="multilabel", num_labels=3, average="micro")
        >>> metric(torch.tensor([[1, 1, 1], [0, 1, 0]]), torch.tensor([[1, 0, 1], [0, 0, 1]]))
        tensor(0.6667)
    """


class FBetaScore(_AcceleratedTaskWrapper, torchmetrics.FBetaScore):
    """``torchmetrics.FBetaScore`` returning the accelerated task metric.

    Example:
        >>> import torch
        >>> metric = FBetaScore(task="binary", beta=2.0)
        >>> metric(torch.tensor([0.8, 0.3, 0.6, 0.1]), torch.tensor([1, 0, 0, 1]))
        tensor(0.5000)
    """


class F1Score(_AcceleratedTaskWrapper, torchmetrics.F1Score):
    """``torchmetrics.F1Score`` returning the accelerated task metric.

    Example:
        >>> import torch
        >>> metric = F1Score(task="multilabel", num_labels=3)
        >>> metric(torch.tensor([[2.0, -1.0, 0.5], [-2.0, 1.5, -0.5]]), torch.tensor([[1, 0, 1], [0, 0, 1]]))
        tensor(0.6667)
    """


class Specificity(_AcceleratedTaskWrapper, torchmetrics.Specificity):
    """``torchmetrics.Specificity`` returning the accelerated task metric.

    Example:
        >>> import torch
        >>> metric = Specificity(task="binary")
        >>> metric(torch.tensor([0, 1, 0, 0]), torch.tensor([0, 0, 0, 1]))
        tensor(0.6667)
    """


class HammingDistance(_AcceleratedTaskWrapper, torchmetrics.HammingDistance):
    """``torchmetrics.HammingDistance`` returning the accelerated task metric.

    Example:
        >>> import torch
        >>> metric = HammingDistance(task="binary")
        >>> metric(torch.tensor([0.9, 0.2, 0.7, 0.4]), torch.tensor([1, 0, 0, 0]))
        tensor(0.2500)
    """


class NegativePredictiveValue(_AcceleratedTaskWrapper, torchmetrics.NegativePredictiveValue):
    """``torchmetrics.NegativePredictiveValue`` returning the accelerated task metric.

    Example:
        >>> import torch
        >>> metric = NegativePredictiveValue(task="binary")
        >>> metric(torch.tensor([0, 1, 0, 0]), torch.tensor([0, 0, 0, 1]))
        tensor(0.6667)
    """


class ExactMatch(_AcceleratedTaskWrapper, torchmetrics.ExactMatch):
    """``torchmetrics.ExactMatch`` returning the accelerated task metric (torchmetrics has no binary exact match).

    Example:
        >>> import torch
        >>> metric = ExactMatch(task="multilabel", num_labels=3)
        >>> metric(torch.tensor([[0.9, 0.1, 0.8], [0.2, 0.7, 0.4]]), torch.tensor([[1, 0, 1], [0, 0, 1]]))
        tensor(0.5000)
    """


class ConfusionMatrix(_AcceleratedTaskWrapper, torchmetrics.ConfusionMatrix):
    """``torchmetrics.ConfusionMatrix`` returning the accelerated task metric.

    Example:
        >>> import torch
        >>> metric = ConfusionMatrix(task="binary")
        >>> metric(torch.tensor([0.35, 0.85, 0.48, 0.01]), torch.tensor([1, 1, 0, 0]))
        tensor([[2, 0],
                [1, 1]])
    """


# --- the confusion-matrix-derived, calibration and hinge family


class JaccardIndex(_AcceleratedTaskWrapper, torchmetrics.JaccardIndex):
    """``torchmetrics.JaccardIndex`` returning the accelerated task metric.

    Example:
        >>> import torch
        >>> metric = JaccardIndex(task="multiclass", num_classes=3)
        >>> metric(torch.tensor([2, 1, 0, 0]), torch.tensor([2, 1, 0, 1]))
        tensor(0.6667)
    """


class CohenKappa(_AcceleratedTaskWrapper, torchmetrics.CohenKappa):
    """``torchmetrics.CohenKappa`` returning the accelerated task metric (torchmetrics has no multilabel task).

    Example:
        >>> import torch
        >>> metric = CohenKappa(task="binary")
        >>> metric(torch.tensor([1, 1, 0, 0]), torch.tensor([1, 0, 0, 0]))
        tensor(0.5000)
    """


class MatthewsCorrCoef(_AcceleratedTaskWrapper, torchmetrics.MatthewsCorrCoef):
    """``torchmetrics.MatthewsCorrCoef`` returning the accelerated task metric.

    Example:
        >>> import torch
        >>> metric = MatthewsCorrCoef(task="binary")
        >>> metric(torch.tensor([1, 0, 1, 1]), torch.tensor([1, 0, 0, 1]))
        tensor(0.5774)
    """


class CalibrationError(_AcceleratedTaskWrapper, torchmetrics.CalibrationError):
    """``torchmetrics.CalibrationError`` returning the accelerated task metric (binary or multiclass).

    Example:
        >>> import torch
        >>> metric = CalibrationError(task="binary", n_bins=2)
        >>> metric(torch.tensor([0.25, 0.25, 0.55, 0.75, 0.75]), torch.tensor([0, 0, 1, 1, 1]))
        tensor(0.2900)
    """


class HingeLoss(_AcceleratedTaskWrapper, torchmetrics.HingeLoss):
    """``torchmetrics.HingeLoss`` returning the accelerated task metric (binary or multiclass).

    Example:
        >>> import torch
        >>> metric = HingeLoss(task="binary")
        >>> metric(torch.tensor([0.25, 0.25, 0.55, 0.75, 0.75]), torch.tensor([0, 0, 1, 1, 1]))
        tensor(0.6900)
    """


# --- the precision-recall curve family


class PrecisionRecallCurve(_AcceleratedTaskWrapper, torchmetrics.PrecisionRecallCurve):
    """``torchmetrics.PrecisionRecallCurve`` returning the accelerated task metric.

    Example:
        >>> import torch
        >>> metric = PrecisionRecallCurve(task="binary", thresholds=3)
        >>> type(metric).__name__
        'BinaryPrecisionRecallCurve'
    """


class ROC(_AcceleratedTaskWrapper, torchmetrics.ROC):
    """``torchmetrics.ROC`` returning the accelerated task metric.

    Example:
        >>> metric = ROC(task="multiclass", num_classes=3)
        >>> type(metric).__name__
        'MulticlassROC'
    """


class AUROC(_AcceleratedTaskWrapper, torchmetrics.AUROC):
    """``torchmetrics.AUROC`` returning the accelerated task metric.

    Example:
        >>> import torch
        >>> metric = AUROC(task="binary", thresholds=5)
        >>> metric(torch.tensor([0.1, 0.4, 0.35, 0.8]), torch.tensor([0, 0, 1, 1]))
        tensor(0.8750)
    """


class AveragePrecision(_AcceleratedTaskWrapper, torchmetrics.AveragePrecision):
    """``torchmetrics.AveragePrecision`` returning the accelerated task metric.

    Example:
        >>> metric = AveragePrecision(task="multilabel", num_labels=3)
        >>> type(metric).__name__
        'MultilabelAveragePrecision'
    """


class RecallAtFixedPrecision(_AcceleratedTaskWrapper, torchmetrics.RecallAtFixedPrecision):
    """``torchmetrics.RecallAtFixedPrecision`` returning the accelerated task metric.

    Example:
        >>> metric = RecallAtFixedPrecision(task="binary", min_precision=0.5)
        >>> type(metric).__name__
        'BinaryRecallAtFixedPrecision'
    """


class PrecisionAtFixedRecall(_AcceleratedTaskWrapper, torchmetrics.PrecisionAtFixedRecall):
    """``torchmetrics.PrecisionAtFixedRecall`` returning the accelerated task metric.

    Example:
        >>> metric = PrecisionAtFixedRecall(task="binary", min_recall=0.5)
        >>> type(metric).__name__
        'BinaryPrecisionAtFixedRecall'
    """


class SensitivityAtSpecificity(_AcceleratedTaskWrapper, torchmetrics.SensitivityAtSpecificity):
    """``torchmetrics.SensitivityAtSpecificity`` returning the accelerated task metric.

    Example:
        >>> metric = SensitivityAtSpecificity(task="binary", min_specificity=0.5)
        >>> type(metric).__name__
        'BinarySensitivityAtSpecificity'
    """


class SpecificityAtSensitivity(_AcceleratedTaskWrapper, torchmetrics.SpecificityAtSensitivity):
    """``torchmetrics.SpecificityAtSensitivity`` returning the accelerated task metric.

    Example:
        >>> metric = SpecificityAtSensitivity(task="binary", min_sensitivity=0.5)
        >>> type(metric).__name__
        'BinarySpecificityAtSensitivity'
    """
