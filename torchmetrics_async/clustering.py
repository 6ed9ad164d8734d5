"""Sync-free clustering metrics: torchmetrics' names, arguments, list states and ``compute()``.

torchmetrics' batch value relabels with ``torch.unique`` and branches on device values; here it counts on the device
(:func:`groups`: a sort and a cumsum), tables padded to the batch size. A ``forward()`` batch's cluster-count checks
are deferred to ``compute()``.

Example:
    >>> import torch
    >>> metric = AdjustedRandScore()
    >>> metric(torch.tensor([0, 0, 1, 2]), torch.tensor([0, 0, 1, 1]))
    tensor(0.5714)
"""

import torch
import torchmetrics.clustering as tm
from torch import Tensor

from torchmetrics_async._torchmetrics import _validate_intrinsic_cluster_data, check_cluster_labels
from torchmetrics_async.batch_stats import BatchStats, SyncFreeBatchStats
from torchmetrics_async.errors import ShapeMismatchError

__all__ = [
    "AdjustedMutualInfoScore",
    "AdjustedRandScore",
    "CalinskiHarabaszScore",
    "CompletenessScore",
    "DaviesBouldinScore",
    "DunnIndex",
    "FowlkesMallowsIndex",
    "HomogeneityScore",
    "MutualInfoScore",
    "NormalizedMutualInfoScore",
    "RandScore",
    "VMeasureScore",
    "cluster_means",
    "groups",
]

#: The deferred check of a ``forward()`` batch with too few or too many clusters (torchmetrics raises in ``forward``).
CLUSTER_COUNT = "invalid_cluster_count"
COUNT_MESSAGE = "Number of detected clusters must be greater than one and less than the number of samples."
EMPTY_MESSAGE = (
    "max(): Expected reduction dim to be specified for input.numel() == 0. Specify the reduction dim with the 'dim'"
    " argument."
)
DUNN_MESSAGE = "stack expects a non-empty TensorList"  # torchmetrics' DunnIndex of one cluster: torch.stack([])


