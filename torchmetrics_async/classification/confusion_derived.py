"""Sync-free metrics torchmetrics derives from a confusion matrix: Jaccard index, Cohen's kappa, Matthews' coefficient.

They subclass the accelerated confusion matrices (their sync-free ``update``) and reduce the matrix without host reads:
the macro Jaccard zeroes absent classes with ``masked_fill``; Matthews' special cases are picked with ``torch.where``,
always giving a float (torchmetrics: an integer ``1``/``-1`` for perfect and inverse binary predictions).
"""

from typing import Any

import torch
import torchmetrics.classification as tm
from torch import Tensor

from torchmetrics_async._torchmetrics import _cohen_kappa_reduce, _jaccard_index_reduce, _safe_divide
from torchmetrics_async.classification.binary import BinaryConfusionMatrix
from torchmetrics_async.classification.multiclass import MulticlassConfusionMatrix
from torchmetrics_async.classification.multilabel import MultilabelConfusionMatrix

__all__ = [
    "BinaryCohenKappa",
    "BinaryJaccardIndex",
    "BinaryMatthewsCorrCoef",
    "MulticlassCohenKappa",
    "MulticlassJaccardIndex",
    "MulticlassMatthewsCorrCoef",
    "MultilabelJaccardIndex",
    "MultilabelMatthewsCorrCoef",
    "jaccard_index_reduce",
    "matthews_corrcoef_reduce",
]


def jaccard_index_reduce(
    confmat: Tensor, average: str | None, ignore_index: int | None = None, zero_division: float = 0.0
) -> Tensor:
    """Torchmetrics' ``_jaccard_index_reduce`` without its host read (the multiclass macro weights' mask write).

    Example:
        >>> jaccard_index_reduce(torch.tensor([[1, 0, 0], [1, 1, 0], [0, 0, 0]]), "macro")
        tensor(0.5000)
    """
    if average != "macro" or confmat.ndim != 2:
        return _jaccard_index_reduce(confmat, average=average, ignore_index=ignore_index, zero_division=zero_division)
    # torchmetrics' multiclass macro branch, with `weights[absent] = 0.0` written by masked_fill.
    confmat = confmat.float()
    num = torch.diag(confmat)
    denom = confmat.sum(0) + confmat.sum(1) - num
    jaccard = _safe_divide(num, denom, zero_division=zero_division)
    weights = torch.ones_like(jaccard)
    if ignore_index is not None and 0 <= ignore_index < confmat.shape[0]:
        weights[ignore_index] = 0.0
    weights = weights.masked_fill(confmat.sum(1) + confmat.sum(0) == 0, 0.0)
    return ((weights * jaccard) / weights.sum()).sum()


def _binary_matthews(confmat: Tensor, general: Tensor) -> Tensor:
    """The special cases torchmetrics makes of a 2x2 matrix, picked on the device (``general``: the formula)."""
    tn, fp, fn, tp = confmat.reshape(-1)
    eps = torch.finfo(torch.float32).eps
    root_eps = torch.full((), eps, dtype=torch.float32, device=confmat.device).sqrt()
    zero = torch.zeros((), dtype=general.dtype, device=confmat.device)
    # The numerators torchmetrics uses when the formula's denominator is 0, first matching case first.
    cases = [
        ((fn == 0) & (tn == 0), root_eps * (tp - fp)),
        ((fp == 0) & (tn == 0), root_eps * (tp - fn)),
        ((tp == 0) & (fn == 0), root_eps * (tn - fp)),
        ((tp == 0) & (fp == 0), root_eps * (tn - fn)),
        (tp == 0, tn - fp * fn),
        (tn == 0, tp - fp * fn),
        ((fp == 0) | (fn == 0), tp * tn),
    ]
    degenerate_denom = (tp + fp + eps) * (tp + fn + eps) * (tn + fp + eps) * (tn + fn + eps)
    numerator = zero
    for condition, value in reversed(cases):
        numerator = torch.where(condition, value, numerator)
    matched = torch.stack([condition for condition, _ in cases]).any()
    # No case matched: torchmetrics returns 0.
    degenerate = torch.where(matched, numerator / torch.sqrt(degenerate_denom), zero)
    return degenerate.to(general.dtype)


