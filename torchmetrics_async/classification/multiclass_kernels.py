"""The kernels of the sync-free multiclass metrics: functions on tensors, no host read, no index out of bounds."""

from typing import Literal, Optional

import torch
from torch import Tensor

from torchmetrics_async._torchmetrics import _confusion_matrix_reduce, _safe_divide

__all__ = [
    "as_index",
    "class_counts",
    "first_max_applies",
    "first_max_index",
    "macro_average",
    "micro_counts",
    "normalize_confmat",
    "ones_like_index",
    "outside",
    "top_k_labels",
]

Normalize = Optional[Literal["true", "pred", "all", "none"]]
_NORMALIZED_DIMS = {"true": -1, "pred": -2, "all": [-2, -1]}
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
