"""Sync-free precision-recall curves, ROC, AUROC and average precision, binary/multiclass/multilabel.

Binned (``thresholds`` given): one kernel for every task (:func:`binned_confmat`), and ``forward()``'s batch value
from masked device ops (without torchmetrics' NaN-class warning). Unbinned: ``update`` lists every entry, ignored ones
included; ``compute()`` drops them (a host read) before torchmetrics' own computation. A batch that violated a
deferred check gets a NaN batch value shaped like its curve.
"""

import warnings
from typing import Any, ClassVar

import torch
import torchmetrics.classification as tm
from torch import Tensor

from torchmetrics_async._torchmetrics import (
    ONE_HOT_NEGATIVE_MESSAGE,
    ONE_HOT_RANGE_MESSAGE,
    Metric,
    _auc_compute_without_check,
    _binary_auroc_compute,
    _binary_average_precision_compute,
    _binary_precision_recall_curve_compute,
    _binary_roc_compute,
    _multiclass_precision_recall_curve_compute,
    _multiclass_roc_compute,
    _multilabel_precision_recall_curve_compute,
    _multilabel_roc_compute,
    _reduce_auroc,
    _reduce_average_precision,
    _safe_divide,
    binary_curve_tensor_validation,
    binary_target_values_message,
    check_same_shape,
    dim_zero_cat,
    multiclass_curve_tensor_validation,
    multiclass_curve_values_message,
    num_labels_mismatch_message,
)
from torchmetrics_async.batch_stats import BatchStats, SyncFreeBatchStats
from torchmetrics_async.classification.binary import INVALID_TARGET, normalize_scores, outside_unit_interval
from torchmetrics_async.deferred import DEFERRED_RAISE_OWNED

__all__ = [
    "CURVE_ORIGINS",
    "UNBINNED_FORWARD_CAVEAT",
    "BinaryAUROC",
    "BinaryAveragePrecision",
    "BinaryPrecisionRecallCurve",
    "BinaryROC",
    "MulticlassAUROC",
    "MulticlassAveragePrecision",
    "MulticlassPrecisionRecallCurve",
    "MulticlassROC",
    "MultilabelAUROC",
    "MultilabelAveragePrecision",
    "MultilabelPrecisionRecallCurve",
    "MultilabelROC",
]

#: What ``forward()`` still reads on the host (the coverage listing's caveat for every class of the family).
UNBINNED_FORWARD_CAVEAT = (
    "forward() with thresholds=None (the default) returns the batch's curve, whose shape depends on the data: it makes"
    " the host reads of compute() on the batch; update() is sync-free, and forward() too with binned thresholds"
)
#: The torchmetrics classes of the family (and their task wrappers), whose forward() has that caveat.
CURVE_ORIGINS = tuple(
    getattr(tm, f"{task}{kind}")
    for kind in (
        "PrecisionRecallCurve",
        "ROC",
        "AUROC",
        "AveragePrecision",
        "RecallAtFixedPrecision",
        "PrecisionAtFixedRecall",
        "SensitivityAtSpecificity",
        "SpecificityAtSensitivity",
        "EER",
        "LogAUC",
    )
    for task in ("", "Binary", "Multiclass", "Multilabel")
)

# Deferred checks of a multiclass label outside [0, num_classes): below 0, and num_classes or more (torch's one_hot
# messages, which torchmetrics' binned and micro-averaged curves raise).
TARGET_NEGATIVE = "target_negative"
TARGET_OUT_OF_RANGE = "target_out_of_range"
SOFTMAX_LOGITS = "softmax_logits"
SOFTMAX_LOGITS_MESSAGE = (
    "Binary curve with `normalization='softmax'` got scores outside [0, 1] (logits): torchmetrics applies a softmax "
    "over dim 1 of the flattened `(N,)` scores, which raises IndexError (Dimension out of range); pass probabilities "
    "or use `normalization='sigmoid'`."
)
# The target an ignored row gets in the one-hot targets of the unbinned micro-averaged multiclass curves.
_IGNORED_ONE_HOT = -1
# A task's scores (N, C), positives, weights (None: all 1) for the binned kernel, and the unbinned list states' values.
_CurveInputs = tuple[Tensor, Tensor, Tensor | None, tuple[Tensor, Tensor]]


