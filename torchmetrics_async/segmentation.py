"""Sync-free ``MeanIoU``, ``GeneralizedDiceScore`` and ``DiceScore``.

torchmetrics' ``F.one_hot`` reads the labels' range on the host (on CUDA a bad label kills the context);
:func:`one_hot` compares with ``arange`` and defers labels out of range to ``compute()``.
"""

from typing import Any, Literal

import torch
import torchmetrics.segmentation as tm
from torch import Tensor

from torchmetrics_async._torchmetrics import (
    ONE_HOT_NEGATIVE_MESSAGE,
    ONE_HOT_RANGE_MESSAGE,
    _check_mixed_shape,
    _check_same_shape,
    _dice_score_compute,
    _dice_score_update,
    _generalized_dice_compute,
    _ignore_background,
    _mean_iou_reshape_args,
    _mean_iou_update,
    _safe_divide,
    dim_zero_cat,
)
from torchmetrics_async.batch_stats import BatchStats, SyncFreeBatchStats, in_state_dtypes

__all__ = ["DiceScore", "GeneralizedDiceScore", "MeanIoU", "one_hot", "one_hot_inputs"]

InputFormat = Literal["one-hot", "index", "mixed"]

# Deferred-check state names (torch.nn.functional.one_hot's messages for the labels it rejects, on the CPU).
NEGATIVE_CLASS = "invalid_negative_class"
LARGE_CLASS = "invalid_large_class"


def one_hot(labels: Tensor, num_classes: int) -> tuple[Tensor, Tensor, Tensor]:
    """``F.one_hot(labels, num_classes).movedim(-1, 1)`` without a host read; also whether a label is < 0, too large.

    Example:
        >>> masks, negative, large = one_hot(torch.tensor([[0, 2]]), 3)
        >>> masks.tolist(), bool(negative), bool(large)
        ([[[1, 0], [0, 0], [0, 1]]], False, False)
    """
    if labels.dtype != torch.long:
        torch.nn.functional.one_hot(labels.reshape(-1)[:0], num_classes)  # torch's own dtype error, no data read
    classes = torch.arange(num_classes, device=labels.device).view(1, num_classes, *([1] * (labels.ndim - 1)))
    masks = (labels.unsqueeze(1) == classes).long()
    return masks, (labels < 0).any(), (labels >= num_classes).any()


def _formatted(tensor: Tensor, num_classes: int, checks: list[Tensor]) -> Tensor:
    """Torchmetrics' ``_format_logits``: scores become the one-hot of their argmax; integer masks stay as they are."""
    if not torch.is_floating_point(tensor):
        return tensor
    return _labels_one_hot(tensor.argmax(dim=1), num_classes, checks)


def _labels_one_hot(labels: Tensor, num_classes: int, checks: list[Tensor]) -> Tensor:
    masks, negative, large = one_hot(labels, num_classes)
    checks.extend((negative, large))
    return masks


def _classes_of(tensor: Tensor) -> int:
    """Torchmetrics' ``_get_num_classes``: the size of dimension 1, with its errors."""
    try:
        num_classes = tensor.shape[1]
    except IndexError as err:
        raise IndexError(f"Cannot determine `num_classes` from tensor: {tensor}.") from err
    if num_classes == 0:
        raise ValueError(f"Expected argument `num_classes` to be a positive integer, but got {num_classes}.")
    return num_classes


