"""Sync-free fixed-point curve metrics (recall at precision, sensitivity at specificity, ...), all tasks.

They share the curves' ``update``. torchmetrics finds the best point with host reads (a boolean index, ``if not
indices.any()``, Python's ``max``); ``forward()``'s binned batch value finds it with masked maxima on the device.
"""

import torch
import torchmetrics.classification as tm
from torch import Tensor

from torchmetrics_async.classification.curves import (
    _BinaryCurve,
    _MulticlassCurve,
    _MultilabelCurve,
    _SyncFreeCurve,
    binned_curve,
)

__all__ = [
    "BinaryPrecisionAtFixedRecall",
    "BinaryRecallAtFixedPrecision",
    "BinarySensitivityAtSpecificity",
    "BinarySpecificityAtSensitivity",
    "MulticlassPrecisionAtFixedRecall",
    "MulticlassRecallAtFixedPrecision",
    "MulticlassSensitivityAtSpecificity",
    "MulticlassSpecificityAtSensitivity",
    "MultilabelPrecisionAtFixedRecall",
    "MultilabelRecallAtFixedPrecision",
    "MultilabelSensitivityAtSpecificity",
    "MultilabelSpecificityAtSensitivity",
    "best_under_constraint",
    "lexicographic_max",
]


def lexicographic_max(columns: tuple[Tensor, ...], mask: Tensor) -> tuple[Tensor, ...]:
    """Torchmetrics' ``_lexargmax`` with masked maxima: the largest ``(columns[0], ...)`` where ``mask``, per row.

    Example:
        >>> lexicographic_max((torch.tensor([1.0, 2.0, 2.0]), torch.tensor([5.0, 3.0, 4.0])), torch.tensor([True] * 3))
        (tensor(2.), tensor(4.))
    """
    best = []
    tied = mask
    for column in columns:
        top = column.masked_fill(torch.logical_not(tied), -torch.inf).max(-1, keepdim=True).values
        tied = tied & (column == top)
        best.append(top.squeeze(-1))
    return tuple(best)


def best_under_constraint(
    values: Tensor, constrained: Tensor, thresholds: Tensor, minimum: float
) -> tuple[Tensor, Tensor]:
    """Torchmetrics' ``_sensitivity_at_specificity``/``_specificity_at_sensitivity`` over the last dimension.

    Example:
        >>> sensitivity, specificity = torch.tensor([0.2, 0.9, 1.0]), torch.tensor([1.0, 0.5, 0.0])
        >>> best_under_constraint(sensitivity, specificity, torch.tensor([1.0, 0.5, 0.0]), 0.5)
        (tensor(0.9000), tensor(0.5000))
    """
    mask = constrained >= minimum
    thresholds = thresholds.expand_as(values)
    index = values.masked_fill(torch.logical_not(mask), -torch.inf).argmax(-1, keepdim=True)
    found = mask.any(-1)
    best = torch.where(found, values.gather(-1, index).squeeze(-1), 0)
    return best, torch.where(found, thresholds.gather(-1, index).squeeze(-1), 1e6)


# The binned batch value of each kind (a class attribute `_binned_value`: a method, not one more base class).
def _recall_at_fixed_precision(self: _SyncFreeCurve, confmat: Tensor) -> tuple[Tensor, Tensor]:
    """Torchmetrics' ``_recall_at_precision`` over the curves' last dimension, without host reads."""
    precision, recall, thresholds = binned_curve(self, confmat, roc=False)
    points = min(recall.shape[-1], precision.shape[-1], thresholds.shape[-1])
    dtype = torch.promote_types(torch.promote_types(recall.dtype, precision.dtype), thresholds.dtype)
    recall, precision = recall[..., :points].to(dtype), precision[..., :points].to(dtype)
    thresholds = thresholds[..., :points].to(dtype).expand_as(recall)
    mask = precision >= self.min_precision
    best_recall, _, best_threshold = lexicographic_max((recall, precision, thresholds), mask)
    found = mask.any(-1)
    best_recall = torch.where(found, best_recall, 0)
    return best_recall, torch.where(best_recall == 0, torch.nan, best_threshold)


def _precision_at_fixed_recall(self: _SyncFreeCurve, confmat: Tensor) -> tuple[Tensor, Tensor]:
    """Torchmetrics' ``_precision_at_recall`` over the curves' last dimension, with Python's ``max`` NaN behaviour."""
    precision, recall, thresholds = binned_curve(self, confmat, roc=False)
    points = min(recall.shape[-1], precision.shape[-1], thresholds.shape[-1])
    precision, recall = precision[..., :points], recall[..., :points]
    thresholds = thresholds[..., :points].expand_as(precision)
    mask = recall >= self.min_recall
    found = mask.any(-1)
    first = mask.long().argmax(-1, keepdim=True)
    first_precision = precision.gather(-1, first).squeeze(-1)
    first_threshold = thresholds.gather(-1, first).squeeze(-1)
    stuck = found & torch.isnan(first_precision)
    dtype = torch.promote_types(torch.promote_types(recall.dtype, precision.dtype), thresholds.dtype)
    columns = (precision.to(dtype), recall.to(dtype), thresholds.to(dtype))
    best_precision, _, best_threshold = lexicographic_max(columns, mask & torch.logical_not(torch.isnan(precision)))
    best_precision = torch.where(stuck, first_precision.to(dtype), best_precision).to(precision.dtype)
    best_threshold = torch.where(stuck, first_threshold.to(dtype), best_threshold).to(thresholds.dtype)
    best_precision = torch.where(found, best_precision, 0)
    return best_precision, torch.where(best_precision == 0, torch.nan, best_threshold)