def _zero_one_targets(
    target: Tensor, keep: Tensor | None, check: bool, violations: dict[str, Tensor]
) -> tuple[Tensor, Tensor]:
    """Positives and weights of 0/1 targets: a kept target neither 0 nor 1 weighs 0 (a violation when ``check``)."""
    positive = target == 1
    counted = positive | (target == 0)
    if check:
        outside = torch.logical_not(counted)
        violations[INVALID_TARGET] = outside if keep is None else outside & keep
    return positive, counted if keep is None else counted & keep


def paired_shapes(preds: tuple[int, ...], target: tuple[int, ...]) -> bool:
    """Whether entries of these shapes pair one to one in order: equal up to size-1 dimensions (metadata, checked free).

    Example:
        >>> paired_shapes((4, 1), (4,)), paired_shapes((4, 2), (8,)), paired_shapes((4,), (3,))
        (True, False, False)
    """
    return [size for size in preds if size != 1] == [size for size in target if size != 1]


def binned_confmat(
    scores: Tensor, positive: Tensor, weight: Tensor | None, sorted_thresholds: Tensor, rank: Tensor
) -> Tensor:
    """Per-threshold, per-class 2x2 confusion matrices ``(T, C, 2, 2)``, as torchmetrics' binned curves count them.

    ``weight`` 0 leaves an entry out; ``rank`` maps the sorted thresholds back to the metric's order.

    Example:
        >>> thresholds = torch.tensor([0.0, 0.5, 1.0])
        >>> scores, positive = torch.tensor([[0.2], [0.7]]), torch.tensor([[False], [True]])
        >>> binned_confmat(scores, positive, None, thresholds, torch.arange(3))[1, 0]
        tensor([[1, 0],
                [0, 1]])
    """
    rows, classes = scores.shape
    count = sorted_thresholds.numel()
    dtype = torch.promote_types(scores.dtype, sorted_thresholds.dtype)
    # How many thresholds each score reaches (score >= threshold); NaN reaches none, as torchmetrics' comparison.
    reached = torch.searchsorted(sorted_thresholds.to(dtype), scores.to(dtype).contiguous(), right=True)
    reached = reached.masked_fill(torch.isnan(scores), 0)
    offsets = torch.arange(0, 2 * classes * (count + 1), 2 * (count + 1), device=scores.device)
    bins = offsets + positive.long() * (count + 1) + reached
    if weight is None:
        counts = torch.ones((), dtype=torch.long, device=scores.device).expand(rows * classes)
    else:
        counts = weight.expand(rows, classes).reshape(-1).long()
    histogram = torch.zeros(2 * classes * (count + 1), dtype=torch.long, device=scores.device)
    histogram = histogram.index_add_(0, bins.reshape(-1), counts).view(classes, 2, count + 1)
    # at_least[..., i]: entries reaching i thresholds or more, i.e. score >= sorted_thresholds[i - 1].
    at_least = histogram.flip(-1).cumsum(-1).flip(-1)
    totals = at_least[..., :1]
    above = at_least[..., 1:].index_select(-1, rank)
    below = totals - above
    # [target][predicted]: tn, fp, fn, tp, stacked into a fresh contiguous (T, C, 4): laid out as torchmetrics' state,
    # the curves' reductions over it run in torchmetrics' order (a strided view is summed in another: 1-2 ulp off).
    confmat = torch.stack((below[:, 0].T, above[:, 0].T, below[:, 1].T, above[:, 1].T), dim=-1)
    return confmat.view(count, classes, 2, 2)


def distinct_values(values: Tensor) -> Tensor:
    """How many distinct values ``values`` holds, as a 0-dim device tensor (``len(torch.unique(values))``, no sync).

    Example:
        >>> distinct_values(torch.tensor([3, 1, 3, 0]))
        tensor(3)
    """
    ordered = values.reshape(-1).sort().values
    return (ordered[1:] != ordered[:-1]).sum() + (1 if ordered.numel() else 0)


