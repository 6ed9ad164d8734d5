"""The kernels of the sync-free curves: plain functions on tensors, no host read."""

import torch
from torch import Tensor

from torchmetrics_async._torchmetrics import (
    _auc_compute_without_check,
    _binary_auroc_compute,
    _binary_roc_compute,
    _safe_divide,
)

__all__ = [
    "binary_auroc_binned",
    "binned_confmat",
    "distinct_values",
    "nan_ignoring_average",
    "normalize_scores",
    "outside_unit_interval",
    "paired_shapes",
]


def paired_shapes(preds: tuple[int, ...], target: tuple[int, ...]) -> bool:
    """Whether entries of these shapes pair one to one in order: equal up to size-1 dimensions (metadata, checked free).

    Example:
        >>> paired_shapes((4, 1), (4,)), paired_shapes((4, 2), (8,)), paired_shapes((4,), (3,))
        (True, False, False)
    """
    return [size for size in preds if size != 1] == [size for size in target if size != 1]


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
    # [target][predicted]: tn, fp, fn, tp.
    confmat = torch.stack((below[:, 0], above[:, 0], below[:, 1], above[:, 1]), dim=-1)
    return confmat.permute(1, 0, 2).reshape(count, classes, 2, 2)


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
        return kept.sum() / torch.logical_not(nan).sum()
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
