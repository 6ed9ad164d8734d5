"""Sync-free input format of the classification metrics that keep scores (probabilities or logits), not labels.

``CalibrationError`` and ``HingeLoss`` format their inputs as torchmetrics' confusion matrices do with
``convert_to_labels=False``: flatten (multiclass: one row of scores per entry), drop ``ignore_index`` entries with a
boolean mask (a host sync: the shape depends on the data), then ``normalize_logits_if_needed``, whose CPU branch reads
``torch.all(...)`` on the host. Their tensor validations count unique target values (``torch.unique``, another read).
Here ignored entries stay in place beside a ``keep`` mask (the metrics weight them out), the logit decision is a
``torch.where`` on the device over the kept entries, and the target check is recorded as a deferred check (see
:mod:`~torchmetrics_async.deferred`). Shape and dtype errors stay eager, with torchmetrics' messages.

Example:
    >>> import torch
    >>> normalize_logits(torch.tensor([0.2, 3.0]), "sigmoid", keep=torch.tensor([True, False]))
    tensor([0.2000, 3.0000])
"""

from typing import Literal

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
from torchmetrics_async.classification.multiclass_kernels import outside
from torchmetrics_async.classification.shapes import check_binary_shapes, check_multiclass_shapes

__all__ = ["BinaryScores", "MulticlassScores", "Scores", "normalize_logits"]


def normalize_logits(preds: Tensor, normalization: Literal["sigmoid", "softmax"], keep: Tensor | None = None) -> Tensor:
    """The ``normalize_logits_if_needed`` of torchmetrics, decided on the device: any kept score outside [0, 1]?

    As in torchmetrics' CPU branch, NaN counts as outside [0, 1] (on every device).

    Args:
        preds: scores, ``(M,)`` for ``"sigmoid"``, ``(M, C)`` for ``"softmax"`` (over dimension 1).
        normalization: ``"sigmoid"`` or ``"softmax"``.
        keep: ``(M,)``, the entries torchmetrics would keep (the others do not take part in the decision).

    Returns:
        The scores, normalized or as they were.

    Example:
        >>> normalize_logits(torch.tensor([[2.0, 0.0], [0.5, 0.5]]), "softmax")
        tensor([[0.8808, 0.1192],
                [0.5000, 0.5000]])
    """
    # Outside [0, 1] iff clamping changes the value; NaN != NaN, so a NaN counts as outside too.
    out = preds.clamp(0, 1) != preds
    if keep is not None:
        out = out & (keep if out.ndim == keep.ndim else keep.unsqueeze(1))
    normalized = preds.sigmoid() if normalization == "sigmoid" else torch.softmax(preds, dim=1)
    return torch.where(out.any(), normalized, preds)


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
            preds = normalize_logits(preds, "sigmoid", keep)
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
        return Scores(normalize_logits(preds, "softmax", keep), target, keep, violations)