def nan_ignoring_average(scores: Tensor, average: str | None, weights: Tensor) -> Tensor:
    """Torchmetrics' ``_reduce_auroc``/``_reduce_average_precision`` averaging with NaN classes masked out, no warning.

    Example:
        >>> nan_ignoring_average(torch.tensor([0.5, float("nan"), 1.0]), "macro", torch.ones(3))
        tensor(0.7500)
    """
    if average is None or average == "none":
        return scores
    nan = torch.isnan(scores)
    kept = scores.masked_fill(nan, 0)
    if average == "macro":
        # No NaN class (always so for binned AUROC/AP): torchmetrics' own mean, which CUDA computes as sum * (1 / n),
        # not sum / n.
        return torch.where(nan.any(), kept.sum() / torch.logical_not(nan).sum(), scores.mean())
    if average == "weighted" and weights is not None:
        weights = weights.masked_fill(nan, 0)
        return (kept * _safe_divide(weights, weights.sum())).sum()
    raise ValueError("Received an incompatible combinations of inputs to make reduction.")


def binary_auroc_binned(confmat: Tensor, thresholds: Tensor, max_fpr: float | None) -> Tensor:
    """Torchmetrics' ``_binary_auroc_compute`` on a binned state, its ``max_fpr`` branch and cut picked on the device.

    Example:
        >>> confmat = torch.tensor([[[2, 2], [0, 2]], [[4, 0], [1, 1]], [[4, 0], [2, 0]]])
        >>> binary_auroc_binned(confmat, torch.tensor([0.0, 0.5, 1.0]), None)
        tensor(0.3750)
    """
    if max_fpr is None or max_fpr == 1:
        return _binary_auroc_compute(confmat, thresholds, None)
    fpr, tpr, _ = _binary_roc_compute(confmat, thresholds)
    full = _auc_compute_without_check(fpr, tpr, 1.0)
    points = fpr.numel()
    max_area = torch.full((), max_fpr, dtype=torch.get_default_dtype(), device=fpr.device)
    stop = torch.bucketize(max_area, fpr, out_int32=True, right=True).long()
    before = torch.remainder(stop - 1, points)  # torchmetrics indexes fpr[stop - 1]: -1 is the last point
    after = stop.clamp(max=points - 1)
    fpr_before, fpr_after = fpr.index_select(0, before.view(1)), fpr.index_select(0, after.view(1))
    tpr_before, tpr_after = tpr.index_select(0, before.view(1)), tpr.index_select(0, after.view(1))
    weight = (max_area - fpr_before) / (fpr_after - fpr_before)
    cut_tpr = torch.lerp(tpr_before, tpr_after, weight)
    trapezoids = (fpr[1:] - fpr[:-1]) * (tpr[1:] + tpr[:-1]) / 2
    inside = torch.arange(points - 1, device=fpr.device) < stop - 1
    last = ((max_area - fpr_before) * (tpr_before + cut_tpr) / 2).squeeze(0)
    partial = trapezoids.masked_fill(torch.logical_not(inside), 0).sum() + torch.where(stop > 0, last, 0)
    min_area = 0.5 * max_area**2
    corrected = 0.5 * (1 + (partial - min_area) / (max_area - min_area))
    return torch.where((fpr.sum() == 0) | (tpr.sum() == 0), full, corrected)


