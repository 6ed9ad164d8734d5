"""Sync-free multiclass classification metrics with torchmetrics' names, arguments and values.

torchmetrics' multiclass ``update`` reads the device in three ways: ``torch.unique`` of ``target`` (and of label
``preds``) to validate values, boolean-mask indexing to drop ``ignore_index`` entries, and ``bincount`` over
``num_classes**2`` bins (or ``F.one_hot``, which reads min/max on the CPU) to count. Its ``compute`` zeroes the macro
weights of absent classes through a boolean mask as well. Here:

- per-class counts come from ``index_add_`` on ``num_classes`` bins: ``tp`` at the target of each correct prediction,
  the predicted and the target counts at the label and the target; ``fp``, ``fn`` and ``tn`` follow by subtraction.
  ``multidim_average="samplewise"`` offsets the bins by ``sample * num_classes``; ``top_k > 1`` first turns the scores
  into the label torchmetrics' one-hot form counts (the target if it is among the top k, else the top 1).
  ``MulticlassConfusionMatrix`` adds into ``num_classes**2`` bins;
- ignored entries take part with weight 0, and every index is clamped into range first, so the kernels never index
  out of bounds whatever the values;
- value checks (targets outside ``[0, num_classes)`` and not ``ignore_index``, label ``preds`` outside it) are
  recorded on the device and raised by ``compute()`` (see :class:`~torchmetrics_async.deferred.DeferredChecks`);
- the macro average zeroes its weights with ``masked_fill``, and the normalized confusion matrix its 0/0 entries.

Example:
    >>> import torch
    >>> from torchmetrics_async.classification.multiclass import MulticlassAccuracy
    >>> metric = MulticlassAccuracy(num_classes=3)
    >>> metric.update(torch.tensor([[0.1, 0.7, 0.2], [0.6, 0.3, 0.1]]), torch.tensor([1, 2]))
    >>> metric.compute()
    tensor(0.3333)
"""

from typing import Any, Literal, NamedTuple, Optional

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
    multiclass_values_message,
    rank_zero_warn,
)
from torchmetrics_async.batch_stats import BatchStats, SyncFreeBatchStats
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

# Deferred-check state names (see DeferredChecks).
INVALID_TARGET = "invalid_target"
INVALID_PREDS = "invalid_preds"

# torchmetrics fails on label preds with top_k > 1, always and by shape only (in topk or scatter_, or writing
# ignore_index through a mask of the wrong shape): raised eagerly with the same exception type and a message that
# says why.
TOP_K_LABELS_MESSAGE = (
    "`top_k` > 1 needs `preds` of shape (N, C, ...) with probabilities or logits and `target` of shape (N, ...), but"
    " `preds` and `target` have the same number of dimensions."
)

Average = Optional[Literal["micro", "macro", "weighted", "none"]]
MultidimAverage = Literal["global", "samplewise"]
Normalize = Optional[Literal["true", "pred", "all", "none"]]


# Class indices are exact in float32 up to 2**24, so the float form of first_max_index serves any realistic C.
_EXACT_FLOAT_INDEX = 2**24