def matthews_corrcoef_reduce(confmat: Tensor) -> Tensor:
    """Torchmetrics' ``_matthews_corrcoef_reduce``, branches on the device, float (last bits may differ past 2**12).

    Example:
        >>> perfect, one_wrong = torch.tensor([[2, 0], [0, 3]]), torch.tensor([[2, 1], [0, 3]])
        >>> matthews_corrcoef_reduce(perfect), matthews_corrcoef_reduce(one_wrong)
        (tensor(1.), tensor(0.7071))
    """
    confmat = confmat.sum(0) if confmat.ndim == 3 else confmat
    binary = confmat.numel() == 4
    counts = confmat.float()
    tk = counts.sum(dim=-1)
    pk = counts.sum(dim=-2)
    c = torch.trace(counts)
    s = counts.sum()
    numerator = c * s - (tk * pk).sum()
    cov_ypyp = s**2 - (pk * pk).sum()
    cov_ytyt = s**2 - (tk * tk).sum()
    denom = cov_ypyp * cov_ytyt
    value = numerator / torch.sqrt(denom)
    if not binary:
        return torch.where(denom == 0, torch.zeros_like(value), value)
    value = torch.where(denom == 0, _binary_matthews(confmat, value), value)
    tn, fp, fn, tp = confmat.reshape(-1)
    right, wrong = tp + tn, fp + fn
    value = torch.where((right != 0) & (wrong == 0), torch.ones_like(value), value)
    return torch.where((right == 0) & (wrong != 0), -torch.ones_like(value), value)


# The compute() of every class below (a function, not one more base class in their MRO); forward()'s batch value is
# the same _reduce of the batch's matrix (the accelerated confusion matrices call it).
def _reduced_confmat(self: Any) -> Tensor:
    """Raise deferred value errors, then reduce the confusion matrix without host reads."""
    self._raise_deferred_checks()
    return self._reduce(self.confmat)


class BinaryJaccardIndex(BinaryConfusionMatrix, tm.BinaryJaccardIndex):
    """No host sync in ``update()`` or ``forward()``."""

    compute = _reduced_confmat

    def _reduce(self, confmat: Tensor) -> Tensor:
        return _jaccard_index_reduce(confmat, average="binary", zero_division=self.zero_division)


class MulticlassJaccardIndex(MulticlassConfusionMatrix, tm.MulticlassJaccardIndex):
    """No host sync in ``update()`` or ``forward()``."""

    compute = _reduced_confmat

    def _reduce(self, confmat: Tensor) -> Tensor:
        return jaccard_index_reduce(confmat, self.average, self.ignore_index, self.zero_division)


class MultilabelJaccardIndex(MultilabelConfusionMatrix, tm.MultilabelJaccardIndex):
    """No host sync in ``update()`` or ``forward()``."""

    compute = _reduced_confmat

    def _reduce(self, confmat: Tensor) -> Tensor:
        # torchmetrics passes no ignore_index here: ignored entries are already out of the matrix.
        return jaccard_index_reduce(confmat, self.average, zero_division=self.zero_division)


class BinaryCohenKappa(BinaryConfusionMatrix, tm.BinaryCohenKappa):
    """No host sync in ``update()`` or ``forward()``."""

    compute = _reduced_confmat

    def _reduce(self, confmat: Tensor) -> Tensor:
        return _cohen_kappa_reduce(confmat, self.weights)


class MulticlassCohenKappa(MulticlassConfusionMatrix, tm.MulticlassCohenKappa):
    """No host sync in ``update()`` or ``forward()``."""

    compute = _reduced_confmat
    _reduce = BinaryCohenKappa._reduce


class BinaryMatthewsCorrCoef(BinaryConfusionMatrix, tm.BinaryMatthewsCorrCoef):
    """No host sync in ``update()`` or ``forward()``; all right or all wrong: a float 1/-1 (torchmetrics: int64)."""

    compute = _reduced_confmat
    _reduce = staticmethod(matthews_corrcoef_reduce)


class MulticlassMatthewsCorrCoef(MulticlassConfusionMatrix, tm.MulticlassMatthewsCorrCoef):
    """No host sync in ``update()`` or ``forward()``; one sum of the marginals: last bits may differ past 2**12."""

    compute = _reduced_confmat
    _reduce = staticmethod(matthews_corrcoef_reduce)


class MultilabelMatthewsCorrCoef(MultilabelConfusionMatrix, tm.MultilabelMatthewsCorrCoef):
    """No host sync in ``update()`` or ``forward()``; all right or all wrong: a float 1/-1 (torchmetrics: int64)."""

    compute = _reduced_confmat
    _reduce = staticmethod(matthews_corrcoef_reduce)
