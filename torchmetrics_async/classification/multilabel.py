"""Sync-free multilabel classification metrics: the kernels of :mod:`~torchmetrics_async.classification.binary`."""

from typing import Any

import torch
import torchmetrics.classification as tm
from torch import Tensor

from torchmetrics_async.batch_stats import BatchStats
from torchmetrics_async.classification.binary import (
    CODE_BINS,
    INVALID_PREDS,
    INVALID_TARGET,
    BinaryConfusionMatrix,
    CodedCounts,
    coded_counts,
    coded_fast_path,
    mask_ignored,
    not_binary,
    outcomes,
    stat_counts,
    targets_outside,
    to_labels,
)
from torchmetrics_async.classification.shapes import check_multilabel_shapes

__all__ = [
    "MultilabelAccuracy",
    "MultilabelConfusionMatrix",
    "MultilabelExactMatch",
    "MultilabelF1Score",
    "MultilabelFBetaScore",
    "MultilabelHammingDistance",
    "MultilabelNegativePredictiveValue",
    "MultilabelPrecision",
    "MultilabelRecall",
    "MultilabelSpecificity",
    "MultilabelStatScores",
]


def _format(metric: Any, preds: Tensor, target: Tensor) -> tuple[Tensor, Tensor, Tensor | None, dict]:
    """Input format as in torchmetrics, without syncs: labels, ``(N, C, -1)``, ignored targets -1."""
    violations: dict[str, Tensor] = {}
    preds = to_labels(metric, preds, violations)
    preds = preds.reshape(*preds.shape[:2], -1)
    target = target.reshape(*target.shape[:2], -1)
    target, ignored = mask_ignored(target, metric.ignore_index)
    return preds, target, ignored, violations


class _SyncFreeMultilabelStatScores(CodedCounts):
    """Sync-free ``update`` of torchmetrics' ``MultilabelStatScores`` family (states ``tp, fp, tn, fn``)."""

    _deferred_checks = BinaryConfusionMatrix._deferred_checks

    def _batch_stats(self, preds: Tensor, target: Tensor) -> BatchStats:
        samplewise = self.multidim_average == "samplewise"
        check_multilabel_shapes(preds, target, self.num_labels, samplewise, self.validate_args)
        if not samplewise and coded_fast_path(preds, target):
            return self._coded_batch_stats(preds, target)
        preds, target, ignored, violations = _format(self, preds, target)
        dim: int | tuple[int, int] = -1 if samplewise else (0, -1)
        if not samplewise and preds.ndim == target.ndim == 3 and preds.shape[-1] == target.shape[-1] == 1:
            # (N, C) inputs: a reduction over one dimension is faster than over (0, -1) with a trailing 1.
            preds, target, dim = preds.squeeze(-1), target.squeeze(-1), 0
        tp, fp, tn, fn, binary_count = stat_counts(preds, target, dim)
        if self.validate_args:
            violations[INVALID_TARGET] = targets_outside(binary_count, target, ignored)
        if samplewise:  # torchmetrics squeezes: a batch of one sample gives (C,) statistics
            tp, fp, tn, fn = tp.squeeze(), fp.squeeze(), tn.squeeze(), fn.squeeze()
        return BatchStats((tp, fp, tn, fn), violations)

    def _coded_batch_stats(self, preds: Tensor, target: Tensor) -> BatchStats:
        """Global counts of well-formed ``(N, C[, M])`` input: one code per entry, counted per label (3 ops)."""
        violations: dict[str, Tensor] = {}
        validate = self.validate_args
        preds = to_labels(self, preds, violations)
        target, ignored = mask_ignored(target, self.ignore_index)
        bins = self.__dict__[CODE_BINS][preds.ndim, False]
        exact = not validate or target.dtype != torch.int64
        counts = coded_counts(preds, target, bins, exact, dims=(0,) if preds.ndim == 2 else (0, 2))
        if validate:
            violations[INVALID_TARGET] = targets_outside(counts, target, ignored)
        return BatchStats(outcomes(counts, preds.dtype == torch.bool), violations)


class MultilabelStatScores(_SyncFreeMultilabelStatScores, tm.MultilabelStatScores):
    """No host sync in ``update()`` or ``forward()``."""


class MultilabelAccuracy(_SyncFreeMultilabelStatScores, tm.MultilabelAccuracy):
    """No host sync in ``update()`` or ``forward()``."""


class MultilabelPrecision(_SyncFreeMultilabelStatScores, tm.MultilabelPrecision):
    """No host sync in ``update()`` or ``forward()``."""


class MultilabelRecall(_SyncFreeMultilabelStatScores, tm.MultilabelRecall):
    """No host sync in ``update()`` or ``forward()``."""


class MultilabelFBetaScore(_SyncFreeMultilabelStatScores, tm.MultilabelFBetaScore):
    """No host sync in ``update()`` or ``forward()``."""


class MultilabelF1Score(_SyncFreeMultilabelStatScores, tm.MultilabelF1Score):
    """No host sync in ``update()`` or ``forward()``."""


class MultilabelSpecificity(_SyncFreeMultilabelStatScores, tm.MultilabelSpecificity):
    """No host sync in ``update()`` or ``forward()``."""


