"""Sync-free binary classification metrics with torchmetrics' names, arguments and values.

torchmetrics' binary ``update`` reads the device four ways: ``torch.unique`` of ``target`` (and of integer ``preds``)
to validate values, ``if not torch.all(...)`` to decide whether ``preds`` are logits (on the CPU branch of
``normalize_logits_if_needed``), ``target[idx] = -1`` for ``ignore_index``, and ``bincount`` for the confusion matrix.
Here the statistics come from sums of boolean conditions, the logit decision is a ``torch.where`` on the device, ignored
targets are masked with ``masked_fill`` and confusion-matrix bins are added with ``scatter_add_``. Value checks are
recorded on the device and raised by ``compute()`` (see :mod:`~torchmetrics_async.deferred`).

Example:
    >>> import torch
    >>> from torchmetrics_async.classification.binary import BinaryF1Score
    >>> metric = BinaryF1Score()
    >>> metric.update(torch.tensor([0.8, 0.3, 0.6, 0.1]), torch.tensor([1, 0, 0, 1]))
    >>> metric.compute()
    tensor(0.5000)
"""

from typing import Any, ClassVar, Literal, Optional

import torch
import torchmetrics.classification as tm
from torch import Tensor

from torchmetrics_async._torchmetrics import (
    Metric,
    binary_target_values_message,
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

MultidimAverage = Literal["global", "samplewise"]
Normalize = Optional[Literal["true", "pred", "all", "none"]]


def probs_to_labels(preds: Tensor, threshold: float, keep: Tensor | None = None) -> Tensor:
    """``preds > threshold``, after a sigmoid iff any (kept) prediction lies outside [0, 1], decided on the device.

    torchmetrics' ``normalize_logits_if_needed`` decides with ``if not torch.all(...)`` on the CPU (a host read) and
    with ``torch.where`` on other devices; this is always the ``torch.where`` form. NaN counts as outside [0, 1], as in
    torchmetrics' CPU branch (its device branch tests ``(x < 0) | (x > 1)``, which a NaN fails).

    Args:
        preds: floating-point predictions, any shape.
        threshold: the metric's threshold.
        keep: entries that take part in the decision (the binary confusion matrix drops ignored entries first).

    Returns:
        A bool tensor shaped like ``preds``.

    Example:
        >>> probs_to_labels(torch.tensor([0.2, 0.7]), 0.5), probs_to_labels(torch.tensor([-1.0, 0.2]), 0.5)
        (tensor([False,  True]), tensor([False,  True]))
    """
    # Outside [0, 1] iff clamping changes the value; NaN != NaN, so a NaN counts as outside too (two ops, not four).
    outside = preds.clamp(0, 1) != preds
    logits = outside.any() if keep is None else (outside & keep).any()
    return torch.where(logits, preds.sigmoid(), preds) > threshold


def not_binary(values: Tensor, ignored: Tensor | None = None) -> Tensor:
    """Mask of the entries that are neither 0 nor 1 (nor ignored): what torchmetrics finds with ``torch.unique``."""
    valid = (values == 0) | (values == 1)
    if ignored is not None:
        valid |= ignored
    return torch.logical_not(valid)


def stat_counts(preds: Tensor, target: Tensor, dim: int | tuple[int, ...]) -> tuple[Tensor, ...]:
    """``tp, fp, tn, fn`` summed over ``dim`` exactly as torchmetrics' boolean conditions count them, plus ``n0 + n1``.

    torchmetrics counts ``tp = (target == preds) & (target == 1)``, ``fn = (target != preds) & (target == 1)`` and
    likewise for 0; ``fn`` and ``fp`` are the complements within ``target == 1`` / ``target == 0``, so two masked sums
    and two plain sums give all four. Ignored targets are -1 (or not 0/1) and fall in none of them. The last value,
    the number of targets that are 0 or 1, lets the caller check the targets without another pass over them.
    """
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
    """The four outcome codes shaped to broadcast against inputs of 1 to 3 dimensions, made once per device.

    Key ``(ndim, square)``: ``arange(4)`` shaped ``(4,) + (1,) * ndim``, or ``(2, 2) + (1,) * ndim`` when ``square``
    (the counts then come out as the 2x2 confusion matrix, rows target, columns prediction).

    Example:
        >>> code_bins(torch.device("cpu"))[2, True].shape
        torch.Size([2, 2, 1, 1])
    """
    codes = torch.arange(4, device=device)
    return {
        (ndim, square): codes.view(((2, 2) if square else (4,)) + (1,) * ndim)
        for ndim in (1, 2, 3)
        for square in (False, True)
    }


def coded_counts(
    preds: Tensor,
    target: Tensor,
    bins: Tensor,
    exact: bool,
    dims: tuple[int, ...] | None = None,
    keepdim: bool = False,
) -> Tensor:
    """How many entries have each outcome, from one code per entry and one compare-and-sum.

    Each entry gets the code ``2 * target + preds`` (bool label ``preds``: 0 tn, 1 fp, 2 fn, 3 tp) or
    ``2 * target + (preds == target)`` (integer ``preds``, which torchmetrics counts by equality with the target:
    0 fp, 1 tn, 2 fn, 3 tp). A target that is neither 0 nor 1 (ignored entries are -1) gives a code outside 0-3 and
    counts nowhere, as in torchmetrics. The counts are ``(code == bins).sum(...)``: 3 ops where counting each
    outcome with its own boolean condition takes 12.

    Args:
        preds: bool labels, or integer labels, shaped like ``target``.
        target: integer or bool targets (ignored entries already -1).
        bins: from :func:`code_bins`, for ``preds.ndim``: the leading dimensions of the result.
        exact: clamp the targets into ``[-1, 2]`` first, so that no value wraps around to a code 0-3 in ``2 * target``
            (int64 values near -2**63, uint8 128 and 129, ...); unneeded where such values are a recorded violation.
        dims: the data dimensions to count over (default: all of them).
        keepdim: keep the counted dimensions (size 1), as ``sum(keepdim=True)``.

    Returns:
        The counts: ``bins``' leading shape, followed by the data dimensions not in ``dims``; ``counts.sum()``
        entries had a 0/1 target.

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
    """``tp, fp, tn, fn`` from :func:`coded_counts` (``(4, ...)``-led), one ``unbind``.

    Example:
        >>> outcomes(torch.tensor([5, 1, 2, 3]), bool_preds=True)
        (tensor(3), tensor(1), tensor(5), tensor(2))
    """
    first, second, fn, tp = counts.unbind(0)
    return (tp, second, first, fn) if bool_preds else (tp, first, second, fn)


def targets_outside(binary_count: Tensor, target: Tensor, ignored: Tensor | None) -> Tensor:
    """0-dim flag: some target is neither 0, 1 nor ignored, from the count of 0/1 targets (no extra full-size mask).

    ``target`` is the one counted, its ignored entries set to -1: a bool target then holds True there (as in
    torchmetrics, which counts them as positives), so an ignored entry adds to the count only where it was not counted.

    Example:
        >>> target = torch.tensor([False, True])
        >>> counts = coded_counts(torch.tensor([True, True]), target, code_bins(torch.device("cpu"))[1, False], True)
        >>> bool(targets_outside(counts, target, torch.tensor([True, False])))
        False
    """
    counted = binary_count.sum() if binary_count.dim() else binary_count
    if ignored is not None and target.dtype != torch.bool:
        counted = counted + ignored.sum()
    return counted != target.numel()


def normalize_confmat(confmat: Tensor, normalize: Normalize) -> Tensor:
    """The ``_confusion_matrix_reduce`` of torchmetrics without its host read: 0/0 entries become 0 on the device.

    torchmetrics counts the NaNs (``confmat[torch.isnan(confmat)].nelement()``) to warn about them; ``forward()`` cannot
    read that count without a host sync, so its batch value is the same matrix without the warning (``compute()``
    keeps torchmetrics' path and its warning).
    """
    if normalize is None or normalize == "none":
        return confmat
    confmat = confmat if confmat.is_floating_point() else confmat.float()
    if normalize == "true":
        confmat = confmat / confmat.sum(dim=-1, keepdim=True)
    elif normalize == "pred":
        confmat = confmat / confmat.sum(dim=-2, keepdim=True)
    elif normalize == "all":
        confmat = confmat / confmat.sum(dim=[-2, -1], keepdim=True)
    return confmat.masked_fill(torch.isnan(confmat), 0)


def zero_one_checks(metric: Any, quoted_preds: bool) -> dict[str, str]:
    """The deferred value checks of binary and multilabel inputs: targets and label preds in {0, 1}.

    Args:
        metric: the metric (its ``validate_args`` and ``ignore_index``).
        quoted_preds: torchmetrics' stat-score messages put `preds` in backticks, the others do not.

    Returns:
        Check name -> message; empty when ``validate_args`` is off.
    """
    if not metric.validate_args:
        return {}
    return {
        INVALID_TARGET: binary_target_values_message(metric.ignore_index),
        INVALID_PREDS: label_preds_values_message(quoted=quoted_preds),
    }


class CodedCounts(SyncFreeBatchStats):
    """Keeps the outcome codes of :func:`coded_counts` on the metric's device (made with the other constants)."""

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
        if preds.is_floating_point():
            preds = probs_to_labels(preds, self.threshold)
        elif validate and preds.dtype != torch.bool:
            violations[INVALID_PREDS] = not_binary(preds)
        if not samplewise and coded_fast_path(preds, target):
            # The global counts of any layout: torchmetrics' (N, -1) reshapes change nothing a full sum sees.
            if preds.ndim > 1:
                preds, target = preds.reshape(-1), target.reshape(-1)
            ignored = None
            if self.ignore_index is not None:
                ignored = target == self.ignore_index
                target = target.masked_fill(ignored, -1)
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
        ignored = None
        if self.ignore_index is not None:
            ignored = target == self.ignore_index
            # torchmetrics writes -1 through a boolean index; masked_fill casts -1 to target's dtype the same way.
            target = target.masked_fill(ignored, -1)
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


class BinaryConfusionMatrix(CodedCounts, tm.BinaryConfusionMatrix):
    """No host sync in ``update()`` or ``forward()``, whose normalized matrix comes without the NaN warning."""

    _stat_states = ("confmat",)

    def _deferred_checks(self) -> dict[str, str]:
        return zero_one_checks(self, quoted_preds=False)

    def _batch_stats(self, preds: Tensor, target: Tensor) -> BatchStats:
        validate = self.validate_args
        check_binary_shapes(preds, target, samplewise=False, validate_args=validate)
        if preds.is_floating_point() and self.ignore_index is None and coded_fast_path(preds, target):
            # Float preds give 0/1 labels and no entry is ignored: the bins are the four outcome counts, and an
            # entry whose target is neither 0 nor 1 counts nowhere (torchmetrics drops it).
            labels = probs_to_labels(preds, self.threshold)
            bins = self.__dict__[CODE_BINS][preds.ndim, True]
            exact = not validate or target.dtype != torch.int64
            confmat = coded_counts(labels, target, bins, exact)
            violations = {INVALID_TARGET: targets_outside(confmat, target, None)} if validate else {}
            return BatchStats((confmat,), violations)
        preds = preds.flatten()
        target = target.flatten()
        ignored = keep = None
        if self.ignore_index is not None:
            ignored = target == self.ignore_index
            keep = torch.logical_not(ignored)
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
        """A matrix's value: normalized (the metrics derived from the confusion matrix reduce it instead)."""
        return normalize_confmat(confmat, self.normalize)
