"""Sync-free input format of the classification metrics that keep scores, not labels (calibration error, hinge loss).

Ignored entries stay beside a ``keep`` mask (torchmetrics drops them: a data-dependent shape), the logit decision is a
``torch.where``, the target check deferred; shape and dtype errors stay eager, with torchmetrics' messages.
"""

import torch
from torch import Tensor

from torchmetrics_async._torchmetrics import (
    _multiclass_confusion_matrix_format,
    binary_target_values_message,
    float_preds_message,
    multiclass_values_message,
)
from torchmetrics_async.batch_stats import SyncFreeBatchStats
from torchmetrics_async.classification.binary import INVALID_TARGET, not_binary
from torchmetrics_async.classification.curve_kernels import normalize_scores
from torchmetrics_async.classification.multiclass_kernels import outside
from torchmetrics_async.classification.shapes import check_binary_shapes, check_multiclass_shapes

__all__ = ["BinaryScores", "MulticlassScores", "Scores"]


class Scores:
    """Formatted scores: ``preds`` and ``target`` flattened (all entries), ``keep`` (``None``: all count)."""

    __slots__ = ("keep", "preds", "target", "violations")

    def __init__(self, preds: Tensor, target: Tensor, keep: Tensor | None, violations: dict[str, Tensor]) -> None:
        self.preds, self.target, self.keep, self.violations = preds, target, keep, violations


class BinaryScores(SyncFreeBatchStats):
    """Binary scores ``(N, ...)``, targets in {0, 1}: the format and checks of torchmetrics' binary score metrics."""

    def _deferred_checks(self) -> dict[str, str]:
        return {INVALID_TARGET: binary_target_values_message(self.ignore_index)} if self.validate_args else {}

    def _scores(self, preds: Tensor, target: Tensor) -> Scores:
        """Validate the shapes and dtype (eager), flatten, sigmoid the kept scores if any is a logit."""
        check_binary_shapes(preds, target, samplewise=False, validate_args=self.validate_args)
        if self.validate_args and not preds.is_floating_point():
            raise ValueError(float_preds_message(preds.dtype))
        preds = preds.flatten()
        target = target.flatten()
        ignored = keep = None
        if self.ignore_index is not None:
            ignored = target == self.ignore_index
            keep = torch.logical_not(ignored)
        violations = {INVALID_TARGET: not_binary(target, ignored)} if INVALID_TARGET in self._defaults else {}
        if preds.is_floating_point():
            preds = normalize_scores(preds, "sigmoid", keep)
        return Scores(preds, target, keep, violations)


class MulticlassScores(SyncFreeBatchStats):
    """Multiclass scores ``(N, C, ...)`` with targets ``(N, ...)``: one row of ``C`` scores per entry."""

    def _deferred_checks(self) -> dict[str, str]:
        if not self.validate_args:
            return {}
        return {INVALID_TARGET: multiclass_values_message("target", self.num_classes, self.ignore_index)}

    def _scores(self, preds: Tensor, target: Tensor) -> Scores:
        """Validate the shapes and dtype (eager), one row per entry, softmax the kept rows if any score is a logit."""
        check_multiclass_shapes(preds, target, self.num_classes, "global", self.validate_args, confusion_matrix=True)
        if self.validate_args and not preds.is_floating_point():
            raise ValueError(float_preds_message(preds.dtype))
        # torchmetrics' own reshapes (ignore_index left to the keep mask), so malformed inputs fail the same way.
        preds, target = _multiclass_confusion_matrix_format(preds, target, None, convert_to_labels=False)
        keep = None if self.ignore_index is None else target != self.ignore_index
        violations: dict[str, Tensor] = {}
        if INVALID_TARGET in self._defaults:
            violations[INVALID_TARGET] = outside(target, None, self.num_classes, keep)
        rows = None if keep is None else keep.unsqueeze(1)
        return Scores(normalize_scores(preds, "softmax", rows), target, keep, violations)
