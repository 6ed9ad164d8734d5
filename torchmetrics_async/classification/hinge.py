"""Sync-free hinge loss with torchmetrics' names and values.

Margins come from ``torch.where``/``gather`` and a ``masked_fill`` before the max over the other classes; ignored
entries add 0 and are not counted. With ``ignore_index`` the float sums run over the whole batch (ignored entries as
zeros), which can change the sum's last bits.
"""

from typing import Any

import torch
import torchmetrics.classification as tm
from torch import Tensor

from torchmetrics_async.batch_stats import BatchStats, in_state_dtypes
from torchmetrics_async.classification.binary import BinaryScores
from torchmetrics_async.classification.multiclass import MulticlassScores, as_index

__all__ = ["BinaryHingeLoss", "MulticlassHingeLoss"]


def _sum_kept(measures: Tensor, keep: Tensor | None) -> tuple[Tensor, Tensor]:
    """The sum of the kept rows of ``measures`` over dimension 0, and how many rows were kept (int64)."""
    if keep is None:
        total = torch.full((), measures.shape[0], dtype=torch.long, device=measures.device)
        return measures.sum(dim=0), total
    rows = keep if measures.ndim == 1 else keep.unsqueeze(1)
    return torch.where(rows, measures, 0).sum(dim=0), keep.sum()


class _SyncFreeHingeLoss:
    """``update`` sums the batch's hinge measures; ``forward()``'s batch value in the states' dtypes."""

    _stat_states = ("measures", "total")

    def _measures(self, margin: Tensor) -> Tensor:
        measures = torch.clamp(1 - margin, 0)
        return measures.pow(2) if self.squared else measures

    def _batch_value(self, stats: BatchStats) -> Any:
        return super()._batch_value(in_state_dtypes(self, stats))  # type: ignore[misc]


class BinaryHingeLoss(_SyncFreeHingeLoss, BinaryScores, tm.BinaryHingeLoss):
    """No host sync in ``update()`` or ``forward()``; with ``ignore_index`` the sum's last bits may differ."""

    def _batch_stats(self, preds: Tensor, target: Tensor) -> BatchStats:
        scores = self._scores(preds, target)
        margin = torch.where(scores.target.bool(), scores.preds, -scores.preds)
        return BatchStats(_sum_kept(self._measures(margin), scores.keep), scores.violations)


class MulticlassHingeLoss(_SyncFreeHingeLoss, MulticlassScores, tm.MulticlassHingeLoss):
    """No host sync in ``update()`` or ``forward()``; with ``ignore_index`` the sum's last bits may differ."""

    def _batch_stats(self, preds: Tensor, target: Tensor) -> BatchStats:
        scores = self._scores(preds, target)  # torchmetrics' shape errors first, with its types and messages
        classes = preds.shape[1] if self.num_classes is None and preds.ndim > 1 else self.num_classes
        if preds.ndim != target.ndim + 1 or preds.shape[1] != classes:
            # One row of num_classes scores per target, whatever validate_args: torchmetrics' one-hot mask of the
            # target fails to index other scores (IndexError), or its per-class sums broadcast into the state.
            # num_classes=None (crammer-singer, validate_args=False, as torchmetrics allows): the batch's C.
            raise ValueError(
                f"`preds` should have the shape (N, C, ...) with C = num_classes = {self.num_classes} and `target` the"
                f" shape (N, ...); got `preds` with shape={preds.shape} and `target` with shape={target.shape}."
            )
        preds = scores.preds
        index = as_index(scores.target, preds.shape[1]).unsqueeze(1)
        is_target = torch.zeros(preds.shape, dtype=torch.bool, device=preds.device).scatter_(1, index, True)
        if self.multiclass_mode == "crammer-singer":
            # The target's score minus the best other score (torchmetrics selects both through boolean masks).
            others = preds.masked_fill(is_target, float("-inf")).amax(dim=1)
            margin = preds.gather(1, index).squeeze(1) - others
        else:
            margin = torch.where(is_target, preds, -preds)
        return BatchStats(_sum_kept(self._measures(margin), scores.keep), scores.violations)
