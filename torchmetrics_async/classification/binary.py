"""Sync-free binary classification metrics with torchmetrics' names, arguments and values.

Instead of torchmetrics' host reads (``torch.unique`` checks, the logit decision, ``ignore_index`` masks, ``bincount``):
sums of conditions, a ``torch.where``, ``masked_fill`` -1 and ``scatter_add_``; value checks are deferred.
"""

from typing import Any, ClassVar, Literal, Optional

import torch
import torchmetrics.classification as tm
from torch import Tensor

from torchmetrics_async._torchmetrics import (
    Metric,
    _confusion_matrix_reduce,
    binary_target_values_message,
    float_preds_message,
    label_preds_values_message,
)
from torchmetrics_async.batch_stats import BatchStats, SyncFreeBatchStats
from torchmetrics_async.classification.shapes import check_binary_shapes

__all__ = [
    "BinaryAccuracy",
    "BinaryConfusionMatrix",
    "BinaryF1Score",
    "BinaryFBetaScore",
    "BinaryHammingDistance",
    "BinaryNegativePredictiveValue",
    "BinaryPrecision",
    "BinaryRecall",
    "BinarySpecificity",
    "BinaryStatScores",
    "code_bins",
    "coded_counts",
    "outcomes",
]

# Deferred-check state names (see torchmetrics_async.deferred).
INVALID_TARGET = "invalid_target"
INVALID_PREDS = "invalid_preds"


def outside_unit_interval(preds: Tensor, keep: Tensor | None = None) -> Tensor:
    """Where a (kept) score lies outside [0, 1]: a logit, by torchmetrics' rule (a NaN counts as outside)."""
    outside = preds.clamp(0, 1) != preds  # NaN != NaN
    return outside if keep is None else outside & keep


def normalize_scores(preds: Tensor, normalization: str | None, keep: Tensor | None = None) -> Tensor:
    """Sigmoid/softmax (over dim 1) of ``preds`` iff any (kept) score lies outside [0, 1], decided on the device.

    Example:
        >>> normalize_scores(torch.tensor([0.2, 0.7]), "sigmoid"), normalize_scores(torch.tensor([0.0, 2.0]), "sigmoid")
        (tensor([0.2000, 0.7000]), tensor([0.5000, 0.8808]))
    """
    if not normalization:
        return preds
    outside = outside_unit_interval(preds, keep)
    normalized = preds.sigmoid() if normalization == "sigmoid" else torch.softmax(preds, dim=1)
    return torch.where(outside.any(), normalized, preds)


def probs_to_labels(preds: Tensor, threshold: float, keep: Tensor | None = None) -> Tensor:
    """``preds > threshold``, after a sigmoid iff any (kept) one is outside [0, 1] (NaN too), decided on the device."""
    return normalize_scores(preds, "sigmoid", keep) > threshold


def to_labels(metric: Any, preds: Tensor, violations: dict[str, Tensor]) -> Tensor:
    """Float ``preds`` thresholded (:func:`probs_to_labels`); non-binary integer ``preds`` recorded as a violation."""
    if preds.is_floating_point():
        return probs_to_labels(preds, metric.threshold)
    if metric.validate_args and preds.dtype != torch.bool:
        violations[INVALID_PREDS] = not_binary(preds)
    return preds


def mask_ignored(target: Tensor, ignore_index: int | None) -> tuple[Tensor, Tensor | None]:
    """``target`` with ignored entries -1 (cast to its dtype as torchmetrics' masked write casts), and their mask."""
    if ignore_index is None:
        return target, None
    ignored = target == ignore_index
    return target.masked_fill(ignored, -1), ignored


def flat_ignored(
    preds: Tensor, target: Tensor, ignore_index: int | None
) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
    """``preds`` and ``target`` flattened, the mask of ignored targets and its complement (``None`` without any)."""
    preds, target = preds.flatten(), target.flatten()
    if ignore_index is None:
        return preds, target, None, None
    ignored = target == ignore_index
    return preds, target, ignored, torch.logical_not(ignored)


def not_binary(values: Tensor, ignored: Tensor | None = None) -> Tensor:
    """Mask of the entries that are neither 0 nor 1 (nor ignored): what torchmetrics finds with ``torch.unique``."""
    valid = (values == 0) | (values == 1)
    if ignored is not None:
        valid |= ignored
    return torch.logical_not(valid)