def groups(x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The dense rank, group size and first-of-group flag of each entry of 1-D ``x``, without a host read.

    Example:
        >>> [t.tolist() for t in groups(torch.tensor([5, 2, 5]))]
        [[1, 0, 1], [2, 1, 2], [True, True, False]]
    """
    values, order = x.sort(stable=True)
    start = torch.ones_like(values, dtype=torch.bool)
    start[1:] = values[1:] != values[:-1]
    ranks = start.cumsum(0) - 1
    sizes = torch.zeros_like(ranks).index_add_(0, ranks, torch.ones_like(ranks))
    rank = torch.empty_like(ranks).scatter_(0, order, ranks)
    return rank, sizes[rank], torch.empty_like(start).scatter_(0, order, start)


def _one_d(x: Tensor) -> Tensor:
    """A 0-dim tensor as one entry, as torchmetrics' ``dim_zero_cat`` takes it."""
    return x.reshape(1) if x.ndim == 0 else x


def _entropy(size: Tensor, first: Tensor, n: Tensor) -> Tensor:
    """Torchmetrics' ``calculate_entropy`` from the entries' group sizes."""
    return -torch.where(first, size / n * (size.log() - n.log()), 0).sum()


def _mutual_info(preds: Tensor, target: Tensor) -> tuple[Tensor, ...]:
    """Torchmetrics' ``mutual_info_score``; also the entropies of ``preds``, ``target`` and the entries' sizes."""
    n = torch.full((), preds.numel(), device=preds.device)  # a kernel argument, no copy
    rank_t, a, first_t = groups(target)
    rank_p, b, first_p = groups(preds)
    _, c, first_c = groups(rank_t * max(preds.numel(), 1) + rank_p)
    mi = torch.where(first_c, c / n * (n.log() + c.log() - (a.log() + b.log())), 0).sum()
    return mi, _entropy(b, first_p, n), _entropy(a, first_t, n), n, a, b, c, rank_t, rank_p


def _pairs(preds: Tensor, target: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Torchmetrics' pair confusion matrix ``(tn, fp, fn, tp)``, in int64 as there."""
    _, _, _, n, a, b, c, _, _ = _mutual_info(preds, target)
    same, same_t, same_p = c.sum(), a.sum(), b.sum()
    fp, fn = same_t - same, same_p - same
    return n * n - fp - fn - same, fp, fn, same - n


def _mean(x: Tensor, method: str) -> Tensor:
    """Torchmetrics' ``calculate_generalized_mean`` for its named methods."""
    if method == "geometric":
        return x.log().mean().exp()
    return {"min": x.min, "arithmetic": x.mean, "max": x.max}[method]()


def _homogeneity(preds: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:
    """Torchmetrics' homogeneity and completeness (``_completeness_score_compute``)."""
    mi, h_preds, h_target, *_ = _mutual_info(preds, target)
    one = torch.ones((), device=preds.device)
    if not preds.numel():  # torchmetrics' special case: no clustering (its completeness divides a 0 entropy then)
        return one - 1, one
    return torch.where(h_target != 0, mi / h_target, one), torch.where(h_preds != 0, mi / h_preds, one)


def expected_mutual_info(rank_t: Tensor, rank_p: Tensor, n: Tensor) -> Tensor:
    """Torchmetrics' ``expected_mutual_info_score`` over every (row, column, n_ij) its loops visit, padded to the batch.

    The (row, n_ij) pairs are the entries sorted by target; columns go in blocks of ~2**20 cells (bounded memory).
    """
    size = rank_t.numel()
    ones = torch.ones_like(rank_t)
    rows, cols = torch.zeros_like(ones).index_add_(0, rank_t, ones), torch.zeros_like(ones).index_add_(0, rank_p, ones)
    i = rank_t.sort().values
    nij = torch.arange(1, size + 1, device=n.device) - (rows.cumsum(0) - rows)[i]
    a_i, nij = rows[i, None], nij[:, None]
    log_nnij, block = n.log() + nij.log(), max(1, 2**20 // max(size, 1))
    emi = torch.zeros((), device=n.device)
    for start in range(0, size, block):
        b_j = cols[None, start : start + block]
        gln = torch.lgamma(a_i + 1) + torch.lgamma(b_j + 1) + torch.lgamma(n - a_i + 1) + torch.lgamma(n - b_j + 1)
        gln = gln - (torch.lgamma(nij + 1) + torch.lgamma(n + 1)) - torch.lgamma(a_i - nij + 1)
        gln = gln - torch.lgamma(b_j - nij + 1) - torch.lgamma(n - a_i - b_j + nij + 1)
        term = nij / n * (log_nnij - a_i.log() - b_j.log()) * gln.exp()
        emi = emi + torch.where((nij <= b_j) & (nij >= a_i - n + b_j), term, 0).sum()
    return torch.where(((rows > 0).sum() == 1) | ((cols > 0).sum() == 1), 0, emi)


class _Extrinsic(SyncFreeBatchStats):
    """Label-comparing scores: torchmetrics' list states, a batch value counted on the device."""

    _stat_states = ("preds", "target")

    def _batch_stats(self, preds: Tensor, target: Tensor) -> BatchStats:
        check_cluster_labels(_one_d(preds), _one_d(target))  # dtypes and shapes: metadata
        return BatchStats((preds, target), {})

    def _batch_value(self, stats: BatchStats) -> Tensor:
        return self._score(*map(_one_d, stats.values))


class MutualInfoScore(_Extrinsic, tm.MutualInfoScore):
    """Labels are checked for dtype and shape in ``update()`` (torchmetrics: in ``compute()``)."""

    def _score(self, preds: Tensor, target: Tensor) -> Tensor:
        return _mutual_info(preds, target)[0]


class NormalizedMutualInfoScore(_Extrinsic, tm.NormalizedMutualInfoScore):
    """Labels are checked for dtype and shape in ``update()`` (torchmetrics: in ``compute()``)."""

    def _score(self, preds: Tensor, target: Tensor) -> Tensor:
        mi, h_preds, h_target, *_ = _mutual_info(preds, target)
        normalizer = _mean(torch.stack([h_preds, h_target]), self.average_method)
        return torch.where(mi.abs() <= torch.finfo().eps, mi, mi / normalizer)


class AdjustedMutualInfoScore(_Extrinsic, tm.AdjustedMutualInfoScore):
    """The batch value's expected mutual information costs O(batch size²) work, in bounded memory."""

    def _score(self, preds: Tensor, target: Tensor) -> Tensor:
        if not preds.numel():  # torchmetrics' expected mutual information takes the max of no cluster sizes
            raise RuntimeError(EMPTY_MESSAGE)
        mi, h_preds, h_target, n, *_, rank_t, rank_p = _mutual_info(preds, target)
        emi = expected_mutual_info(rank_t, rank_p, n)
        denominator = _mean(torch.stack([h_preds, h_target]), self.average_method) - emi
        eps = torch.finfo(denominator.dtype).eps
        denominator = torch.where(denominator < 0, denominator.clamp(max=-eps), denominator.clamp(min=eps))
        return (mi - emi) / denominator


class AdjustedRandScore(_Extrinsic, tm.AdjustedRandScore):
    """Labels are checked for dtype and shape in ``update()`` (torchmetrics: in ``compute()``)."""

    def _score(self, preds: Tensor, target: Tensor) -> Tensor:
        tn, fp, fn, tp = _pairs(preds, target)
        value = 2.0 * (tp * tn - fn * fp) / ((tp + fn) * (fn + tn) + (tp + fp) * (fp + tn))
        return torch.where((fn == 0) & (fp == 0), 1.0, value)


class RandScore(_Extrinsic, tm.RandScore):
    """Labels are checked for dtype and shape in ``update()`` (torchmetrics: in ``compute()``)."""

    def _score(self, preds: Tensor, target: Tensor) -> Tensor:
        tn, fp, fn, tp = _pairs(preds, target)
        numerator, denominator = tn + tp, tn + fp + fn + tp
        return torch.where((numerator == denominator) | (denominator == 0), 1.0, numerator / denominator)


class FowlkesMallowsIndex(_Extrinsic, tm.FowlkesMallowsIndex):
    """Labels are checked for dtype and shape in ``update()`` (torchmetrics: in ``compute()``)."""

    def _score(self, preds: Tensor, target: Tensor) -> Tensor:
        _, fp, fn, tp = _pairs(preds, target)
        return torch.where(tp == 0, 0.0, torch.sqrt(tp / (tp + fn)) * torch.sqrt(tp / (tp + fp)))


class HomogeneityScore(_Extrinsic, tm.HomogeneityScore):
    """Labels are checked for dtype and shape in ``update()`` (torchmetrics: in ``compute()``)."""

    def _score(self, preds: Tensor, target: Tensor) -> Tensor:
        return _homogeneity(preds, target)[0]


class CompletenessScore(_Extrinsic, tm.CompletenessScore):
    """Labels are checked for dtype and shape in ``update()`` (torchmetrics: in ``compute()``)."""

    def _score(self, preds: Tensor, target: Tensor) -> Tensor:
        return _homogeneity(preds, target)[1]


class VMeasureScore(_Extrinsic, tm.VMeasureScore):
    """Labels are checked for dtype and shape in ``update()`` (torchmetrics: in ``compute()``)."""

    def _score(self, preds: Tensor, target: Tensor) -> Tensor:
        homogeneity, completeness = _homogeneity(preds, target)
        value = (1 + self.beta) * homogeneity * completeness / (self.beta * homogeneity + completeness)
        return torch.where(homogeneity + completeness == 0.0, 1.0, value)


def cluster_means(data: Tensor, rank: Tensor, sizes: Tensor) -> Tensor:
    """Each cluster's ``data[rank == k].mean(dim=0)``, bit for bit as torchmetrics takes it, without a host read.

    A reduction's rounding depends on its length (CPU kernels split it into interleaved partial sums), so each possible
    cluster size ``s`` gets its own ``mean`` over a table ``(batch // s, s, d)`` of the clusters of that size, their
    entries in update order: exact cases (clusters of identical points) stay exact. O(batch² d) work; rows past the
    cluster count are 0.

    Example:
        >>> data, labels = torch.tensor([[1.0], [3.0], [5.0]]), torch.tensor([1, 0, 1])
        >>> rank = groups(labels)[0]
        >>> cluster_means(data, rank, torch.zeros_like(rank).index_add_(0, rank, torch.ones_like(rank)))
        tensor([[3.],
                [3.],
                [0.]])
    """
    n, d = data.shape
    positions = torch.arange(2 * n + 1, device=data.device)
    members = data[rank.sort(stable=True).indices]  # entries grouped by cluster, in update order
    starts = sizes.cumsum(0) - sizes
    by_size = sizes.argsort(stable=True)
    first = torch.searchsorted(sizes[by_size], positions[: n + 2])  # where each size starts in `by_size`
    means = data.new_zeros(2 * n, d)  # rows n.. take the unused slots (distinct targets, deterministic copies)
    for s in range(1, n + 1):
        slots = first[s] + positions[: n // s]
        clusters = by_size[slots.clamp(max=n - 1)]
        table = members[(starts[clusters][:, None] + positions[:s]).clamp(max=n - 1)]
        target = torch.where(slots < first[s + 1], clusters, n + positions[: n // s])
        means.index_copy_(0, target, table.mean(1))
    return means[:n]


def _centroids(data: Tensor, labels: Tensor) -> tuple[Tensor, ...]:
    """Entries' cluster ranks, padded cluster sizes, torchmetrics' centroids (:func:`cluster_means`), cluster count."""
    rank, _, first = groups(labels)
    sizes = torch.zeros_like(rank).index_add_(0, rank, torch.ones_like(rank))
    acc = torch.promote_types(data.dtype, torch.float32)
    return rank, sizes.to(acc), cluster_means(data, rank, sizes), first.sum()  # padding rows: 0


class _Intrinsic(SyncFreeBatchStats):
    """Embedding scores: torchmetrics' list states; a batch with a cluster count torchmetrics rejects is deferred."""

    _stat_states = ("data", "labels")
    _count_message = COUNT_MESSAGE

    def _deferred_checks(self) -> dict[str, str]:
        return {CLUSTER_COUNT: self._count_message}

    def update(self, data: Tensor, labels: Tensor) -> None:
        """Append a batch of embeddings ``(N, d)`` and their cluster labels ``(N,)`` without a host sync."""
        self._merge_stats(self._batch_stats(data, labels))

    def _batch_stats(self, data: Tensor, labels: Tensor) -> BatchStats:
        _validate_intrinsic_cluster_data(data, _one_d(labels))
        if data.shape[0] != _one_d(labels).shape[0]:
            raise ShapeMismatchError(f"Expected as many labels as samples, got {labels.numel()} and {data.shape[0]}.")
        return BatchStats((data.contiguous(), labels), {})  # torchmetrics scores a copy: a view's means round otherwise

    def _batch_value(self, stats: BatchStats) -> Tensor:
        data, labels = stats.values[0], _one_d(stats.values[1])
        value, stats.violations[CLUSTER_COUNT] = self._score(data, *_centroids(data, labels))
        return value


def _too_few(count: Tensor, data: Tensor) -> Tensor:
    """Torchmetrics' ``_validate_intrinsic_labels_to_samples``, violated."""
    return (count <= 1) | (count >= data.shape[0])


class CalinskiHarabaszScore(_Intrinsic, tm.CalinskiHarabaszScore):
    """A ``forward()`` batch of too few or too many clusters gives NaN, raised by ``compute()``."""

    def _score(self, data: Tensor, rank: Tensor, sizes: Tensor, means: Tensor, k: Tensor) -> tuple:
        # Per-cluster terms rounded to the data's dtype, then summed in the default dtype, as torchmetrics' loop does.
        dtype = torch.get_default_dtype()
        spread = (((means - data.mean(dim=0)) ** 2).sum(1) * sizes).to(data.dtype).to(dtype)
        between = torch.where(sizes > 0, spread, 0).sum()
        squares = ((data - means[rank]) ** 2).to(sizes.dtype).sum(1)
        within = torch.zeros_like(sizes).index_add_(0, rank, squares).to(data.dtype).to(dtype).sum()
        value = between * (data.shape[0] - k) / (within * (k - 1.0))
        return torch.where(within == 0, torch.ones((), device=data.device), value), _too_few(k, data)


class DaviesBouldinScore(_Intrinsic, tm.DaviesBouldinScore):
    """As CalinskiHarabaszScore; above 25 clusters ``forward()`` takes exact centroid distances (see the README)."""

    def _score(self, data: Tensor, rank: Tensor, sizes: Tensor, means: Tensor, k: Tensor) -> tuple:
        dtype = torch.get_default_dtype()
        centroids = means.to(dtype)
        spread = (data - centroids[rank]).pow(2.0).sum(dim=1).sqrt()
        intra = (torch.zeros_like(sizes).index_add_(0, rank, spread) / sizes.clamp(min=1)).to(dtype)
        # Not the matrix-product formula torchmetrics' cdist takes above 25 centroids: its self-distances are not 0.
        distances = torch.cdist(centroids, centroids, compute_mode="donot_use_mm_for_euclid_dist")
        valid = torch.arange(data.shape[0], device=data.device) < k
        pair = valid[:, None] & valid[None, :]
        degenerate = (intra.abs() <= 1e-8).all() | (torch.where(pair, distances.abs(), 0) <= 1e-8).all()
        ratios = (intra[None, :] + intra[:, None]) / distances.masked_fill(distances == 0, float("inf"))
        scores = torch.where(pair, ratios, -float("inf")).max(dim=1).values
        value = torch.where(valid, scores, 0).sum() / k
        return torch.where(degenerate, torch.zeros((), device=data.device), value), _too_few(k, data)


class DunnIndex(_Intrinsic, tm.DunnIndex):
    """A ``forward()`` batch of one cluster gives NaN, raised by ``compute()``; data must be ``(N, d)`` floats."""

    _count_message = DUNN_MESSAGE

    def _score(self, data: Tensor, rank: Tensor, sizes: Tensor, centroids: Tensor, k: Tensor) -> tuple:
        if self.p >= 0 and centroids.dtype in (torch.float32, torch.float64):
            distances = torch.cdist(centroids, centroids, p=self.p, compute_mode="donot_use_mm_for_euclid_dist")
        else:  # cdist takes no negative p nor half precision
            distances = torch.linalg.vector_norm(centroids[:, None] - centroids[None, :], ord=self.p, dim=-1)
        index = torch.arange(data.shape[0], device=data.device)
        pair = (index[:, None] < index[None, :]) & (index[None, :] < k)
        intra = torch.linalg.vector_norm(data - centroids[rank], ord=self.p, dim=1).max()
        return torch.where(pair, distances, float("inf")).min() / intra, k < 2