class MultilabelHammingDistance(_SyncFreeMultilabelStatScores, tm.MultilabelHammingDistance):
    """No host sync in ``update()`` or ``forward()``."""


class MultilabelNegativePredictiveValue(_SyncFreeMultilabelStatScores, tm.MultilabelNegativePredictiveValue):
    """No host sync in ``update()`` or ``forward()``."""


class MultilabelExactMatch(CodedCounts, tm.MultilabelExactMatch):
    """No host sync in ``update()`` or ``forward()``."""

    _stat_states = ("correct", "total")
    _deferred_checks = BinaryConfusionMatrix._deferred_checks

    def _batch_stats(self, preds: Tensor, target: Tensor) -> BatchStats:
        samplewise = self.multidim_average == "samplewise"
        check_multilabel_shapes(preds, target, self.num_labels, samplewise, self.validate_args)
        preds, target, ignored, violations = _format(self, preds, target)
        if self.validate_args:
            violations[INVALID_TARGET] = not_binary(target, ignored)
        if ignored is not None:
            # torchmetrics' _multilabel_exact_match_update: an ignored (-1) target takes the prediction's value.
            target = torch.where(target == -1, preds.long(), target)
        if not samplewise:
            preds = torch.movedim(preds, 1, -1).reshape(-1, self.num_labels)
            target = torch.movedim(target, 1, -1).reshape(-1, self.num_labels)
        correct = ((preds == target).sum(1) == self.num_labels).sum(dim=-1)
        # torchmetrics builds this count with torch.tensor(n, device=...), a host-to-device copy; a fill kernel is not.
        total = torch.full((), preds.shape[2 if samplewise else 0], dtype=torch.long, device=correct.device)
        return BatchStats((correct, total), violations)

    @torch.jit.unused
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """As torchmetrics' ``forward``, marked so that ``_merge_stats`` merges the samplewise total as forward does."""
        self.__dict__["_in_forward"] = True
        try:
            return super().forward(*args, **kwargs)
        finally:
            self.__dict__["_in_forward"] = False

    def _merge_stats(self, stats: BatchStats) -> None:
        if self.multidim_average != "samplewise":
            super()._merge_stats(stats)
            return
        (correct, total), violations = stats
        self.correct.append(correct)
        # torchmetrics' samplewise "total" (a "mean" state) is the last batch's per-sample element count after
        # update(), and forward() merges it as torchmetrics merges "mean" states: a float running mean over calls.
        if self.__dict__.get("_in_forward", False):
            count = self._update_count
            total = ((count - 1) * self.total + total).float() / count
        self.total = total
        self._add_with_violations([], [], violations)


class MultilabelConfusionMatrix(CodedCounts, tm.MultilabelConfusionMatrix):
    """No host sync in ``update()`` or ``forward()``, whose normalized matrix comes without the NaN warning."""

    _stat_states = ("confmat",)
    _deferred_checks = BinaryConfusionMatrix._deferred_checks

    def _batch_stats(self, preds: Tensor, target: Tensor) -> BatchStats:
        num_labels = self.num_labels
        violations: dict[str, Tensor] = {}
        check_multilabel_shapes(preds, target, num_labels, samplewise=False, validate_args=self.validate_args)
        preds_bad = None
        if not preds.is_floating_point() and preds.dtype != torch.bool:
            preds_bad = not_binary(preds)
            if self.validate_args:
                violations[INVALID_PREDS] = preds_bad
        preds = to_labels(self, preds, {})
        preds = torch.movedim(preds, 1, -1).reshape(-1, num_labels)
        target = torch.movedim(target, 1, -1).reshape(-1, num_labels)
        target_bad = not_binary(target)
        valid = torch.logical_not(target_bad)
        if self.ignore_index is not None:
            ignored = target == self.ignore_index
            if target.dtype == torch.bool and preds.dtype == torch.bool:
                # torchmetrics writes its negative sentinel into both: True in a bool tensor, so it counts an ignored
                # entry as a true positive (with integer labels the sentinel keeps the bin negative: dropped).
                target, preds = target | ignored, preds | ignored
            else:
                target_bad &= torch.logical_not(ignored)
                valid &= torch.logical_not(ignored)
        if self.validate_args:
            violations[INVALID_TARGET] = target_bad
        if preds_bad is not None:
            valid &= torch.logical_not(torch.movedim(preds_bad, 1, -1).reshape(-1, num_labels))
        # Bin 4 * label + 2 * target + pred, as torchmetrics; dropped entries go to bin 0 with weight 0, so no index is
        # ever out of range whatever the values (torchmetrics' negative sentinel wraps around for unsigned targets).
        offsets = torch.arange(0, 4 * num_labels, 4, device=preds.device)
        bins = torch.where(valid, 2 * target + preds + offsets, 0).long().flatten()
        confmat = torch.zeros(4 * num_labels, dtype=torch.long, device=bins.device)
        confmat.scatter_add_(0, bins, valid.flatten().long())
        return BatchStats((confmat.view(num_labels, 2, 2),), violations)

    _batch_value = BinaryConfusionMatrix._batch_value
    _reduce = BinaryConfusionMatrix._reduce
