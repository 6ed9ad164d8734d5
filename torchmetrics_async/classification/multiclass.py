"""Sync-free multiclass classification metrics with torchmetrics' names, arguments and values.

Per-class counts come from ``index_add_`` over indices clamped into range, ignored entries weighted 0, instead of
``torch.unique`` checks, boolean masks and ``bincount``; ``top_k > 1`` counts the label torchmetrics' one-hot form does.
"""

from typing import Any, NamedTuple

import torch
import torchmetrics.classification as tm
from torch import Tensor

from torchmetrics_async._torchmetrics import (
    _accuracy_reduce,
    _fbeta_reduce,
    _hamming_distance_reduce,
    _multiclass_confusion_matrix_format,
    _multiclass_stat_scores_format,
    _negative_predictive_value_reduce,
    _precision_recall_reduce,
    _safe_divide,
    _specificity_reduce,
    confusion_matrix_nan_message,
    float_preds_message,
    multiclass_values_message,
    rank_zero_warn,
)
from torchmetrics_async.batch_stats import BatchStats, SyncFreeBatchStats, in_state_dtypes
from torchmetrics_async.classification.binary import (
    INVALID_PREDS,
    INVALID_TARGET,
    BinaryConfusionMatrix,
    Scores,
    normalize_confmat,
    normalize_scores,
)
from torchmetrics_async.classification.shapes import check_multiclass_shapes
from torchmetrics_async.deferred import DEFERRED_RAISE_OWNED

__all__ = [
    "MulticlassAccuracy",
    "MulticlassConfusionMatrix",
    "MulticlassExactMatch",
    "MulticlassF1Score",
    "MulticlassFBetaScore",
    "MulticlassHammingDistance",
    "MulticlassNegativePredictiveValue",
    "MulticlassPrecision",
    "MulticlassRecall",
    "MulticlassSpecificity",
    "MulticlassStatScores",
]


# torchmetrics fails on label preds with top_k > 1 by shape only: raised at once with its exception type.
TOP_K_LABELS_MESSAGE = (
    "`top_k` > 1 needs `preds` of shape (N, C, ...) with probabilities or logits and `target` of shape (N, ...), but"
    " `preds` and `target` have the same number of dimensions."
)
# ... and with integer labels: torchmetrics scatters them as indices (``_refine_preds_oh``), so float labels fail there.
TOP_K_FLOAT_TARGET_MESSAGE = "`top_k` > 1 needs integer `target` labels (torchmetrics scatters them), got {}."


# The kernels below are functions on tensors: no host read, no index out of bounds whatever the values.

# Class indices are exact in float32 up to 2**24, so the float form of first_max_index serves any realistic C.
_EXACT_FLOAT_INDEX = 2**24


def first_max_index(scores: Tensor, dim: int = 1) -> Tensor:
    """``scores.argmax(dim)`` as two reductions that Inductor fuses (``amax``, then ``amin`` of the matching indices).

    Example:
        >>> scores = torch.tensor([[0.2, 0.7, 0.7], [float("nan"), 1.0, float("nan")], [-torch.inf, -torch.inf, 0.0]])
        >>> first_max_index(scores)
        tensor([1, 0, 2])
    """
    size = scores.shape[dim]
    top = scores.amax(dim, keepdim=True)
    # Where the maximum is NaN, the NaNs are its positions (and no value equals it); elsewhere there are no NaNs.
    match = torch.logical_or(scores == top, torch.isnan(scores))
    shape = [1] * scores.ndim
    shape[dim] = size
    index = torch.arange(size, dtype=torch.float32, device=scores.device).view(shape)
    return torch.where(match, index, float(size)).amin(dim).long()


def first_max_applies(preds: Tensor) -> bool:
    """Whether compiled code takes labels by :func:`first_max_index`: float scores on the CPU, classes on dim 1."""
    return (
        preds.device.type == "cpu"
        and preds.is_floating_point()
        and preds.ndim > 1
        and 0 < preds.shape[1] <= _EXACT_FLOAT_INDEX
    )


