"""Sync-free group fairness: ``BinaryGroupStatRates`` and ``BinaryFairness``, torchmetrics' names and arguments.

torchmetrics splits the batch by group with ``unique``/``bincount`` and host reads; here each entry's outcome is added
into row ``g`` of a ``(num_groups, 4)`` table with ``index_add_`` (torchmetrics numbers the groups present in the batch
``0, 1, ...``: a batch without some group counts the later ones in the wrong rows). Value checks are deferred.

Example:
    >>> import torch
    >>> metric = BinaryGroupStatRates(num_groups=2)
    >>> metric(torch.tensor([0, 1, 0, 1]), torch.tensor([0, 1, 1, 1]), torch.tensor([0, 0, 1, 1]))
    {'group_0': tensor([0.5000, 0.0000, 0.5000, 0.0000]), 'group_1': tensor([0.5000, 0.0000, 0.0000, 0.5000])}
"""

import math

import torch
import torchmetrics.classification as tm
from torch import Tensor

from torchmetrics_async._torchmetrics import rank_zero_warn
from torchmetrics_async.batch_stats import BatchStats, SyncFreeBatchStats
from torchmetrics_async.classification.binary import (
    INVALID_PREDS,
    INVALID_TARGET,
    mask_ignored,
    not_binary,
    probs_to_labels,
    zero_one_checks,
)
from torchmetrics_async.classification.shapes import check_binary_shapes
from torchmetrics_async.errors import ShapeMismatchError

__all__ = ["BinaryFairness", "BinaryGroupStatRates", "group_stat_scores"]

INVALID_GROUP = "invalid_group"


def _rows(x: Tensor) -> Tensor:
    """``x`` as ``(N, -1)``, also for an empty batch (where ``-1`` is ambiguous to ``reshape``)."""
    return x.reshape(x.shape[0], math.prod(x.shape[1:]))


def group_stat_scores(metric: tm.BinaryGroupStatRates, preds: Tensor, target: Tensor, groups: Tensor) -> BatchStats:
    """Per-group ``tp, fp, tn, fn`` (each ``(num_groups,)``, int64) and the violated value checks, without a host read.

    Example:
        >>> m = BinaryGroupStatRates(num_groups=2)
        >>> group_stat_scores(m, torch.tensor([1, 0, 1]), torch.tensor([1, 1, 0]), torch.tensor([0, 0, 1])).values
        (tensor([1, 0]), tensor([0, 1]), tensor([0, 0]), tensor([1, 0]))
    """
    num_groups, validate = metric.num_groups, metric.validate_args
    if min(preds.ndim, target.ndim, groups.ndim) == 0:  # torchmetrics: an IndexError from its shape[0]
        raise ValueError(
            f"Expected `preds`, `target` and `groups` with a batch dimension, but got shapes {tuple(preds.shape)},"
            f" {tuple(target.shape)} and {tuple(groups.shape)}."
        )
    check_binary_shapes(preds, target, False, validate)
    preds, target = _rows(preds), _rows(target)
    if _rows(groups).shape != (preds.shape[0], 1):
        raise ShapeMismatchError(
            f"Expected `groups` to hold one group identifier per sample, shape ({preds.shape[0]},), but got"
            f" {tuple(groups.shape)} for `preds` of shape {tuple(preds.shape)}."
        )
    if preds.shape[0] == 0:  # as torchmetrics, which fails on an empty batch (max() or reshape of nothing)
        raise RuntimeError(f"{type(metric).__name__} got an empty batch: pass at least one sample per update.")
    if validate and groups.dtype != torch.long:
        raise ValueError(f"Expected dtype of argument groups to be long, not {groups.dtype}.")
    if groups.is_floating_point():
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")  # torchmetrics' bincount
    violations = {}
    if preds.is_floating_point():
        preds = probs_to_labels(preds, metric.threshold)
    elif validate and preds.dtype != torch.bool:
        violations[INVALID_PREDS] = not_binary(preds).any()
    target, ignored = mask_ignored(target, metric.ignore_index)
    hit, positive, negative = target == preds, target == 1, target == 0
    groups = groups.reshape(-1, 1)
    in_range = (groups >= 0) & (groups < num_groups)
    if validate:
        violations[INVALID_TARGET] = not_binary(target, ignored).any()
        violations[INVALID_GROUP] = ~in_range.all()
    # Row g holds group g's (tp, fp, tn, fn): a positive target is tp (hit) or fn, a negative one tn (hit) or fp.
    outcome = torch.where(positive, 3 - 3 * hit.long(), 1 + hit.long())
    index = groups.clamp(0, num_groups - 1) * 4 + outcome
    counted = ((positive | negative) & in_range).long()
    table = torch.zeros(num_groups * 4, dtype=torch.long, device=preds.device)
    table.index_add_(0, index.reshape(-1), counted.reshape(-1))
    return BatchStats(tuple(table.view(num_groups, 4).unbind(1)), violations)


class _GroupStatScores(SyncFreeBatchStats):
    """The per-group update both classes share."""

    def _deferred_checks(self) -> dict[str, str]:
        if not self.validate_args:
            return {}
        group = (
            f"Expected group identifiers in [0, {self.num_groups}) (`num_groups={self.num_groups}`): the group"
            " identifiers should be ``0, 1, ..., (num_groups - 1)``, but found one outside."
        )
        return {**zero_one_checks(self, quoted_preds=True), INVALID_GROUP: group}

    def update(self, preds: Tensor, target: Tensor, groups: Tensor) -> None:
        """Accumulate a batch's per-group counts without a host sync."""
        self._merge_stats(self._batch_stats(preds, target, groups))

    def _batch_stats(self, preds: Tensor, target: Tensor, groups: Tensor) -> BatchStats:
        return group_stat_scores(self, preds, target, groups)


class BinaryGroupStatRates(_GroupStatScores, tm.BinaryGroupStatRates):
    """Group ``g`` counts in row ``g`` also when a batch lacks some group."""


class BinaryFairness(_GroupStatScores, tm.BinaryFairness):
    """``forward()`` reads the host once: its keys name the groups with the lowest and highest rates."""

    def _batch_stats(self, preds: Tensor, target: Tensor | None, groups: Tensor) -> BatchStats:
        if self.task == "demographic_parity":  # torchmetrics' zeros are on the CPU: here on preds' device
            if target is not None:
                rank_zero_warn("The task demographic_parity does not require a target.", UserWarning)
            target = torch.zeros(preds.shape, device=preds.device)
        return group_stat_scores(self, preds, target, groups)