def one_hot_inputs(
    preds: Tensor, target: Tensor, include_background: bool, num_classes: int | None, input_format: InputFormat
) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
    """Torchmetrics' ``_segmentation_inputs_format`` without host reads: integer masks and label checks.

    Example:
        >>> p, t, checks = one_hot_inputs(torch.tensor([[[0, 1]]]), torch.tensor([[[1, 1]]]), False, 2, "index")
        >>> p.tolist(), t.tolist(), sorted(checks)
        ([[[[0, 1]]]], [[[[1, 1]]]], ['invalid_large_class', 'invalid_negative_class'])
    """
    if input_format == "mixed":
        _check_mixed_shape(preds, target)
    else:
        _check_same_shape(preds, target)
    checks: list[Tensor] = []
    if input_format == "index":
        if num_classes is None:
            raise ValueError("Argument `num_classes` must be provided when `input_format='index'`.")
        preds = _labels_one_hot(preds, num_classes, checks)
        target = _labels_one_hot(target, num_classes, checks)
    elif input_format == "one-hot":
        num_classes = num_classes or _classes_of(preds)
        preds = _formatted(preds, num_classes, checks)
        target = _formatted(target, num_classes, checks)
    elif preds.dim() == target.dim() + 1:  # mixed: one-hot preds, index target
        num_classes = num_classes or _classes_of(preds)
        preds = _formatted(preds, num_classes, checks)
        target = _labels_one_hot(target, num_classes, checks)
    elif preds.dim() + 1 == target.dim():  # mixed: index preds, one-hot target
        num_classes = num_classes or _classes_of(target)
        target = _formatted(target, num_classes, checks)
        preds = _labels_one_hot(preds, num_classes, checks)
    if preds.ndim < 3:
        raise ValueError(f"Expected both `preds` and `target` to have at least 3 dimensions, but got {preds.ndim}.")
    if not include_background:
        preds, target = _ignore_background(preds, target)
    violations = {}
    if checks:
        violations = {NEGATIVE_CLASS: torch.stack(checks[0::2]).any(), LARGE_CLASS: torch.stack(checks[1::2]).any()}
    return preds, target, violations


class _SyncFreeSegmentation(SyncFreeBatchStats):
    """What the segmentation metrics share: the label checks one-hot encoding needs, and the batch value's dtypes."""

    def _deferred_checks(self) -> dict[str, str]:
        return {NEGATIVE_CLASS: ONE_HOT_NEGATIVE_MESSAGE, LARGE_CLASS: ONE_HOT_RANGE_MESSAGE}

    def _one_hot(self, preds: Tensor, target: Tensor, num_classes: int | None) -> tuple[Tensor, Tensor, dict]:
        return one_hot_inputs(preds, target, self.include_background, num_classes, self.input_format)

    def _batch_value(self, stats: BatchStats) -> Any:
        return super()._batch_value(in_state_dtypes(self, stats))


class MeanIoU(_SyncFreeSegmentation, tm.MeanIoU):
    """No host sync in ``update()`` or ``forward()``."""

    _stat_states = ("score", "num_batches")

    def _batch_stats(self, preds: Tensor, target: Tensor) -> BatchStats:
        if not self._is_initialized:
            self._size_states(preds, target)
        preds, target = _mean_iou_reshape_args(preds, target, self.input_format)
        preds, target, violations = self._one_hot(preds, target, self.num_classes)
        # torchmetrics' own counts on the masks (with their background already dropped here).
        intersection, union = _mean_iou_update(preds, target, self.num_classes, True, "one-hot")
        score = _safe_divide(intersection, union, zero_division=0.0)
        valid = union > 0  # only classes present in the sample count
        score = score * valid
        if self.per_class:
            return BatchStats((score.sum(dim=0), valid.sum(dim=0)), violations)
        return BatchStats((score.sum(), valid.sum()), violations)

    def _size_states(self, preds: Tensor, target: Tensor) -> None:
        """Torchmetrics' first update with ``num_classes=None``: the number of classes from the shapes."""
        try:
            if self.input_format == "one-hot":
                self.num_classes = preds.shape[1]
            elif self.input_format == "mixed":
                if preds.dim() == target.dim() + 1:
                    self.num_classes = preds.shape[1]
                elif preds.dim() + 1 == target.dim():
                    self.num_classes = target.shape[1]
                else:
                    raise ValueError(
                        "Predictions and targets are expected to have the same shape,",
                        f"got {preds.shape} and {target.shape}.",
                    )
            else:
                raise ValueError("Argument `num_classes` must be provided when `input_format` is 'index'.")
        except IndexError as err:
            raise IndexError(f"Cannot determine `num_classes` from `preds` tensor: {preds}.") from err
        if self.num_classes == 0:
            raise ValueError(f"Expected argument `num_classes` to be a positive integer, but got {self.num_classes}.")
        classes = self.num_classes - 1 if not self.include_background else self.num_classes
        # What it holds (a resume or a merge) is added to the sized states, as torchmetrics' forward adds it.
        held = {name: getattr(self, name) for name in self._stat_states}
        for value in held.values():
            if value.ndim > 1 or value.numel() not in (1, classes):
                self.num_classes = None
                raise RuntimeError(
                    f"MeanIoU holds scores for {value.numel()} classes (a loaded or merged state) but this batch gives"
                    f" {classes} (`num_classes=None`: the classes are dimension 1 of the inputs)."
                )
        self.add_state("score", torch.zeros(classes, device=self.device, dtype=self.dtype), dist_reduce_fx="sum")
        self.add_state("num_batches", torch.zeros(classes, device=self.device, dtype=torch.int32), dist_reduce_fx="sum")
        self._is_initialized = True
        self._own_states()
        for name, value in held.items():
            getattr(self, name).copy_(value)  # broadcast as torchmetrics adds a 1-element state; the defaults are 0