def stat_counts(preds: Tensor, target: Tensor, dim: int | tuple[int, ...]) -> tuple[Tensor, ...]:
    """``tp, fp, tn, fn`` over ``dim`` as torchmetrics' conditions count them, plus ``n0 + n1`` to check targets."""
    hit = target == preds
    t1 = target == 1
    t0 = target == 0
    n1 = t1.sum(dim)
    n0 = t0.sum(dim)
    tp = (hit & t1).sum(dim)
    tn = (hit & t0).sum(dim)
    return tp, n0 - tn, tn, n1 - tp, n0 + n1


#: Instance attribute: the outcome codes of :func:`coded_counts` on the metric's device (see :func:`code_bins`).
CODE_BINS = "_code_bins"


def code_bins(device: torch.device) -> dict[tuple[int, bool], Tensor]:
    """The outcome codes ``arange(4)`` (``(2, 2)`` if ``square``), keyed ``(ndim, square)`` to broadcast over inputs."""
    codes = torch.arange(4, device=device)
    return {
        (ndim, square): codes.view(((2, 2) if square else (4,)) + (1,) * ndim)
        for ndim in (1, 2, 3)
        for square in (False, True)
    }


def coded_counts(
    preds: Tensor, target: Tensor, bins: Tensor, exact: bool, dims: tuple[int, ...] | None = None, keepdim: bool = False
) -> Tensor:
    """How many entries have each outcome (codes 0-3 of ``2 * target + label``), from one compare-and-sum.

    Bool ``preds``: 0 tn, 1 fp, 2 fn, 3 tp; integer ``preds`` count by equality with the target: 0 fp, 1 tn, 2 fn, 3 tp.
    A target neither 0 nor 1 counts nowhere; ``exact`` clamps targets first so that no value wraps around into 0-3.

    Example:
        >>> bins = code_bins(torch.device("cpu"))[1, False]
        >>> coded_counts(torch.tensor([True, False, True]), torch.tensor([1, 1, 0]), bins, exact=True)
        tensor([0, 1, 1, 1])
    """
    if target.dtype == torch.bool:
        target = target.to(torch.uint8)  # bool + bool stays bool (an OR): count in a small integer type instead
    elif exact:
        target = target.clamp(max=2) if not target.dtype.is_signed else target.clamp(-1, 2)
    hits = preds if preds.dtype == torch.bool else preds == target
    lead = bins.dim() - preds.dim()
    summed = tuple(range(lead, bins.dim())) if dims is None else tuple(lead + d for d in dims)
    return torch.eq(torch.add(hits, target, alpha=2), bins).sum(summed, keepdim=keepdim)