def as_index(labels: Tensor, num_classes: int) -> Tensor:
    """``labels`` as int64 indices clamped into ``[0, num_classes)``: never out of bounds, whatever the values."""
    labels = labels if labels.dtype == torch.long else labels.long()
    return labels.clamp(0, num_classes - 1)


def ones_like_index(index: Tensor) -> Tensor:
    """Weight 1 for every entry of a 1-D index: one element expanded (no batch-sized allocation)."""
    return torch.ones((), dtype=torch.long, device=index.device).expand(index.shape)


def top_k_labels(preds: Tensor, target: Tensor, top_k: int) -> Tensor:
    """The label torchmetrics' top-k one-hot form counts: the target where it is among the top k scores, else the top 1.

    Example:
        >>> scores = torch.tensor([[[0.1], [0.5], [0.4]], [[0.1], [0.5], [0.4]]])
        >>> top_k_labels(scores, torch.tensor([[2], [0]]), top_k=2)
        tensor([[2],
                [1]])
    """
    top = torch.topk(preds, k=top_k, dim=1).indices
    in_top = (top == target.unsqueeze(1)).any(1)
    return torch.where(in_top, target, top[:, 0])


def class_counts(
    preds: Tensor, target: Tensor, hit: Tensor, keep: Tensor | None, num_classes: int, samplewise: bool
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Per-class int64 ``tp, fp, tn, fn`` of ``(N, M)`` indices from three ``index_add_`` (``samplewise``: per sample).

    Example:
        >>> p, t = torch.tensor([[0, 1, 1]]), torch.tensor([[0, 1, 2]])
        >>> class_counts(p, t, p == t, None, 3, samplewise=False)
        (tensor([1, 1, 0]), tensor([0, 1, 0]), tensor([2, 1, 2]), tensor([0, 0, 1]))
    """
    n, m = target.shape
    groups = n if samplewise else 1
    if samplewise:
        offset = torch.arange(0, n * num_classes, num_classes, device=target.device).unsqueeze(1)
        target = target + offset
        preds = preds + offset
    target = target.reshape(-1)
    preds = preds.reshape(-1)
    if keep is None:
        weight = ones_like_index(target)
        kept: Tensor | int = m if samplewise else n * m
    else:
        weight = keep.reshape(-1).long()
        kept = keep.sum(1, keepdim=True) if samplewise else keep.sum()
    tp, predicted, actual = torch.zeros(3, groups * num_classes, dtype=torch.long, device=target.device).unbind(0)
    tp.index_add_(0, target, hit.reshape(-1).long())
    predicted.index_add_(0, preds, weight)
    actual.index_add_(0, target, weight)
    shape = (n, num_classes) if samplewise else (num_classes,)
    tp, predicted, actual = tp.view(shape), predicted.view(shape), actual.view(shape)
    fp = predicted - tp
    fn = actual - tp
    # Every counted entry not predicted as and not labelled c is a true negative of c: kept - (tp + fp + fn).
    tn = kept - predicted - fn
    return tp, fp, tn, fn


def micro_counts(preds: Tensor, target: Tensor, keep: Tensor | None, num_classes: int) -> tuple[Tensor, ...]:
    """``tp, fp, tn, fn`` summed over classes, shaped ``(1,)`` like the states, as torchmetrics' micro branch counts.

    Example:
        >>> micro_counts(torch.tensor([[0, 1, 1]]), torch.tensor([[0, 1, 2]]), None, 3)
        (tensor([2]), tensor([1]), tensor([5]), tensor([1]))
    """
    hit = preds == target
    if keep is not None:
        hit = hit & keep
    tp = hit.reshape(-1).sum(0, keepdim=True)
    kept = target.numel() if keep is None else keep.reshape(-1).sum(0, keepdim=True)
    wrong = kept - tp
    # tn = C * kept - (fp + fn + tp) with fp = fn = wrong and tp = kept - wrong.
    tn = kept * (num_classes - 1) - wrong
    return tp, wrong, tn, wrong


def outside(labels: Tensor, index: Tensor | None, num_classes: int, keep: Tensor | None) -> Tensor:
    """Mask of the counted entries whose label is not a class index; ``index``: :func:`as_index` of them, if made."""
    bad = (labels < 0) | (labels >= num_classes) if index is None else index != labels
    return bad if keep is None else bad & keep


def macro_average(score: Tensor, tp: Tensor, fp: Tensor, fn: Tensor, top_k: int) -> Tensor:
    """Macro average as torchmetrics' ``_adjust_weights_safe_divide``, with ``masked_fill`` for its mask write.

    Example:
        >>> tp, fp, fn = torch.tensor([1, 0, 0]), torch.tensor([0, 1, 0]), torch.tensor([1, 0, 0])
        >>> macro_average(torch.tensor([0.5, 0.0, 0.0]), tp, fp, fn, top_k=1)
        tensor(0.2500)
    """
    absent = tp + fp + fn == 0 if top_k == 1 else tp + fn == 0
    weights = torch.ones_like(score).masked_fill_(absent, 0.0)
    return _safe_divide(weights * score, weights.sum(-1, keepdim=True)).sum(-1)


def _value_checks(metric: Any, num_classes: int | None) -> dict[str, str]:
    """The deferred checks of the labels (``num_classes=None``: torchmetrics accepts any value)."""
    if not metric.validate_args or num_classes is None:
        return {}
    return {
        INVALID_TARGET: multiclass_values_message("target", num_classes, metric.ignore_index),
        INVALID_PREDS: multiclass_values_message("preds", num_classes, metric.ignore_index),
    }


def _keep(target: Tensor, ignore_index: int | None) -> Tensor | None:
    return None if ignore_index is None else target != ignore_index


class _SyncFreeMulticlassStatScores(SyncFreeBatchStats):
    """Sync-free ``update`` of torchmetrics' ``MulticlassStatScores`` family (states ``tp, fp, tn, fn``)."""

    def _checked_classes(self) -> int | None:
        """How many classes the value checks allow (``None``: any value, as torchmetrics accepts)."""
        if self.num_classes is not None:
            return self.num_classes
        # num_classes=None counts as one class; only the one-hot (samplewise) form fails on other labels (and takes 1
        # where that is its sentinel class).
        return 1 + self._sentinel_class() if self.multidim_average == "samplewise" else None

    def _deferred_checks(self) -> dict[str, str]:
        return _value_checks(self, self._checked_classes())

    def _sentinel_class(self) -> bool:
        """Whether torchmetrics' one-hot form counts label ``C`` (``num_classes``, or 1) as ignored/no class."""
        ignore = self.ignore_index
        one_hot = self.multidim_average == "samplewise" or self.top_k > 1
        return one_hot and ignore is not None and not 0 <= ignore < (self.num_classes or 1)

    def _set_constants(self) -> None:
        super()._set_constants()
        # Expanded to a batch of ones without allocating it (see _merge_stats).
        self.__dict__["_one_long"] = torch.ones((), dtype=torch.long, device=self.device)

    def _batch_stats(self, preds: Tensor, target: Tensor) -> BatchStats:
        samplewise = self.multidim_average == "samplewise"
        top_k = self.top_k
        check_multiclass_shapes(preds, target, self.num_classes, self.multidim_average, self.validate_args)
        if (
            top_k == 1
            and not samplewise
            and self.average != "micro"
            and self.ignore_index is None
            and preds.ndim == 2
            and target.ndim == 1
            and preds.shape[0] > 0
            and preds.shape[1] == self.num_classes
            and preds.is_floating_point()
        ):
            # The common case, scores (N, C) and labels (N,): class hits, written into the states by _merge_stats.
            compiled = torch.compiler.is_compiling() and first_max_applies(preds)
            preds = first_max_index(preds, 1) if compiled else preds.argmax(1)
            target_index = as_index(target, self.num_classes)
            violations = {INVALID_TARGET: target_index != target} if INVALID_TARGET in self._defaults else {}
            return BatchStats((_ClassHits(preds, target_index, preds == target),), violations)
        label_preds = preds.ndim == target.ndim
        num_classes = self.num_classes or 1
        # Labels from scores are class indices, unless unvalidated scores have more columns than classes.
        clamp_preds = label_preds or preds.shape[1] > num_classes
        # The same reshapes as torchmetrics, so malformed inputs (0-dim, empty batch dimension) fail the same way.
        if top_k == 1 and preds.ndim == target.ndim + 1 and torch.compiler.is_compiling() and first_max_applies(preds):
            preds = first_max_index(preds, 1)
        preds, target = _multiclass_stat_scores_format(preds, target, top_k)
        if top_k > 1 and label_preds:
            ignore = self.ignore_index
            masked_write = ignore is not None and not 0 <= ignore < num_classes and preds.ndim > target.ndim
            raise (IndexError if masked_write else RuntimeError)(TOP_K_LABELS_MESSAGE)
        if top_k > 1 and target.is_floating_point():
            raise RuntimeError(TOP_K_FLOAT_TARGET_MESSAGE.format(target.dtype))
        if top_k > 1:
            preds = top_k_labels(preds, target, top_k)
        keep = _keep(target, self.ignore_index)
        check = INVALID_TARGET in self._defaults
        violations: dict[str, Tensor] = {}
        if self.average == "micro" and top_k == 1 and not samplewise:
            # torchmetrics' micro branch compares the labels as given, without class bins: nothing to index.
            if check:
                violations[INVALID_TARGET] = outside(target, as_index(target, num_classes), num_classes, keep)
                if label_preds:
                    violations[INVALID_PREDS] = outside(preds, as_index(preds, num_classes), num_classes, keep)
            return BatchStats(micro_counts(preds, target, keep, num_classes), violations)
        # torchmetrics' one-hot form (samplewise, top_k > 1) gives an ignore_index outside [0, C) one more class, C: a
        # target there is ignored and a prediction there is no class (the extra bin is dropped after counting).
        sentinel = self._sentinel_class()
        bins = num_classes + sentinel
        target_index = as_index(target, bins)
        preds_index = as_index(preds, bins) if clamp_preds or sentinel else preds
        if check:
            checked = self._checked_classes()
            violations[INVALID_TARGET] = outside(target, target_index if checked == bins else None, checked, keep)
            if label_preds:
                violations[INVALID_PREDS] = outside(preds, preds_index if checked == bins else None, checked, keep)
        if sentinel:
            keep = keep & (target != num_classes)
        hit = preds == target
        if keep is not None:
            hit = hit & keep
        counts = class_counts(preds_index, target_index, hit, keep, bins, samplewise)
        return BatchStats(tuple(count[..., :num_classes] for count in counts) if sentinel else counts, violations)

    def _merge_stats(self, stats: BatchStats) -> None:
        (hits, *rest), violations = stats
        if rest or not isinstance(hits, _ClassHits):
            super()._merge_stats(stats)
            return
        state = self.__dict__
        tp, fp, tn, fn = states = [state[name] for name in self._stat_states]
        # map() over a C method and a set: no generator frames per update
        if {t.dtype for t in states} != {torch.long} or not all(map(Tensor.is_contiguous, states)):
            super()._merge_stats(BatchStats(hits.dense(self.num_classes), violations))
            return
        preds, target, hit = hits
        # In place, without per-class batch tensors (6 kernels instead of 3 index_add_, 4 subtractions and the adds):
        # tp at the target of each hit, fn at the target and fp at the prediction of each miss, tn = N - predicted - fn.
        hit = hit.long()
        miss = torch.rsub(hit, 1)  # 1 - hit, without Tensor.__rsub__'s Python wrapper
        tp.index_add_(0, target, hit)
        fn.index_add_(0, target, miss)
        fp.index_add_(0, preds, miss)
        tn.add_(target.shape[0])
        tn.index_add_(0, preds, state["_one_long"].expand(preds.shape), alpha=-1)
        tn.index_add_(0, target, miss, alpha=-1)
        self._add_with_violations([], [], violations)

    def _batch_value(self, stats: BatchStats) -> Any:
        (hits, *rest), violations = stats
        if not rest and isinstance(hits, _ClassHits):
            stats = BatchStats(hits.dense(self.num_classes), violations)
        return super()._batch_value(in_state_dtypes(self, stats))


class _ClassHits(NamedTuple):
    """Sparse batch statistics: predicted and target class indices ``(N,)`` (int64, in range), and their agreement."""

    preds: Tensor
    target: Tensor
    hit: Tensor  # the prediction equals the target as given

    def dense(self, num_classes: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Per-class ``tp, fp, tn, fn`` of the batch."""
        return class_counts(
            self.preds.unsqueeze(1), self.target.unsqueeze(1), self.hit.unsqueeze(1), None, num_classes, False
        )


class _SyncFreeMacroAverage:
    """``compute`` of the macro average torchmetrics takes via a mask write; ``_class_scores``: its "none" reduction."""

    _macro_top_k = False

    def compute(self) -> Tensor:
        if self.average != "macro":
            return super().compute()
        tp, fp, tn, fn = self._final_state()
        score = self._class_scores(tp, fp, tn, fn)
        return macro_average(score, tp, fp, fn, self.top_k if self._macro_top_k else 1)


class MulticlassStatScores(_SyncFreeMulticlassStatScores, tm.MulticlassStatScores):
    """No host sync in ``update()`` or ``forward()``."""


class MulticlassAccuracy(_SyncFreeMulticlassStatScores, _SyncFreeMacroAverage, tm.MulticlassAccuracy):
    """No host sync in ``update()`` or ``forward()``."""

    _macro_top_k = True

    def _class_scores(self, tp: Tensor, fp: Tensor, tn: Tensor, fn: Tensor) -> Tensor:
        return _accuracy_reduce(tp, fp, tn, fn, "none", self.multidim_average, top_k=self.top_k)


class MulticlassPrecision(_SyncFreeMulticlassStatScores, _SyncFreeMacroAverage, tm.MulticlassPrecision):
    """No host sync in ``update()`` or ``forward()``."""

    _macro_top_k = True
    _score_name = "precision"

    def _class_scores(self, tp: Tensor, fp: Tensor, tn: Tensor, fn: Tensor) -> Tensor:
        options = {"top_k": self.top_k, "zero_division": self.zero_division}
        return _precision_recall_reduce(self._score_name, tp, fp, tn, fn, "none", self.multidim_average, **options)


class MulticlassRecall(_SyncFreeMulticlassStatScores, _SyncFreeMacroAverage, tm.MulticlassRecall):
    """No host sync in ``update()`` or ``forward()``."""

    _macro_top_k = True
    _score_name = "recall"
    _class_scores = MulticlassPrecision._class_scores


class MulticlassFBetaScore(_SyncFreeMulticlassStatScores, _SyncFreeMacroAverage, tm.MulticlassFBetaScore):
    """No host sync in ``update()`` or ``forward()``."""

    def _class_scores(self, tp: Tensor, fp: Tensor, tn: Tensor, fn: Tensor) -> Tensor:
        return _fbeta_reduce(tp, fp, tn, fn, self.beta, "none", self.multidim_average, zero_division=self.zero_division)


class MulticlassF1Score(_SyncFreeMulticlassStatScores, _SyncFreeMacroAverage, tm.MulticlassF1Score):
    """No host sync in ``update()`` or ``forward()``."""

    _class_scores = MulticlassFBetaScore._class_scores


class MulticlassSpecificity(_SyncFreeMulticlassStatScores, _SyncFreeMacroAverage, tm.MulticlassSpecificity):
    """No host sync in ``update()`` or ``forward()``."""

    def _class_scores(self, tp: Tensor, fp: Tensor, tn: Tensor, fn: Tensor) -> Tensor:
        return _specificity_reduce(tp, fp, tn, fn, "none", self.multidim_average)


class MulticlassHammingDistance(_SyncFreeMulticlassStatScores, _SyncFreeMacroAverage, tm.MulticlassHammingDistance):
    """No host sync in ``update()`` or ``forward()``."""

    def _class_scores(self, tp: Tensor, fp: Tensor, tn: Tensor, fn: Tensor) -> Tensor:
        return _hamming_distance_reduce(tp, fp, tn, fn, "none", self.multidim_average)


class MulticlassNegativePredictiveValue(
    _SyncFreeMulticlassStatScores, _SyncFreeMacroAverage, tm.MulticlassNegativePredictiveValue
):
    """No host sync in ``update()`` or ``forward()``."""

    _macro_top_k = True

    def _class_scores(self, tp: Tensor, fp: Tensor, tn: Tensor, fn: Tensor) -> Tensor:
        return _negative_predictive_value_reduce(tp, fp, tn, fn, "none", self.multidim_average, top_k=self.top_k)


class MulticlassExactMatch(SyncFreeBatchStats, tm.MulticlassExactMatch):
    """No host sync in ``update()`` or ``forward()``."""

    _stat_states = ("correct", "total")

    def _deferred_checks(self) -> dict[str, str]:
        return _value_checks(self, self.num_classes)

    def _batch_value(self, stats: BatchStats) -> Any:
        return super()._batch_value(in_state_dtypes(self, stats))

    def _batch_stats(self, preds: Tensor, target: Tensor) -> BatchStats:
        check_multiclass_shapes(preds, target, self.num_classes, self.multidim_average, self.validate_args)
        label_preds = preds.ndim == target.ndim
        if preds.ndim == target.ndim + 1 and torch.compiler.is_compiling() and first_max_applies(preds):
            preds = first_max_index(preds, 1)
        preds, target = _multiclass_stat_scores_format(preds, target, 1)
        keep = _keep(target, self.ignore_index)
        same = preds == target
        if keep is not None:
            # torchmetrics writes ignore_index into preds where the target is ignored: those positions match.
            same = same | torch.logical_not(keep)
        correct = same.all(1)
        violations: dict[str, Tensor] = {}
        if INVALID_TARGET in self._defaults:
            violations[INVALID_TARGET] = outside(target, None, self.num_classes, keep)
            if label_preds:
                violations[INVALID_PREDS] = outside(preds, None, self.num_classes, keep)
        device = correct.device
        if self.multidim_average == "samplewise":
            # torchmetrics' samplewise total is 1 after any update (it is replaced, not accumulated).
            return BatchStats((correct, torch.ones(1, dtype=torch.long, device=device)), violations)
        total = torch.full((1,), target.shape[0], dtype=torch.long, device=device)
        return BatchStats((correct.sum(0, keepdim=True), total), violations)

    def _merge_stats(self, stats: BatchStats) -> None:
        if self.multidim_average != "samplewise":
            super()._merge_stats(stats)
            return
        (correct, _), violations = stats
        self.correct.append(correct)
        self.total.fill_(1)
        self._add_with_violations([], [], violations)


def contingency_table(bins: Tensor, weight: Tensor, num_classes: int, dtype: torch.dtype) -> Tensor:
    """The ``(num_classes, num_classes)`` table of flattened bins ``row * num_classes + column`` and their weights.

    Example:
        >>> contingency_table(torch.tensor([1, 1, 2]), torch.tensor([True, True, False]), 2, torch.float32)
        tensor([[0., 2.],
                [0., 0.]])
    """
    table = torch.zeros(num_classes * num_classes, dtype=dtype, device=bins.device)
    table.index_add_(0, bins, weight if weight.dtype == dtype else weight.to(dtype))
    return table.view(num_classes, num_classes)


def merge_confmat_bins(metric: Any, stats: BatchStats) -> None:
    """Add ``((bins, weight),)`` statistics into ``metric.confmat``'s flattened bins and record their violations."""
    ((bins, weight),), violations = stats
    if not metric.confmat.is_contiguous():  # a loaded state may be a view: index_add_ needs the real storage
        metric.confmat = metric.confmat.contiguous()
    confmat = metric.confmat
    confmat.view(-1).index_add_(0, bins, weight if weight.dtype == confmat.dtype else weight.to(confmat.dtype))
    metric._add_with_violations([], [], violations)


class MulticlassConfusionMatrix(SyncFreeBatchStats, tm.MulticlassConfusionMatrix):
    """No host sync in ``update()`` or ``forward()``, whose normalized matrix comes without the NaN warning."""

    _stat_states = ("confmat",)

    def _deferred_checks(self) -> dict[str, str]:
        return _value_checks(self, self.num_classes)

    def _batch_stats(self, preds: Tensor, target: Tensor) -> BatchStats:
        num_classes = self.num_classes
        check_multiclass_shapes(preds, target, num_classes, "global", self.validate_args, confusion_matrix=True)
        label_preds = preds.ndim == target.ndim
        clamp_preds = label_preds or preds.shape[1] > num_classes
        # Argmax and flatten only: ignored entries are weighted out below instead of being dropped by a boolean mask.
        preds, target = _multiclass_confusion_matrix_format(preds, target, None)
        keep = _keep(target, self.ignore_index)
        target_index = as_index(target, num_classes)
        preds_index = as_index(preds, num_classes) if clamp_preds else preds
        violations: dict[str, Tensor] = {}
        if INVALID_TARGET in self._defaults:
            violations[INVALID_TARGET] = outside(target, target_index, num_classes, keep)
            if label_preds:
                violations[INVALID_PREDS] = outside(preds, preds_index, num_classes, keep)
        bins = target_index * num_classes + preds_index
        weight = ones_like_index(bins) if keep is None else keep.long()
        # Sparse statistics: update adds them into the state (no num_classes**2 batch matrix to fill and add).
        return BatchStats(((bins, weight),), violations)

    def _merge_stats(self, stats: BatchStats) -> None:
        merge_confmat_bins(self, stats)

    def _batch_value(self, stats: BatchStats) -> Tensor:
        ((bins, weight),), _ = stats
        # The state's dtype: long, unless set_dtype() changed it (torchmetrics' batch matrix follows).
        return self._reduce(contingency_table(bins, weight, self.num_classes, self.confmat.dtype))

    _reduce = BinaryConfusionMatrix._reduce

    def compute(self) -> Tensor:
        """Raise deferred value errors, then normalize as torchmetrics does, warning about 0/0 entries set to 0."""
        if self.normalize not in (None, "none", "true", "pred", "all"):
            return super().compute()  # torchmetrics' ValueError (only reachable with validate_args=False)
        self._raise_deferred_checks()
        confmat, nans = normalize_confmat(self.confmat, self.normalize)
        # torchmetrics' warning reads the count too; skipped, like the flags, where the caller owns the host reads.
        if nans is not None and not self.__dict__.get(DEFERRED_RAISE_OWNED, False):
            count = int(nans.sum())
            if count:
                rank_zero_warn(confusion_matrix_nan_message(count))
        return confmat


class MulticlassScores(SyncFreeBatchStats):
    """Multiclass scores ``(N, C, ...)``, targets ``(N, ...)`` (calibration error, hinge loss): one row per entry."""

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
        keep = _keep(target, self.ignore_index)
        violations: dict[str, Tensor] = {}
        if INVALID_TARGET in self._defaults:
            violations[INVALID_TARGET] = outside(target, None, self.num_classes, keep)
        rows = None if keep is None else keep.unsqueeze(1)
        return Scores(normalize_scores(preds, "softmax", rows), target, keep, violations)