class GeneralizedDiceScore(_SyncFreeSegmentation, tm.GeneralizedDiceScore):
    """No host sync in ``update()`` or ``forward()``."""

    _stat_states = ("score", "samples")

    def _batch_stats(self, preds: Tensor, target: Tensor) -> BatchStats:
        samples = preds.shape[0]
        preds, target, violations = self._one_hot(preds, target, self.num_classes)
        numerator, denominator = generalized_dice_terms(preds, target, self.weight_type)
        score = _generalized_dice_compute(numerator, denominator, self.per_class).sum(dim=0)
        return BatchStats((score, samples), violations)


def generalized_dice_terms(preds: Tensor, target: Tensor, weight_type: str) -> tuple[Tensor, Tensor]:
    """Torchmetrics' ``_generalized_dice_update`` on masks, its infinite-weight mask writes done by ``torch.where``."""
    reduce_axis = list(range(2, target.ndim))
    intersection = torch.sum(preds * target, dim=reduce_axis)
    target_sum = torch.sum(target, dim=reduce_axis)
    pred_sum = torch.sum(preds, dim=reduce_axis)
    cardinality = target_sum + pred_sum
    if weight_type == "simple":
        weights = 1.0 / target_sum
    elif weight_type == "linear":
        weights = torch.ones_like(target_sum)
    elif weight_type == "square":
        weights = 1.0 / (target_sum**2)
    else:
        raise ValueError(
            f"Expected argument `weight_type` to be one of 'simple', 'linear', 'square', but got {weight_type}."
        )
    shape = weights.shape
    infs = torch.isinf(weights)
    finite = weights.masked_fill(infs, 0)
    class_max = torch.max(finite, 0).values.repeat(shape[0], 1).T.reshape(shape)
    weights = torch.where(infs, class_max, finite)
    return 2.0 * intersection * weights, cardinality * weights


class DiceScore(_SyncFreeSegmentation, tm.DiceScore):
    """No host sync in ``update()`` or ``forward()``."""

    _stat_states = ("numerator", "denominator", "support")

    def _batch_stats(self, preds: Tensor, target: Tensor) -> BatchStats:
        preds, target, violations = self._one_hot(preds, target, self.num_classes)
        return BatchStats(_dice_score_update(preds, target, self.num_classes, True, "one-hot"), violations)

    def _batch_value(self, stats: BatchStats) -> Tensor:
        numerator, denominator, support = stats.values
        return dice_compute(numerator, denominator, support, self.average, self.aggregation_level)

    def compute(self) -> Tensor:
        """Raise deferred label errors, then the Dice score as torchmetrics computes it (no boolean-mask write)."""
        self._raise_deferred_checks()
        numerator, denominator = dim_zero_cat(self.numerator), dim_zero_cat(self.denominator)
        support = dim_zero_cat(self.support) if self.average == "weighted" else None
        return dice_compute(numerator, denominator, support, self.average, self.aggregation_level)


def dice_compute(
    numerator: Tensor, denominator: Tensor, support: Tensor | None, average: str | None, aggregation_level: str
) -> Tensor:
    """Torchmetrics' ``DiceScore.compute`` on concatenated states; ``"weighted"`` restores NaN with ``masked_fill``."""
    if average != "weighted":
        return _dice_score_compute(numerator, denominator, average, aggregation_level, support).nanmean(dim=0)
    if aggregation_level == "global":
        numerator = torch.sum(numerator, dim=0).unsqueeze(0)
        denominator = torch.sum(denominator, dim=0).unsqueeze(0)
        support = torch.sum(support, dim=0)
    dice = _safe_divide(numerator, denominator, zero_division="nan")
    weights = _safe_divide(support, torch.sum(support, dim=-1, keepdim=True), zero_division="nan")
    all_nan = dice.isnan().all(dim=-1)
    return torch.nansum(dice * weights, dim=-1).masked_fill(all_nan, torch.nan).nanmean(dim=0)
