"""Sync-free ``Perplexity``: each token's probability gathered on the device, ignored tokens weighted 0.

A target outside the vocabulary (torchmetrics: ``IndexError`` in ``update()``, a device assert on CUDA) is a deferred
check raised by ``compute()``.
"""

import torch
import torchmetrics.text as tm
from torch import Tensor

from torchmetrics_async._torchmetrics import _check_shape_and_type_consistency
from torchmetrics_async.batch_stats import BatchStats, SyncFreeBatchStats, in_state_dtypes

__all__ = ["Perplexity", "perplexity_stats"]

# torchmetrics raises an IndexError naming the value in update (a host read).
INVALID_TARGET = "invalid_target"
TARGET_OUTSIDE_VOCABULARY_MESSAGE = (
    "Detected `target` values outside the vocabulary: expected class indices in [0, vocab_size), vocab_size being"
    " `preds.shape[-1]`, or `ignore_index`."
)


def perplexity_stats(preds: Tensor, target: Tensor, ignore_index: int | None) -> tuple[Tensor, Tensor, Tensor]:
    """Torchmetrics' ``_perplexity_update`` without host syncs: summed -log-probability, count, out-of-vocab flag.

    Example:
        >>> total, count, bad = perplexity_stats(torch.zeros(1, 2, 4), torch.tensor([[1, 3]]), None)
        >>> total, count, bool(bad)
        (tensor(2.7726), tensor(2), False)
    """
    _check_shape_and_type_consistency(preds, target)
    vocab = preds.shape[-1]
    probs = torch.nn.functional.softmax(preds.reshape(-1, vocab), dim=1)
    target = target.reshape(-1)
    outside = (target < 0) | (target >= vocab)
    # Clamped: an ignored or invalid target never indexes out of bounds (the latter is reported by the check).
    picked = probs.gather(1, target.clamp(0, max(vocab - 1, 0)).unsqueeze(1)).squeeze(1)
    if ignore_index is None:
        return -picked.log().sum(), torch.full((), target.numel(), device=target.device), outside.any()
    keep = target != ignore_index
    # An ignored token contributes log(1) = 0, with no gradient (a log of an underflowed 0 would give NaN ones).
    return -torch.where(keep, picked, 1.0).log().sum(), keep.sum(), (outside & keep).any()


class Perplexity(SyncFreeBatchStats, tm.Perplexity):
    """No host sync in ``update()`` or ``forward()``."""

    _stat_states = ("total_log_probs", "count")

    def _deferred_checks(self) -> dict[str, str]:
        return {INVALID_TARGET: TARGET_OUTSIDE_VOCABULARY_MESSAGE}

    def _batch_stats(self, preds: Tensor, target: Tensor) -> BatchStats:
        total, count, outside = perplexity_stats(preds, target, self.ignore_index)
        return BatchStats((total, count), {INVALID_TARGET: outside})

    def _batch_value(self, stats: BatchStats) -> Tensor:
        return super()._batch_value(in_state_dtypes(self, stats))
