"""Sync-free calibration error (``norm`` l1/l2/max, ``n_bins``) with torchmetrics' names, arguments and values.

torchmetrics keeps every confidence and accuracy in list states (``confidences``, ``accuracies``, reduced with
``cat``) and bins them in ``compute``. Its ``update`` reads the host to validate targets (``torch.unique``), to drop
``ignore_index`` entries (boolean indexing) and to decide whether the scores are logits; its ``compute`` reads it once
more for ``norm="l2"`` (``if ce > 0``). Here (see :mod:`~torchmetrics_async.classification.scores`):

- ``update`` appends the batch's confidences and accuracies without dropping ignored entries (that would give the
  states a data-dependent shape). An ignored entry is told apart in the states themselves: binary accuracies are the
  targets as torchmetrics stores them, so an ignored one still equals ``ignore_index``; multiclass accuracies are 0 or
  1, so an ignored one is stored as NaN. Without ``ignore_index`` the states are torchmetrics' own;
- ``compute`` and ``forward()``'s batch value bin the kept entries with weight 1 and the ignored ones with weight 0
  (``bucketize`` and ``scatter_add_``, as torchmetrics), so nothing reads the host. With ``norm="l2"`` a zero error
  is a float zero on the metric's device (torchmetrics returns ``torch.tensor(0)``: int64, on the CPU).

Example:
    >>> import torch
    >>> from torchmetrics_async.classification.calibration import BinaryCalibrationError
    >>> metric = BinaryCalibrationError(n_bins=2, norm="l1")
    >>> metric.update(torch.tensor([0.25, 0.25, 0.55, 0.75, 0.75]), torch.tensor([0, 0, 1, 1, 1]))
    >>> metric.compute()
    tensor(0.2900)
"""

import torch
import torchmetrics.classification as tm
from torch import Tensor

from torchmetrics_async._torchmetrics import _ce_compute, dim_zero_cat
from torchmetrics_async.batch_stats import BatchStats
from torchmetrics_async.classification.scores import BinaryScores, MulticlassScores

__all__ = ["BinaryCalibrationError", "MulticlassCalibrationError", "calibration_error"]

_NORMS = ("l1", "l2", "max")


def calibration_error(confidences: Tensor, accuracies: Tensor, keep: Tensor | None, n_bins: int, norm: str) -> Tensor:
    """The ``_ce_compute`` of torchmetrics over the kept entries (weight 1; the others weight 0), without host reads.

    Args:
        confidences: ``(M,)`` confidences.
        accuracies: ``(M,)`` accuracies (0/1, any dtype).
        keep: ``(M,)`` bool, the entries that count (``None``: all).
        n_bins: the number of bins.
        norm: ``"l1"``, ``"l2"`` or ``"max"``.

    Returns:
        The calibration error, a 0-dim tensor.

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

    def _kept(self, accuracies: Tensor) -> Tensor | None:
        raise NotImplementedError

    def _error(self, confidences: Tensor, accuracies: Tensor) -> Tensor:
        return calibration_error(confidences, accuracies, self._kept(accuracies), self.n_bins, self.norm)

    def _batch_value(self, stats: BatchStats) -> Tensor:
        return self._error(*stats.values)

    def compute(self) -> Tensor:
        """Raise deferred value errors (torchmetrics' messages), then bin the kept entries without host reads.

        Returns:
            The calibration error.

        Example:
            >>> import torch
            >>> metric = MulticlassCalibrationError(num_classes=3, n_bins=3, ignore_index=-1)
            >>> preds = torch.tensor([[0.6, 0.3, 0.1], [0.1, 0.8, 0.1], [0.2, 0.2, 0.6]])
            >>> metric.update(preds, torch.tensor([0, 2, -1]))
            >>> metric.compute()
            tensor(0.6000)
        """
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
