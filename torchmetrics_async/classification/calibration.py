"""Sync-free calibration error with torchmetrics' names, arguments and values.

``update`` keeps ignored entries in the list states (dropping them would make a data-dependent shape) and marks them:
a binary accuracy is the target, still equal to ``ignore_index``; a multiclass one is stored as NaN. ``compute`` bins
them with weight 0. With ``norm="l2"`` a zero error is a float zero on the device (torchmetrics: int64 on the CPU).
"""

import torch
import torchmetrics.classification as tm
from torch import Tensor

from torchmetrics_async._torchmetrics import _ce_compute, dim_zero_cat
from torchmetrics_async.batch_stats import BatchStats
from torchmetrics_async.classification.binary import BinaryScores
from torchmetrics_async.classification.multiclass import MulticlassScores

__all__ = ["BinaryCalibrationError", "MulticlassCalibrationError", "calibration_error"]

_NORMS = ("l1", "l2", "max")


def calibration_error(confidences: Tensor, accuracies: Tensor, keep: Tensor | None, n_bins: int, norm: str) -> Tensor:
    """Torchmetrics' ``_ce_compute`` over the entries in ``keep`` (the others weigh 0), without host reads.

    Example:
        >>> conf, acc = torch.tensor([0.2, 0.9, 0.9]), torch.tensor([0, 1, 0])
        >>> kept = torch.tensor([True, True, False])
        >>> calibration_error(conf, acc, None, 2, "l1"), calibration_error(conf, acc, kept, 2, "l1")
        (tensor(0.3333), tensor(0.1500))
    """
    if norm not in _NORMS:
        return _ce_compute(confidences, accuracies, n_bins, norm=norm)  # torchmetrics' ValueError
    boundaries = torch.linspace(0, 1, n_bins + 1, dtype=confidences.dtype, device=confidences.device)
    with torch.no_grad():
        accuracies = accuracies.to(dtype=confidences.dtype)
        if keep is None:
            weight = torch.ones_like(confidences)
        else:
            # Ignored entries go to bin 0 adding 0 to every sum, so the kept entries' sums are torchmetrics' own.
            dropped = torch.logical_not(keep)
            confidences = confidences.masked_fill(dropped, 0)
            accuracies = accuracies.masked_fill(dropped, 0)
            weight = keep.to(confidences.dtype)
        indices = torch.bucketize(confidences, boundaries, right=True) - 1
        count_bin, conf_bin, acc_bin = torch.zeros(3, n_bins + 1, dtype=confidences.dtype, device=confidences.device)
        count_bin.scatter_add_(0, indices, weight)
        conf_bin.scatter_add_(0, indices, confidences)
        conf_bin = torch.nan_to_num(conf_bin / count_bin)
        acc_bin.scatter_add_(0, indices, accuracies)
        acc_bin = torch.nan_to_num(acc_bin / count_bin)
        prop_bin = count_bin / count_bin.sum()
    if norm == "l1":
        return torch.sum(torch.abs(acc_bin - conf_bin) * prop_bin)
    if norm == "max":
        return torch.max(torch.abs(acc_bin - conf_bin))
    ce = torch.sum(torch.pow(acc_bin - conf_bin, 2) * prop_bin)
    return torch.where(ce > 0, torch.sqrt(ce), torch.zeros_like(ce))


class _SyncFreeCalibrationError:
    """``compute()`` and ``forward()``'s batch value: the binned error of the kept entries (``_kept``)."""

    _stat_states = ("confidences", "accuracies")

    def _error(self, confidences: Tensor, accuracies: Tensor) -> Tensor:
        return calibration_error(confidences, accuracies, self._kept(accuracies), self.n_bins, self.norm)

    def _batch_value(self, stats: BatchStats) -> Tensor:
        return self._error(*stats.values)

    def compute(self) -> Tensor:
        """Raise deferred value errors, then bin the kept entries without host reads."""
        self._raise_deferred_checks()  # type: ignore[attr-defined]
        return self._error(dim_zero_cat(self.confidences), dim_zero_cat(self.accuracies))  # type: ignore[attr-defined]


class BinaryCalibrationError(_SyncFreeCalibrationError, BinaryScores, tm.BinaryCalibrationError):
    """No host sync in ``update()`` or ``forward()``."""

    def _batch_stats(self, preds: Tensor, target: Tensor) -> BatchStats:
        scores = self._scores(preds, target)
        # The targets are torchmetrics' accuracies; an ignored one keeps its value, ignore_index, which marks it.
        return BatchStats((scores.preds, scores.target), scores.violations)

    def _kept(self, accuracies: Tensor) -> Tensor | None:
        return None if self.ignore_index is None else accuracies != self.ignore_index


class MulticlassCalibrationError(_SyncFreeCalibrationError, MulticlassScores, tm.MulticlassCalibrationError):
    """No host sync in ``update()`` or ``forward()``."""

    def _batch_stats(self, preds: Tensor, target: Tensor) -> BatchStats:
        scores = self._scores(preds, target)
        confidences, predictions = scores.preds.max(dim=1)
        accuracies = predictions.eq(scores.target).float()
        if scores.keep is not None:
            # NaN marks an ignored entry: an accuracy is otherwise 0 or 1.
            accuracies = accuracies.masked_fill(torch.logical_not(scores.keep), float("nan"))
        return BatchStats((confidences.float(), accuracies), scores.violations)

    def _kept(self, accuracies: Tensor) -> Tensor | None:
        return None if self.ignore_index is None else torch.logical_not(torch.isnan(accuracies))