class _SyncFreeCurve(SyncFreeBatchStats):
    """The binned kernel, the unbinned list states and their ignored entries, the checks (tasks: ``_curve_inputs``)."""

    # Per-instance constants (set below) that torch.jit.script need not type.
    __jit_ignored_attributes__: ClassVar[list[str]] = [
        *Metric.__jit_ignored_attributes__,
        "_stat_states",
        "_sorted_thresholds",
        "_threshold_rank",
    ]

    def _set_constants(self) -> None:
        super()._set_constants()
        state = self.__dict__
        thresholds = self.thresholds
        state["_stat_states"] = ("preds", "target") if thresholds is None else ("confmat",)
        if thresholds is not None:
            # Sorted once per device (searchsorted needs ascending boundaries); rank maps back to the given order.
            ordered, order = thresholds.sort()
            state["_sorted_thresholds"] = ordered
            state["_threshold_rank"] = order.argsort()

    def _checks_values(self) -> bool:
        """Whether target values are checked (``validate_args`` unless a class says otherwise)."""
        return self.validate_args

    def _deferred_checks(self) -> dict[str, str]:
        return {INVALID_TARGET: binary_target_values_message(self.ignore_index)} if self._checks_values() else {}

    def _batch_stats(self, preds: Tensor, target: Tensor) -> BatchStats:
        violations: dict[str, Tensor] = {}
        scores, positive, weight, listed = self._curve_inputs(preds, target, violations)
        if self.thresholds is None:
            return BatchStats(listed, violations)
        state = self.__dict__
        confmat = binned_confmat(scores, positive, weight, state["_sorted_thresholds"], state["_threshold_rank"])
        return BatchStats((self._binned_state(confmat),), violations)

    def _binned_state(self, confmat: Tensor) -> Tensor:
        """What torchmetrics adds to its ``confmat`` state for the batch's ``(T, C, 2, 2)`` counts."""
        return confmat

    def _kept(self, preds: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:
        """The unbinned states with ignored entries dropped (a host read: data-dependent shape)."""
        if self.ignore_index is None:
            return preds, target
        kept = target != self.ignore_index
        return preds[kept], target[kept]

    def _torchmetrics_compute(self, *values: Tensor) -> Any:
        """Torchmetrics' ``compute()`` on these states alone (the base's batch value: its checks skipped)."""
        return super()._batch_value(BatchStats(values, {}))

    def _binned_value(self, confmat: Tensor) -> Any:
        """``compute()`` on the batch's binned state alone, without a host sync."""
        return self._torchmetrics_compute(confmat)

    def _batch_value(self, stats: BatchStats) -> Any:
        if self.thresholds is not None:
            return self._binned_value(stats.values[0])
        try:
            return self._torchmetrics_compute(*self._kept(*stats.values))
        except Exception:
            # torchmetrics can fail on a batch its update would have rejected (a label empty once ignored entries are
            # dropped, a negative one in bincount): such a batch's value is NaN, its error compute()'s (a host read).
            violated = self._batch_violation(stats)
            if violated is None or not bool(violated):
                raise
        preds, target = stats.values
        # The batch's curve with every target a valid one (NaN-filled by forward(): the batch violated a check).
        valid = torch.full_like(target, 1 if self.ignore_index == 0 else 0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # no positives/negatives among the placeholders: not the user's data
            return self._torchmetrics_compute(preds, valid)

    def compute(self) -> Any:
        """Raise deferred value errors, then compute as torchmetrics does (on the kept entries, unbinned)."""
        self._raise_deferred_checks()
        if self.thresholds is not None and self.__dict__.get(DEFERRED_RAISE_OWNED, False):
            # The caller owns the host reads (AsyncMetricCollector, torchmetrics' forward of a subclass): no sync.
            return self._binned_value(self.confmat)
        if self.thresholds is None and self.ignore_index is not None:
            return self._torchmetrics_compute(*self._kept(dim_zero_cat(self.preds), dim_zero_cat(self.target)))
        return super(SyncFreeBatchStats, self).compute()


class _BinaryCurve(_SyncFreeCurve):
    """Binary inputs ``(N, ...)``: flattened, ignored and non-binary targets weighted out."""

    def _deferred_checks(self) -> dict[str, str]:
        checks = super()._deferred_checks()
        if getattr(self, "normalization", "sigmoid") == "softmax":
            checks[SOFTMAX_LOGITS] = SOFTMAX_LOGITS_MESSAGE
        return checks

    def _curve_inputs(self, preds: Tensor, target: Tensor, violations: dict[str, Tensor]) -> _CurveInputs:
        if self.validate_args:
            binary_curve_tensor_validation(preds, target)
        elif not paired_shapes(preds.shape, target.shape):
            check_same_shape(preds, target)
        preds, target = preds.flatten(), target.flatten()
        keep = None if self.ignore_index is None else target != self.ignore_index
        normalization = getattr(self, "normalization", "sigmoid")
        if normalization == "softmax":
            # torchmetrics normalizes the flattened (N,) scores with a softmax over dim 1: an IndexError where it
            # normalizes (logits), none where it does not (probabilities, an empty batch). Which is data: deferred.
            violations[SOFTMAX_LOGITS] = outside_unit_interval(preds, keep)
            scores = preds
        else:
            scores = normalize_scores(preds, normalization, keep)
        positive, weight = _zero_one_targets(target, keep, self._checks_values(), violations)
        return scores.unsqueeze(1), positive.unsqueeze(1), weight.unsqueeze(1), (scores, target)

    def _binned_state(self, confmat: Tensor) -> Tensor:
        return confmat[:, 0]


class _MulticlassCurve(_SyncFreeCurve):
    """Multiclass inputs ``(N, C, ...)`` / ``(N, ...)``: one-vs-rest per class, ignored rows weighted out."""

    def _checks_range(self) -> bool:
        """Whether labels outside [0, num_classes) are errors."""
        # torchmetrics one-hot encodes the target of binned and micro-averaged curves whatever validate_args says;
        # validated, an out-of-range label is an error for every average (torchmetrics lets [0, 1, 3] of 3 classes by).
        return self.validate_args or self.thresholds is not None or self.average == "micro"

    def _deferred_checks(self) -> dict[str, str]:
        checks = {}
        if self.validate_args:
            checks[INVALID_TARGET] = multiclass_curve_values_message(self.num_classes, self.ignore_index)
        if self._checks_range():
            checks[TARGET_NEGATIVE] = ONE_HOT_NEGATIVE_MESSAGE
            checks[TARGET_OUT_OF_RANGE] = ONE_HOT_RANGE_MESSAGE
        return checks

    def _curve_inputs(self, preds: Tensor, target: Tensor, violations: dict[str, Tensor]) -> _CurveInputs:
        num_classes = self.num_classes
        if self.validate_args:
            multiclass_curve_tensor_validation(preds, target, num_classes)
            allowed = num_classes if self.ignore_index is None else num_classes + 1
            violations[INVALID_TARGET] = distinct_values(target) > allowed
        elif (
            preds.ndim < 2
            or preds.shape[1] != num_classes
            or not paired_shapes(preds.shape[:1] + preds.shape[2:], target.shape)
        ):
            multiclass_curve_tensor_validation(preds, target, num_classes, check_dtypes=False)
        preds = preds.transpose(0, 1).reshape(num_classes, -1).T
        target = target.flatten()
        keep = None if self.ignore_index is None else (target != self.ignore_index).unsqueeze(1)
        scores = normalize_scores(preds, "softmax", keep)
        positive = target.unsqueeze(1) == torch.arange(num_classes, device=target.device)
        if self._checks_range():
            negative, large = target < 0, target >= num_classes
            if keep is not None:
                negative, large = negative & keep.squeeze(1), large & keep.squeeze(1)
            violations[TARGET_NEGATIVE], violations[TARGET_OUT_OF_RANGE] = negative, large
        listed = (scores, target)
        if self.average == "micro" and self.thresholds is None:
            one_hot = positive.long()
            if keep is not None:
                one_hot = one_hot.masked_fill(torch.logical_not(keep), _IGNORED_ONE_HOT)
            listed = (scores.flatten(), one_hot.flatten())
        return scores, positive, keep, listed

    def _binned_state(self, confmat: Tensor) -> Tensor:
        # micro: torchmetrics adds the (T, 2, 2) counts to its (T, C, 2, 2) state, broadcasting as it can (or failing).
        return confmat.sum(1) if self.average == "micro" else confmat

    def _binned_value(self, confmat: Tensor) -> Any:
        if self.average == "micro":
            confmat = torch.zeros_like(self.confmat) + confmat  # the fresh state torchmetrics' forward updates
        return super()._binned_value(confmat)

    def _kept(self, preds: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:
        if self.ignore_index is None:
            return preds, target
        ignored = _IGNORED_ONE_HOT if self.average == "micro" else self.ignore_index
        kept = target != ignored
        return preds[kept], target[kept]


class _MultilabelCurve(_SyncFreeCurve):
    """Multilabel inputs ``(N, C, ...)``: per label; ignored entries stay listed (torchmetrics' compute drops them)."""

    def _curve_inputs(self, preds: Tensor, target: Tensor, violations: dict[str, Tensor]) -> _CurveInputs:
        num_labels = self.num_labels
        if self.validate_args:
            binary_curve_tensor_validation(preds, target)
        elif target.ndim < 2 or target.shape[1] != num_labels or not paired_shapes(preds.shape, target.shape):
            check_same_shape(preds, target)
        if preds.shape[1] != num_labels:
            raise ValueError(num_labels_mismatch_message(preds.shape[1], num_labels))
        preds = preds.transpose(0, 1).reshape(num_labels, -1).T
        target = target.transpose(0, 1).reshape(num_labels, -1).T
        scores = normalize_scores(preds, "sigmoid")  # torchmetrics normalizes before masking ignored entries
        keep = None if self.ignore_index is None else target != self.ignore_index
        positive, weight = _zero_one_targets(target, keep, self.validate_args, violations)
        return scores, positive, weight, (scores, target)

    def _kept(self, preds: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:
        return preds, target


def binned_curve(metric: _SyncFreeCurve, confmat: Tensor, roc: bool) -> tuple[Tensor, Tensor, Tensor]:
    """The ROC (else precision-recall) curve of the metric's task from a binned state, as its ROC/PR ``compute``."""
    if isinstance(metric, _BinaryCurve):
        return (_binary_roc_compute if roc else _binary_precision_recall_curve_compute)(confmat, metric.thresholds)
    if isinstance(metric, _MulticlassCurve):
        if metric.average == "micro":  # the fresh (T, C, 2, 2) state torchmetrics' forward adds the batch to
            confmat = torch.zeros_like(metric.confmat) + confmat
        compute = _multiclass_roc_compute if roc else _multiclass_precision_recall_curve_compute
        return compute(confmat, metric.num_classes, metric.thresholds, metric.average)
    compute = _multilabel_roc_compute if roc else _multilabel_precision_recall_curve_compute
    return compute(confmat, metric.num_labels, metric.thresholds)


def _class_average(metric: Any, scores: Tensor, confmat: Tensor) -> Tensor:
    """Per-class scores averaged as torchmetrics' AUROC/AP, weighted by each class's positives."""
    return nan_ignoring_average(scores, metric.average, confmat[0][:, 1, :].sum(-1))


class BinaryPrecisionRecallCurve(_BinaryCurve, tm.BinaryPrecisionRecallCurve):
    """No host sync in ``update()``, nor in a binned ``forward()`` (``thresholds=None`` reads, as ``compute()``)."""


class MulticlassPrecisionRecallCurve(_MulticlassCurve, tm.MulticlassPrecisionRecallCurve):
    """No host sync in ``update()``, nor in a binned ``forward()`` (``thresholds=None`` reads, as ``compute()``)."""


class MultilabelPrecisionRecallCurve(_MultilabelCurve, tm.MultilabelPrecisionRecallCurve):
    """No host sync in ``update()``, nor in a binned ``forward()`` (``thresholds=None`` reads, as ``compute()``)."""


class BinaryROC(_BinaryCurve, tm.BinaryROC):
    """No host sync in ``update()``, nor in a binned ``forward()`` (``thresholds=None`` reads, as ``compute()``)."""


class MulticlassROC(_MulticlassCurve, tm.MulticlassROC):
    """No host sync in ``update()``, nor in a binned ``forward()`` (``thresholds=None`` reads, as ``compute()``)."""


class MultilabelROC(_MultilabelCurve, tm.MultilabelROC):
    """No host sync in ``update()``, nor in a binned ``forward()`` (``thresholds=None`` reads, as ``compute()``)."""


class BinaryAUROC(_BinaryCurve, tm.BinaryAUROC):
    """No host sync in ``update()``, nor in a binned ``forward()`` (``thresholds=None`` reads, as ``compute()``).

    ``validate_args=True`` checks the targets, which torchmetrics' ``BinaryAUROC`` never does.
    """

    def __init__(
        self,
        max_fpr: float | None = None,
        thresholds: int | list[float] | Tensor | None = None,
        ignore_index: int | None = None,
        validate_args: bool = True,
        **kwargs: Any,
    ) -> None:
        self.__dict__["_validate_values"] = validate_args
        super().__init__(max_fpr, thresholds, ignore_index, validate_args, **kwargs)

    def _add_extra_states(self) -> None:
        # torchmetrics' BinaryAUROC keeps no trace of its validate_args: one accelerate() adopts gets the default.
        self.__dict__.setdefault("_validate_values", True)
        super()._add_extra_states()

    def _checks_values(self) -> bool:
        return self.__dict__["_validate_values"]

    def _binned_value(self, confmat: Tensor) -> Tensor:
        return binary_auroc_binned(confmat, self.thresholds, self.max_fpr)


class MulticlassAUROC(_MulticlassCurve, tm.MulticlassAUROC):
    """No host sync in ``update()``, nor in a binned ``forward()`` (``thresholds=None`` reads, as ``compute()``)."""

    def _binned_value(self, confmat: Tensor) -> Tensor:
        fpr, tpr, _ = _multiclass_roc_compute(confmat, self.num_classes, self.thresholds)
        return _class_average(self, _reduce_auroc(fpr, tpr, "none"), confmat)


class MultilabelAUROC(_MultilabelCurve, tm.MultilabelAUROC):
    """No host sync in ``update()``, nor in a binned ``forward()`` (``thresholds=None`` reads, as ``compute()``)."""

    def _binned_value(self, confmat: Tensor) -> Tensor:
        if self.average == "micro":
            return _binary_auroc_compute(confmat.sum(1), self.thresholds, None)
        fpr, tpr, _ = _multilabel_roc_compute(confmat, self.num_labels, self.thresholds)
        return _class_average(self, _reduce_auroc(fpr, tpr, "none"), confmat)


class BinaryAveragePrecision(_BinaryCurve, tm.BinaryAveragePrecision):
    """No host sync in ``update()``, nor in a binned ``forward()`` (``thresholds=None`` reads, as ``compute()``)."""

    def _binned_value(self, confmat: Tensor) -> Tensor:
        return _binary_average_precision_compute(confmat, self.thresholds)


class MulticlassAveragePrecision(_MulticlassCurve, tm.MulticlassAveragePrecision):
    """No host sync in ``update()``, nor in a binned ``forward()`` (``thresholds=None`` reads, as ``compute()``)."""

    def _binned_value(self, confmat: Tensor) -> Tensor:
        precision, recall, _ = _multiclass_precision_recall_curve_compute(confmat, self.num_classes, self.thresholds)
        return _class_average(self, _reduce_average_precision(precision, recall, "none"), confmat)


class MultilabelAveragePrecision(_MultilabelCurve, tm.MultilabelAveragePrecision):
    """No host sync in ``update()``, nor in a binned ``forward()`` (``thresholds=None`` reads, as ``compute()``)."""

    def _binned_value(self, confmat: Tensor) -> Tensor:
        if self.average == "micro":
            return _binary_average_precision_compute(confmat.sum(1), self.thresholds)
        precision, recall, _ = _multilabel_precision_recall_curve_compute(confmat, self.num_labels, self.thresholds)
        return _class_average(self, _reduce_average_precision(precision, recall, "none"), confmat)
