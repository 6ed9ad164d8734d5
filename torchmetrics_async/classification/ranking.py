"""Sync-free multilabel ranking metrics: coverage error, ranking average precision, ranking loss.

torchmetrics reads the host for its target check, logit decision, boolean-index writes, the rows the ranking loss keeps,
a Python loop of per-row ``torch.unique`` ranks and ``compute``'s count. Here: ``where``/``masked_fill``, skipped rows
add 0, and every row's ranks come from one stable sort (an entry's rank is the end of its group of ties, NaNs each
their own group as ``torch.unique`` counts them). Sums run in another order (the last bits may differ).

Example:
    >>> import torch
    >>> from torchmetrics_async.classification.ranking import MultilabelRankingAveragePrecision
    >>> metric = MultilabelRankingAveragePrecision(num_labels=3)
    >>> metric(torch.tensor([[0.9, 0.2, 0.4], [0.1, 0.8, 0.3]]), torch.tensor([[1, 0, 1], [0, 0, 1]]))
    tensor(0.7500)
"""

import torch
import torchmetrics.classification as tm
from torch import Tensor

from torchmetrics_async._torchmetrics import RANKING_FLOAT_PREDS_MESSAGE
from torchmetrics_async.batch_stats import BatchStats, SyncFreeBatchStats
from torchmetrics_async.classification.binary import INVALID_TARGET, BinaryScores, normalize_scores, not_binary
from torchmetrics_async.classification.shapes import check_multilabel_shapes

__all__ = ["MultilabelCoverageError", "MultilabelRankingAveragePrecision", "MultilabelRankingLoss"]


def _coverage_error(preds: Tensor, target: Tensor) -> tuple[Tensor, int]:
    """Torchmetrics' ``_multilabel_coverage_error_update`` on ``(N, L)`` inputs, the offset written with ``where``."""
    offset = torch.where(target == 0, preds.min().abs() + 10, torch.zeros_like(preds))
    lowest = (preds + offset).min(dim=1)[0]
    coverage = (preds >= lowest[:, None]).sum(dim=1).to(torch.float32)
    return coverage.sum(), coverage.numel()


def _ranking_average_precision(preds: Tensor, target: Tensor) -> tuple[Tensor, int]:
    """Torchmetrics' ``_multilabel_ranking_average_precision_update`` on ``(N, L)`` inputs, every row at once."""
    rows, labels = preds.shape
    ordered, order = (-preds).sort(dim=1, stable=True)
    relevant = (target == 1).gather(1, order)
    position = torch.arange(labels, device=preds.device).expand(rows, labels)
    starts = torch.ones_like(relevant)
    starts[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    # The number of entries up to the end of each entry's group of ties: its rank (torchmetrics' _rank_data).
    following = torch.where(starts, position, labels).roll(-1, dims=1)
    following[:, -1] = labels
    rank = following.flip(1).cummin(dim=1).values.flip(1)
    relevant_rank = relevant.long().cumsum(dim=1).gather(1, rank - 1)
    counted = relevant.sum(dim=1)
    ratios = torch.where(relevant, relevant_rank.float() / rank.float(), 0)
    scores = torch.where((counted > 0) & (counted < labels), ratios.sum(dim=1) / counted, 1.0)
    return scores.sum(), rows


def _ranking_loss(preds: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:
    """Torchmetrics' ``_multilabel_ranking_loss_update`` on ``(N, L)``: skipped rows add 0; the count on device."""
    rows, labels = preds.shape
    relevant = target == 1
    counted = relevant.sum(dim=1)
    kept = (counted > 0) & (counted < labels)
    inverse = preds.argsort(dim=1).argsort(dim=1)
    per_label = ((labels - inverse) * relevant).to(torch.float32)
    loss = (per_label.sum(dim=1) - 0.5 * counted * (counted + 1)) / (counted * (labels - counted))
    total = torch.where(kept.any(), rows, 1)  # torchmetrics counts 1 for a batch without such a row
    return torch.where(kept, loss, 0).sum(), total


class _SyncFreeRanking(SyncFreeBatchStats):
    """The three classes' ``update``: torchmetrics' validation and format without host reads, then ``_kernel``."""

    _stat_states = ("measure", "total")

    _deferred_checks = BinaryScores._deferred_checks

    def _batch_stats(self, preds: Tensor, target: Tensor) -> BatchStats:
        labels = self.num_labels
        check_multilabel_shapes(preds, target, labels, False, self.validate_args)
        if self.validate_args and not preds.is_floating_point():
            raise ValueError(RANKING_FLOAT_PREDS_MESSAGE.format(preds.dtype))
        violations = {}
        ignored = None if self.ignore_index is None else target == self.ignore_index
        if self.validate_args:
            violations[INVALID_TARGET] = not_binary(target, ignored)
        if preds.is_floating_point():
            preds = normalize_scores(preds, "sigmoid")
        if ignored is not None:  # torchmetrics writes -4 * num_labels to both through a boolean index
            preds, target = preds.masked_fill(ignored, -4 * labels), target.masked_fill(ignored, -4 * labels)
        preds, target = (x.movedim(1, -1).reshape(-1, labels) for x in (preds, target))
        return BatchStats(self._kernel(preds, target), violations)

    def _batch_value(self, stats: BatchStats) -> Tensor:
        measure, total = stats.values  # torchmetrics adds them to fresh states: the measure takes their dtype
        return measure.to(self._defaults["measure"].dtype) / total

    def compute(self) -> Tensor:
        """Raise deferred value errors, then torchmetrics' ``measure / total``, without reading ``total``."""
        self._raise_deferred_checks()
        return self.measure / self.total


class MultilabelCoverageError(_SyncFreeRanking, tm.MultilabelCoverageError):
    """No host sync in ``update()`` or ``forward()``."""

    _kernel = staticmethod(_coverage_error)


class MultilabelRankingAveragePrecision(_SyncFreeRanking, tm.MultilabelRankingAveragePrecision):
    """No host sync in ``update()`` or ``forward()``; the per-row means and their sum may differ in the last bits."""

    _kernel = staticmethod(_ranking_average_precision)


class MultilabelRankingLoss(_SyncFreeRanking, tm.MultilabelRankingLoss):
    """No host sync in ``update()`` or ``forward()``; the sum may differ in the last bits."""

    _kernel = staticmethod(_ranking_loss)