def _sensitivity_at_specificity(self: _SyncFreeCurve, confmat: Tensor) -> tuple[Tensor, Tensor]:
    fpr, sensitivity, thresholds = binned_curve(self, confmat, roc=True)
    return best_under_constraint(sensitivity, 1 - fpr, thresholds, self.min_specificity)


def _specificity_at_sensitivity(self: _SyncFreeCurve, confmat: Tensor) -> tuple[Tensor, Tensor]:
    fpr, sensitivity, thresholds = binned_curve(self, confmat, roc=True)
    return best_under_constraint(1 - fpr, sensitivity, thresholds, self.min_sensitivity)


class BinaryRecallAtFixedPrecision(_BinaryCurve, tm.BinaryRecallAtFixedPrecision):
    """No host sync in ``update()``, nor in a binned ``forward()`` (``thresholds=None`` reads, as ``compute()``)."""

    _binned_value = _recall_at_fixed_precision


class MulticlassRecallAtFixedPrecision(_MulticlassCurve, tm.MulticlassRecallAtFixedPrecision):
    """No host sync in ``update()``, nor in a binned ``forward()`` (``thresholds=None`` reads, as ``compute()``)."""

    _binned_value = _recall_at_fixed_precision


class MultilabelRecallAtFixedPrecision(_MultilabelCurve, tm.MultilabelRecallAtFixedPrecision):
    """No host sync in ``update()``, nor in a binned ``forward()`` (``thresholds=None`` reads, as ``compute()``)."""

    _binned_value = _recall_at_fixed_precision


class BinaryPrecisionAtFixedRecall(_BinaryCurve, tm.BinaryPrecisionAtFixedRecall):
    """No host sync in ``update()``, nor in a binned ``forward()`` (``thresholds=None`` reads, as ``compute()``)."""

    _binned_value = _precision_at_fixed_recall


class MulticlassPrecisionAtFixedRecall(_MulticlassCurve, tm.MulticlassPrecisionAtFixedRecall):
    """No host sync in ``update()``, nor in a binned ``forward()`` (``thresholds=None`` reads, as ``compute()``)."""

    _binned_value = _precision_at_fixed_recall


class MultilabelPrecisionAtFixedRecall(_MultilabelCurve, tm.MultilabelPrecisionAtFixedRecall):
    """No host sync in ``update()``, nor in a binned ``forward()`` (``thresholds=None`` reads, as ``compute()``)."""

    _binned_value = _precision_at_fixed_recall


class BinarySensitivityAtSpecificity(_BinaryCurve, tm.BinarySensitivityAtSpecificity):
    """No host sync in ``update()``, nor in a binned ``forward()`` (``thresholds=None`` reads, as ``compute()``)."""

    _binned_value = _sensitivity_at_specificity


class MulticlassSensitivityAtSpecificity(_MulticlassCurve, tm.MulticlassSensitivityAtSpecificity):
    """No host sync in ``update()``, nor in a binned ``forward()`` (``thresholds=None`` reads, as ``compute()``)."""

    _binned_value = _sensitivity_at_specificity


class MultilabelSensitivityAtSpecificity(_MultilabelCurve, tm.MultilabelSensitivityAtSpecificity):
    """No host sync in ``update()``, nor in a binned ``forward()`` (``thresholds=None`` reads, as ``compute()``)."""

    _binned_value = _sensitivity_at_specificity


class BinarySpecificityAtSensitivity(_BinaryCurve, tm.BinarySpecificityAtSensitivity):
    """No host sync in ``update()``, nor in a binned ``forward()`` (``thresholds=None`` reads, as ``compute()``)."""

    _binned_value = _specificity_at_sensitivity


class MulticlassSpecificityAtSensitivity(_MulticlassCurve, tm.MulticlassSpecificityAtSensitivity):
    """No host sync in ``update()``, nor in a binned ``forward()`` (``thresholds=None`` reads, as ``compute()``)."""

    _binned_value = _specificity_at_sensitivity


class MultilabelSpecificityAtSensitivity(_MultilabelCurve, tm.MultilabelSpecificityAtSensitivity):
    """No host sync in ``update()``, nor in a binned ``forward()`` (``thresholds=None`` reads, as ``compute()``)."""

    _binned_value = _specificity_at_sensitivity