def first_max_index(scores: Tensor, dim: int = 1) -> Tensor:
    """``scores.argmax(dim)`` as two plain reductions: the first index holding the maximum (a NaN counts as maximal).

    Inductor's CPU code for ``argmax`` carries an (index, value) pair through the loop; ``amax`` and then ``amin`` of
    the matching positions' indices are two float reductions that fuse with the rest of the step (the ``amax`` with
    a softmax's). Same result as ``argmax`` for every input: the first maximal position, or the first NaN.

    Example:
        >>> scores = torch.tensor([[0.2, 0.7, 0.7], [float("nan"), 1.0, float("nan")], [-torch.inf, -torch.inf, 0.0]])
        >>> first_max_index(scores)
        tensor([1, 0, 2])
        >>> torch.equal(first_max_index(scores), scores.argmax(1))
        True
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
    """Whether compiled code takes the labels of ``preds`` by :func:`first_max_index` instead of ``argmax``.

    Asked only after ``torch.compiler.is_compiling()`` (eager updates keep torchmetrics' single ``argmax`` kernel, as
    the op counts tests pin). On CPU, where Inductor's ``argmax`` costs more than the two reductions
    (``benchmarks/README.md``, "What the metrics cost inside a compiled step"), for float scores with classes on dim 1.

    Example:
        >>> first_max_applies(torch.randn(4, 3)), first_max_applies(torch.randint(0, 3, (4, 3)))
        (True, False)
    """
    return (
        preds.device.type == "cpu"
        and preds.is_floating_point()
        and preds.ndim > 1
        and 0 < preds.shape[1] <= _EXACT_FLOAT_INDEX
    )


def as_index(labels: Tensor, num_classes: int) -> Tensor:
    """``labels`` as int64 indices clamped into ``[0, num_classes)``: never out of bounds, whatever the values.

    An ignored entry's weight is 0; an invalid one is reported by a deferred check (or, unvalidated, counted anywhere).

    Example:
        >>> as_index(torch.tensor([-1, 0, 2, 7]), 3)
        tensor([0, 0, 2, 2])
    """
    labels = labels if labels.dtype == torch.long else labels.long()
    return labels.clamp(0, num_classes - 1)


def ones_like_index(index: Tensor) -> Tensor:
    """Weight 1 for every entry of a 1-D index: one element expanded (no batch-sized allocation).

    Example:
        >>> ones_like_index(torch.tensor([3, 1, 2])).tolist()
        [1, 1, 1]
    """
    return torch.ones((), dtype=torch.long, device=index.device).expand(index.shape)


def top_k_labels(preds: Tensor, target: Tensor, top_k: int) -> Tensor:
    """The label torchmetrics' top-k one-hot form counts: the target where it is among the top k scores, else the top 1.

    torchmetrics builds the top-k one-hot predictions and then (``_refine_preds_oh``) replaces them by the one-hot
    of this label; it uses ``torch.topk`` on the same tensor, so ties resolve identically.

    Args:
        preds: scores ``(N, C, M)``.
        target: labels ``(N, M)``.
        top_k: ``k``.

    Returns:
        Labels ``(N, M)``, int64.

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
    """Per-class ``tp, fp, tn, fn`` from three ``index_add_`` counts, as torchmetrics' confusion matrix gives them.

    Args:
        preds: predicted labels ``(N, M)``, int64 in ``[0, num_classes)``.
        target: target labels ``(N, M)``, int64 in ``[0, num_classes)``.
        hit: ``(N, M)`` bool, the prediction is right and the entry counts.
        keep: ``(N, M)`` bool, the entry counts (``None``: all count).
        num_classes: the number of bins per group.
        samplewise: one group of bins per sample (``(N, C)`` results) instead of one for the batch (``(C,)``).

    Returns:
        ``tp, fp, tn, fn``, int64.

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
    """Mask of the counted entries whose label is not a class index (what makes torchmetrics' kernels fail).

    Args:
        labels: the labels as given.
        index: the same labels clamped into range by :func:`as_index` (``None``: not computed yet).
        num_classes: the number of classes.
        keep: entries that count (``None``: all).

    Returns:
        A bool mask shaped like ``labels``.

    Example:
        >>> outside(torch.tensor([0, 3, -1]), None, 3, torch.tensor([True, True, False]))
        tensor([False,  True, False])
    """
    bad = (labels < 0) | (labels >= num_classes) if index is None else index != labels
    return bad if keep is None else bad & keep


def macro_average(score: Tensor, tp: Tensor, fp: Tensor, fn: Tensor, top_k: int) -> Tensor:
    """Macro average as torchmetrics' ``_adjust_weights_safe_divide``, with ``masked_fill`` for its mask write.

    torchmetrics zeroes the weight of classes absent from target and predictions with ``weights[mask] = 0.0``, a
    boolean-mask assignment (a host sync); ``masked_fill`` writes the same zeros on the device.

    Example:
        >>> tp, fp, fn = torch.tensor([1, 0, 0]), torch.tensor([0, 1, 0]), torch.tensor([1, 0, 0])
        >>> macro_average(torch.tensor([0.5, 0.0, 0.0]), tp, fp, fn, top_k=1)
        tensor(0.2500)
    """
    absent = tp + fp + fn == 0 if top_k == 1 else tp + fn == 0
    weights = torch.ones_like(score).masked_fill_(absent, 0.0)
    return _safe_divide(weights * score, weights.sum(-1, keepdim=True)).sum(-1)


def normalize_confmat(confmat: Tensor, normalize: Normalize) -> tuple[Tensor, Tensor | None]:
    """Normalize as torchmetrics' ``_confusion_matrix_reduce``, without host reads; also return its NaN count.

    Example:
        >>> normalize_confmat(torch.tensor([[2, 0], [0, 0]]), "true")
        (tensor([[1., 0.],
                [0., 0.]]), tensor(2))
    """
    if normalize is None or normalize == "none":
        return confmat, None
    confmat = confmat if confmat.is_floating_point() else confmat.float()
    if normalize == "true":
        confmat = confmat / confmat.sum(dim=-1, keepdim=True)
    elif normalize == "pred":
        confmat = confmat / confmat.sum(dim=-2, keepdim=True)
    else:
        confmat = confmat / confmat.sum(dim=[-2, -1], keepdim=True)
    nans = torch.isnan(confmat)
    return confmat.masked_fill(nans, 0), nans.sum()


class _SyncFreeMulticlass(SyncFreeBatchStats):
    """What the multiclass metrics share: the deferred value checks and the label format."""

    def _checked_classes(self) -> int | None:
        """How many classes the labels index for the value checks (``None``: torchmetrics accepts any value)."""
        return self.num_classes

    def _deferred_checks(self) -> dict[str, str]:
        num_classes = self._checked_classes()
        if not self.validate_args or num_classes is None:
            return {}
        return {
            INVALID_TARGET: multiclass_values_message("target", num_classes, self.ignore_index),
            INVALID_PREDS: multiclass_values_message("preds", num_classes, self.ignore_index),
        }

    def _keep(self, target: Tensor) -> Tensor | None:
        return None if self.ignore_index is None else target != self.ignore_index

    def _batch_value(self, stats: BatchStats) -> Any:
        # torchmetrics computes the batch value from fresh states, which set_dtype() may have made floating point.
        values, violations = stats
        state = self.__dict__
        values = tuple(
            value.to(state[name].dtype)
            if isinstance(state[name], Tensor) and isinstance(value, Tensor) and value.dtype != state[name].dtype
            else value
            for name, value in zip(self._stat_states, values, strict=True)
        )
        return super()._batch_value((values, violations))


class _SyncFreeMulticlassStatScores(_SyncFreeMulticlass):
    """Sync-free ``update`` of torchmetrics' ``MulticlassStatScores`` family (states ``tp, fp, tn, fn``)."""

    def _checked_classes(self) -> int | None:
        if self.num_classes is not None:
            return self.num_classes
        # num_classes=None counts as one class; only the one-hot (samplewise) form fails on other labels, and it takes
        # label 1 too where that is its sentinel class (see _sentinel_class).
        return 1 + self._sentinel_class() if self.multidim_average == "samplewise" else None

    def _sentinel_class(self) -> bool:
        """Whether torchmetrics' one-hot form counts label ``C`` (``num_classes``, or 1) as ignored/no class."""
        ignore = self.ignore_index
        one_hot = self.multidim_average == "samplewise" or self.top_k > 1
        return one_hot and ignore is not None and not 0 <= ignore < (self.num_classes or 1)

    def _set_constants(self) -> None:
        super()._set_constants()
        # A device-resident 1 (int64), expanded to a batch of ones without allocating it (see _merge_stats).
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
        if top_k > 1:
            preds = top_k_labels(preds, target, top_k)
        keep = self._keep(target)
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
        # Written into the states in place, without per-class batch tensors (6 kernels instead of 3 index_add_
        # into temporaries, 4 subtractions and the adds): tp at the target of each hit, fn at the target and fp at
        # the prediction of each miss, and tn = N - predicted - fn.
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
        return super()._batch_value(stats)


class _ClassHits(NamedTuple):
    """Sparse multiclass batch statistics: predicted and target class of each entry and whether they agree.

    Example:
        >>> _ClassHits(torch.tensor([0, 1]), torch.tensor([0, 2]), torch.tensor([True, False])).dense(3)
        (tensor([1, 0, 0]), tensor([0, 1, 0]), tensor([1, 1, 1]), tensor([0, 0, 1]))
    """

    preds: Tensor
    """Predicted class indices ``(N,)``, int64 in range."""
    target: Tensor
    """Target class indices ``(N,)``, int64 clamped into range."""
    hit: Tensor
    """``(N,)`` bool: the prediction equals the target as given."""

    def dense(self, num_classes: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Per-class ``tp, fp, tn, fn`` of the batch (what ``forward`` computes its value from)."""
        return class_counts(
            self.preds.unsqueeze(1), self.target.unsqueeze(1), self.hit.unsqueeze(1), None, num_classes, False
        )


class _SyncFreeMacroAverage:
    """``compute`` of the scores torchmetrics macro-averages through a boolean-mask write (a host sync).

    It comes after the sync-free mixins in the MRO, so ``forward``'s batch value goes through it too.
    A subclass gives ``_class_scores`` (torchmetrics' own reduction with ``average="none"``) and whether torchmetrics
    passes ``top_k`` to its weight adjustment (``_macro_top_k``).
    """

    _macro_top_k = False

    def _class_scores(self, tp: Tensor, fp: Tensor, tn: Tensor, fn: Tensor) -> Tensor:
        raise NotImplementedError

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

    def _class_scores(self, tp: Tensor, fp: Tensor, tn: Tensor, fn: Tensor) -> Tensor:
        return _precision_recall_reduce(
            "precision",
            tp,
            fp,
            tn,
            fn,
            "none",
            self.multidim_average,
            top_k=self.top_k,
            zero_division=self.zero_division,
        )


class MulticlassRecall(_SyncFreeMulticlassStatScores, _SyncFreeMacroAverage, tm.MulticlassRecall):
    """No host sync in ``update()`` or ``forward()``."""

    _macro_top_k = True

    def _class_scores(self, tp: Tensor, fp: Tensor, tn: Tensor, fn: Tensor) -> Tensor:
        return _precision_recall_reduce(
            "recall", tp, fp, tn, fn, "none", self.multidim_average, top_k=self.top_k, zero_division=self.zero_division
        )


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


class MulticlassExactMatch(_SyncFreeMulticlass, tm.MulticlassExactMatch):
    """No host sync in ``update()`` or ``forward()``."""

    _stat_states = ("correct", "total")

    def _batch_stats(self, preds: Tensor, target: Tensor) -> BatchStats:
        check_multiclass_shapes(preds, target, self.num_classes, self.multidim_average, self.validate_args)
        label_preds = preds.ndim == target.ndim
        if preds.ndim == target.ndim + 1 and torch.compiler.is_compiling() and first_max_applies(preds):
            preds = first_max_index(preds, 1)
        preds, target = _multiclass_stat_scores_format(preds, target, 1)
        keep = self._keep(target)
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
        for name, violated in violations.items():
            self._record_violation(name, violated)


class MulticlassConfusionMatrix(_SyncFreeMulticlass, tm.MulticlassConfusionMatrix):
    """No host sync in ``update()`` or ``forward()``, whose normalized matrix comes without the NaN warning."""

    _stat_states = ("confmat",)

    def _batch_stats(self, preds: Tensor, target: Tensor) -> BatchStats:
        num_classes = self.num_classes
        check_multiclass_shapes(preds, target, num_classes, "global", self.validate_args, confusion_matrix=True)
        label_preds = preds.ndim == target.ndim
        clamp_preds = label_preds or preds.shape[1] > num_classes
        # Argmax and flatten only: ignored entries are weighted out below instead of being dropped by a boolean mask.
        preds, target = _multiclass_confusion_matrix_format(preds, target, None)
        keep = self._keep(target)
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
        ((bins, weight),), violations = stats
        if not self.confmat.is_contiguous():  # a loaded state may be a view: index_add_ needs the real storage
            self.confmat = self.confmat.contiguous()
        confmat = self.confmat
        confmat.view(-1).index_add_(0, bins, weight if weight.dtype == confmat.dtype else weight.to(confmat.dtype))
        for name, violated in violations.items():
            self._record_violation(name, violated)

    def _batch_value(self, stats: BatchStats) -> Tensor:
        ((bins, weight),), _ = stats
        num_classes = self.num_classes
        dtype = self.confmat.dtype  # long, unless set_dtype() changed it (torchmetrics' batch matrix follows)
        confmat = torch.zeros(num_classes * num_classes, dtype=dtype, device=bins.device)
        confmat.index_add_(0, bins, weight if weight.dtype == dtype else weight.to(dtype))
        return normalize_confmat(confmat.view(num_classes, num_classes), self.normalize)[0]

    def compute(self) -> Tensor:
        """Raise deferred value errors, then normalize as torchmetrics does, warning about 0/0 entries set to 0.

        Returns:
            The confusion matrix.

        Example:
            >>> import torch
            >>> metric = MulticlassConfusionMatrix(num_classes=2, normalize="true")
            >>> metric.update(torch.tensor([0, 1, 1]), torch.tensor([0, 0, 1]))
            >>> metric.compute()
            tensor([[0.5000, 0.5000],
                    [0.0000, 1.0000]])
        """
        if self.normalize not in (None, "none", "true", "pred", "all"):
            return super().compute()  # torchmetrics' ValueError (only reachable with validate_args=False)
        self._raise_deferred_checks()
        confmat, nan_count = normalize_confmat(self.confmat, self.normalize)
        # The one read torchmetrics' warning needs (it reads the count too); skipped, like the flags, where the
        # caller owns the host reads (AsyncMetricCollector computes off the critical path and must not wait).
        if nan_count is not None and not self.__dict__.get(DEFERRED_RAISE_OWNED, False):
            count = int(nan_count)
            if count:
                rank_zero_warn(confusion_matrix_nan_message(count))
        return confmat
