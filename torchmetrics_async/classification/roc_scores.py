"""Sync-free equal error rate (EER) and LogAUC: the accelerated ROC curves with torchmetrics' ``compute``.

A binned ``forward()`` scores the batch's curve on the device where torchmetrics reads the host: the EER point by
``argmin``/``gather``, the LogAUC's bounds by fill kernels and a masked ``amax``, its trimmed area by a masked sum.

Example:
    >>> import torch
    >>> from torchmetrics_async.classification.roc_scores import BinaryEER
    >>> metric = BinaryEER(thresholds=5)
    >>> metric(torch.tensor([0.1, 0.4, 0.35, 0.8]), torch.tensor([0, 0, 1, 1]))
    tensor(0.2500)
"""

from typing import Any

import torch
import torchmetrics.classification as tm
from torch import Tensor

from torchmetrics_async._torchmetrics import LOGAUC_TOO_FEW_POINTS_MESSAGE, _reduce_logauc, interp, rank_zero_warn
from torchmetrics_async.classification.curves import (
    _BinaryCurve,
    _MulticlassCurve,
    _MultilabelCurve,
    binned_curve,
    nan_ignoring_average,
)

__all__ = ["BinaryEER", "BinaryLogAUC", "MulticlassEER", "MulticlassLogAUC", "MultilabelEER", "MultilabelLogAUC"]


def _eer(fpr: Tensor, tpr: Tensor) -> Tensor:
    """Torchmetrics' ``_eer_compute`` on curves ``(T,)`` or ``(C, T)``, the point picked with ``gather``."""
    index = torch.argmin(torch.abs(fpr - (1 - tpr)), dim=-1, keepdim=True)
    return ((fpr.gather(-1, index) + (1 - tpr.gather(-1, index))) / 2).squeeze(-1)


def _logauc(fpr: Tensor, tpr: Tensor, fpr_range: tuple[float, float]) -> Tensor:
    """Torchmetrics' ``_binary_logauc_compute`` on one curve ``(T,)``, without a host read."""
    if fpr.numel() < 2 or tpr.numel() < 2:
        rank_zero_warn(LOGAUC_TOO_FEW_POINTS_MESSAGE)
        return torch.zeros((), device=fpr.device)
    dtype = torch.tensor(fpr_range).dtype  # on the host; the device copy is made by fill kernels
    bounds = torch.cat([torch.full((1,), value, dtype=dtype, device=fpr.device) for value in fpr_range])
    tpr = torch.cat([tpr, interp(bounds, fpr, tpr)]).sort().values
    log_fpr = torch.log10(torch.cat([fpr, bounds]).sort().values)
    bounds = torch.log10(bounds)
    position = torch.arange(log_fpr.numel(), device=fpr.device)
    lower, upper = (torch.where(log_fpr == bound, position, -1).amax() for bound in bounds)
    # torch.trapz over [lower, upper]: the trapezoids of the segments starting in [lower, upper).
    inside = (position[:-1] >= lower) & (position[:-1] < upper)
    trapezoids = (log_fpr[1:] - log_fpr[:-1]) * (tpr[1:] + tpr[:-1])
    return trapezoids.masked_fill(torch.logical_not(inside), 0).sum() / 2 / (bounds[1] - bounds[0])


def _eer_value(metric: Any, confmat: Tensor) -> Tensor:
    return _eer(*binned_curve(metric, confmat, roc=True)[:2])


def _logauc_value(metric: Any, confmat: Tensor) -> Tensor:
    fpr, tpr, _ = binned_curve(metric, confmat, roc=True)
    if fpr.ndim == 1:
        return _logauc(fpr, tpr, metric.fpr_range)
    average = metric.average2
    if average not in (None, "none", "macro"):
        return _reduce_logauc(fpr, tpr, metric.fpr_range, average)  # torchmetrics' ValueError
    scores = torch.stack([_logauc(f, t, metric.fpr_range) for f, t in zip(fpr, tpr, strict=True)])
    return nan_ignoring_average(scores, average, scores)


class BinaryEER(_BinaryCurve, tm.BinaryEER):
    """No host sync in ``update()``, nor in a binned ``forward()`` (``thresholds=None`` reads, as ``compute()``)."""

    _binned_value = _eer_value


class MulticlassEER(_MulticlassCurve, tm.MulticlassEER):
    """No host sync in ``update()``, nor in a binned ``forward()`` (``thresholds=None`` reads, as ``compute()``)."""

    _binned_value = _eer_value


class MultilabelEER(_MultilabelCurve, tm.MultilabelEER):
    """No host sync in ``update()``, nor in a binned ``forward()`` (``thresholds=None`` reads, as ``compute()``)."""

    _binned_value = _eer_value


class BinaryLogAUC(_BinaryCurve, tm.BinaryLogAUC):
    """No host sync in ``update()``, nor in a binned ``forward()`` (``thresholds=None`` reads, as ``compute()``)."""

    _binned_value = _logauc_value


class MulticlassLogAUC(_MulticlassCurve, tm.MulticlassLogAUC):
    """No host sync in ``update()``, nor in a binned ``forward()`` (``thresholds=None`` reads, as ``compute()``)."""

    _binned_value = _logauc_value


class MultilabelLogAUC(_MultilabelCurve, tm.MultilabelLogAUC):
    """No host sync in ``update()``, nor in a binned ``forward()`` (``thresholds=None`` reads, as ``compute()``)."""

    _binned_value = _logauc_value