def outcomes(counts: Tensor, bool_preds: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``tp, fp, tn, fn`` from :func:`coded_counts`."""
    first, second, fn, tp = counts.unbind(0)
    return (tp, second, first, fn) if bool_preds else (tp, first, second, fn)


def targets_outside(binary_count: Tensor, target: Tensor, ignored: Tensor | None) -> Tensor:
    """0-dim flag: a target is neither 0, 1 nor ignored, from the count of 0/1 targets (a bool one counts ignored)."""
    counted = binary_count.sum() if binary_count.dim() else binary_count
    if ignored is not None and target.dtype != torch.bool:
        counted = counted + ignored.sum()
    return counted != target.numel()


def zero_one_checks(metric: Any, quoted_preds: bool) -> dict[str, str]:
    """The deferred checks of binary and multilabel inputs (targets and label preds in {0, 1}): name -> message."""
    if not metric.validate_args:
        return {}
    return {
        INVALID_TARGET: binary_target_values_message(metric.ignore_index),
        INVALID_PREDS: label_preds_values_message(quoted=quoted_preds),
    }


class CodedCounts(SyncFreeBatchStats):
    """Keeps the outcome codes of :func:`coded_counts` on the metric's device."""

    # A dict keyed by tuples, which torch.jit.script cannot type: a per-instance constant it need not see.
    __jit_ignored_attributes__: ClassVar[list[str]] = [*Metric.__jit_ignored_attributes__, CODE_BINS]

    def _set_constants(self) -> None:
        super()._set_constants()
        self.__dict__[CODE_BINS] = code_bins(self.device)


def coded_fast_path(preds: Tensor, target: Tensor) -> bool:
    """Whether :func:`coded_counts` applies: same shapes, 1 to 3 dimensions, a non-empty batch, non-float targets."""
    return (
        1 <= preds.ndim <= 3 and preds.shape[0] > 0 and preds.shape == target.shape and not target.is_floating_point()
    )


class _SyncFreeBinaryStatScores(CodedCounts):
    """Sync-free ``update`` of torchmetrics' ``BinaryStatScores`` family (states ``tp, fp, tn, fn``)."""

    def _deferred_checks(self) -> dict[str, str]:
        return zero_one_checks(self, quoted_preds=True)

    def _batch_stats(self, preds: Tensor, target: Tensor) -> BatchStats:
        validate = self.validate_args
        samplewise = self.multidim_average == "samplewise"
        violations: dict[str, Tensor] = {}
        check_binary_shapes(preds, target, samplewise, validate)
        preds = to_labels(self, preds, violations)
        target, ignored = mask_ignored(target, self.ignore_index)
        if not samplewise and coded_fast_path(preds, target):
            # The global counts of any layout: torchmetrics' (N, -1) reshapes change nothing a full sum sees.
            if preds.ndim > 1:
                preds, target = preds.reshape(-1), target.reshape(-1)
            bins = self.__dict__[CODE_BINS][1, False]
            exact = not validate or target.dtype != torch.int64
            # (4, 1) counts: each outcome shaped like its (1,) state, so the four adds are one fused kernel on CUDA.
            counts = coded_counts(preds, target, bins, exact, keepdim=True)
            tp, fp, tn, fn = outcomes(counts, preds.dtype == torch.bool)
            if validate:
                violations[INVALID_TARGET] = targets_outside(counts, target, ignored)
            return BatchStats((tp, fp, tn, fn), violations)
        # The same reshapes as torchmetrics, so malformed inputs (0-dim, empty batch dimension) fail the same way.
        preds = preds.reshape(preds.shape[0], -1)
        target = target.reshape(target.shape[0], -1)
        tp, fp, tn, fn, binary_count = stat_counts(preds, target, 1 if samplewise else (0, 1))
        if validate:
            violations[INVALID_TARGET] = targets_outside(binary_count, target, ignored)
        if samplewise:  # torchmetrics squeezes: a batch of one sample gives 0-dim statistics
            tp, fp, tn, fn = tp.squeeze(), fp.squeeze(), tn.squeeze(), fn.squeeze()
        return BatchStats((tp, fp, tn, fn), violations)


class BinaryStatScores(_SyncFreeBinaryStatScores, tm.BinaryStatScores):
    """No host sync in ``update()`` or ``forward()``."""


class BinaryAccuracy(_SyncFreeBinaryStatScores, tm.BinaryAccuracy):
    """No host sync in ``update()`` or ``forward()``."""


class BinaryPrecision(_SyncFreeBinaryStatScores, tm.BinaryPrecision):
    """No host sync in ``update()`` or ``forward()``."""


class BinaryRecall(_SyncFreeBinaryStatScores, tm.BinaryRecall):
    """No host sync in ``update()`` or ``forward()``."""


class BinaryFBetaScore(_SyncFreeBinaryStatScores, tm.BinaryFBetaScore):
    """No host sync in ``update()`` or ``forward()``."""


class BinaryF1Score(_SyncFreeBinaryStatScores, tm.BinaryF1Score):
    """No host sync in ``update()`` or ``forward()``."""


class BinarySpecificity(_SyncFreeBinaryStatScores, tm.BinarySpecificity):
    """No host sync in ``update()`` or ``forward()``."""


class BinaryHammingDistance(_SyncFreeBinaryStatScores, tm.BinaryHammingDistance):
    """No host sync in ``update()`` or ``forward()``."""


class BinaryNegativePredictiveValue(_SyncFreeBinaryStatScores, tm.BinaryNegativePredictiveValue):
    """No host sync in ``update()`` or ``forward()``."""


Normalize = Optional[Literal["true", "pred", "all", "none"]]
_NORMALIZED_DIMS = {"true": -1, "pred": -2, "all": [-2, -1]}


def normalize_confmat(confmat: Tensor, normalize: Normalize) -> tuple[Tensor, Tensor | None]:
    """Torchmetrics' ``_confusion_matrix_reduce`` without host reads: 0/0 entries become 0; also their mask.

    Example:
        >>> normalize_confmat(torch.tensor([[2, 0], [0, 0]]), "true")[0]
        tensor([[1., 0.],
                [0., 0.]])
    """
    if normalize is None or normalize == "none":
        return confmat, None
    if normalize not in _NORMALIZED_DIMS:
        _confusion_matrix_reduce(confmat, normalize)  # raises torchmetrics' error for a value it does not know
    confmat = confmat if confmat.is_floating_point() else confmat.float()
    confmat = confmat / confmat.sum(dim=_NORMALIZED_DIMS[normalize], keepdim=True)
    nans = torch.isnan(confmat)
    return confmat.masked_fill(nans, 0), nans


class BinaryConfusionMatrix(CodedCounts, tm.BinaryConfusionMatrix):
    """No host sync in ``update()`` or ``forward()``, whose normalized matrix comes without the NaN warning."""

    _stat_states = ("confmat",)

    def _deferred_checks(self) -> dict[str, str]:
        return zero_one_checks(self, quoted_preds=False)

    def _batch_stats(self, preds: Tensor, target: Tensor) -> BatchStats:
        validate = self.validate_args
        check_binary_shapes(preds, target, samplewise=False, validate_args=validate)
        if preds.is_floating_point() and self.ignore_index is None and coded_fast_path(preds, target):
            # The bins are the four outcome counts; a target neither 0 nor 1 counts nowhere (torchmetrics drops it).
            labels = probs_to_labels(preds, self.threshold)
            bins = self.__dict__[CODE_BINS][preds.ndim, True]
            exact = not validate or target.dtype != torch.int64
            confmat = coded_counts(labels, target, bins, exact)
            violations = {INVALID_TARGET: targets_outside(confmat, target, None)} if validate else {}
            return BatchStats((confmat,), violations)
        preds, target, ignored, keep = flat_ignored(preds, target, self.ignore_index)
        violations: dict[str, Tensor] = {}
        target_bad = not_binary(target)
        if validate:
            violations[INVALID_TARGET] = target_bad if ignored is None else target_bad & keep
        valid = torch.logical_not(target_bad)
        if preds.is_floating_point():
            # torchmetrics drops ignored entries before deciding whether preds are logits.
            preds = probs_to_labels(preds, self.threshold, keep)
        elif preds.dtype != torch.bool:
            preds_bad = not_binary(preds)
            if validate:
                violations[INVALID_PREDS] = preds_bad
            valid &= torch.logical_not(preds_bad)
        if keep is not None:
            valid &= keep
        # Dropped entries go to bin 0 with weight 0: no out-of-range index whatever the values (validate_args=False).
        bins = torch.where(valid, target * 2 + preds, 0).long()
        confmat = torch.zeros(4, dtype=torch.long, device=bins.device).scatter_add_(0, bins, valid.long())
        return BatchStats((confmat.view(2, 2),), violations)

    def _batch_value(self, stats: BatchStats) -> Tensor:
        return self._reduce(stats[0][0].to(self.confmat.dtype))  # the state dtype, as torchmetrics

    def _reduce(self, confmat: Tensor) -> Tensor:
        """A matrix's value (the metrics derived from the confusion matrix reduce it their way)."""
        return normalize_confmat(confmat, self.normalize)[0]


class Scores:
    """Score inputs (calibration error, hinge loss): ``preds``, ``target`` flattened, ``keep`` (``None``: all count).

    Ignored entries stay beside the mask (torchmetrics drops them: a data-dependent shape), the logit decision is a
    ``torch.where``, the target check deferred; shape and dtype errors stay eager, with torchmetrics' messages.
    """

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
        preds, target, ignored, keep = flat_ignored(preds, target, self.ignore_index)
        violations = {INVALID_TARGET: not_binary(target, ignored)} if INVALID_TARGET in self._defaults else {}
        if preds.is_floating_point():
            preds = normalize_scores(preds, "sigmoid", keep)
        return Scores(preds, target, keep, violations)
