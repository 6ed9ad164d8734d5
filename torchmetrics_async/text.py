"""Sync-free text metrics with torchmetrics' names, arguments and values: ``Perplexity``.

torchmetrics' ``Perplexity.update`` picks each token's probability with a CPU ``arange`` index (a host-to-device
copy on an accelerator), writes ``ignore_index`` through ``torch.tensor(0, device=...)`` (another copy) and drops the
ignored tokens by boolean-mask indexing (a data-dependent shape). Here each token's probability is gathered on the
device, ignored tokens take part with a log-probability of 0 and a count of 0, and a target outside the vocabulary,
which torchmetrics' indexing rejects in ``update()`` (``IndexError`` on the CPU, a device-side assert on CUDA), is
recorded on the device and raised by ``compute()`` (see :mod:`~torchmetrics_async.deferred`).

Example:
    >>> import torch
    >>> metric = Perplexity(ignore_index=-100)
    >>> logits = torch.tensor([[[2.0, 0.0], [0.0, 2.0], [1.0, 1.0]]])
    >>> metric(logits, torch.tensor([[0, 1, -100]]))
    tensor(1.1353)
"""

import torch
import torchmetrics.text as tm
from torch import Tensor

from torchmetrics_async._torchmetrics import _check_shape_and_type_consistency
from torchmetrics_async.batch_stats import BatchStats, SyncFreeBatchStats

__all__ = ["Perplexity", "perplexity_stats"]

# Deferred-check state name and what compute() raises for it (torchmetrics fails in update: IndexError on the CPU,
# with torch's "index ... is out of bounds" message, which names the value: a host read).
INVALID_TARGET = "invalid_target"
TARGET_OUTSIDE_VOCABULARY_MESSAGE = (
    "Detected `target` values outside the vocabulary: expected class indices in [0, vocab_size), vocab_size being"
    " `preds.shape[-1]`, or `ignore_index`."
)


def perplexity_stats(preds: Tensor, target: Tensor, ignore_index: int | None) -> tuple[Tensor, Tensor, Tensor]:
    """Torchmetrics' ``_perplexity_update`` without host syncs, and whether a counted target is out of the vocabulary.

    Args:
        preds: logits ``(batch_size, seq_len, vocab_size)``.
        target: token indices ``(batch_size, seq_len)``, int64.
        ignore_index: a target value that does not count.

    Returns:
        The summed negative log-probability of the counted tokens, their count, and the out-of-vocabulary flag.

    Example:
        >>> total, count, bad = perplexity_stats(torch.zeros(1, 2, 4), torch.tensor([[1, 3]]), None)
        >>> total, count, bool(bad)
        (tensor(2.7726), tensor(2), False)
    """
    _check_shape_and_type_consistency(preds, target)
    vocab = preds.shape[-1]
    probs = torch.nn.functional.softmax(preds.reshape(-1, vocab), dim=1)
    target = target.reshape(-1)
    keep = None if ignore_index is None else target != ignore_index
    outside = (target < 0) | (target >= vocab)
    if keep is not None:
        outside = outside & keep
    # Clamped: an ignored or invalid target never indexes out of bounds (the latter is reported by the check).
    picked = probs.gather(1, target.clamp(0, max(vocab - 1, 0)).unsqueeze(1)).squeeze(1)
    if keep is None:
        return -picked.log().sum(), torch.full((), target.numel(), device=target.device), outside.any()
    # An ignored token contributes log(1) = 0, with no gradient (a log of an underflowed 0 would give NaN ones).
    return -torch.where(keep, picked, 1.0).log().sum(), keep.sum(), outside.any()


class Perplexity(SyncFreeBatchStats, tm.Perplexity):
    """No host sync in ``update()`` or ``forward()``."""

    _stat_states = ("total_log_probs", "count")

    def _deferred_checks(self) -> dict[str, str]:
        return {INVALID_TARGET: TARGET_OUTSIDE_VOCABULARY_MESSAGE}

    def _batch_stats(self, preds: Tensor, target: Tensor) -> BatchStats:
        total, count, outside = perplexity_stats(preds, target, self.ignore_index)
        return BatchStats((total, count), {INVALID_TARGET: outside})

    def _batch_value(self, stats: BatchStats) -> Tensor:
        # torchmetrics adds the batch into fresh states (the metric's dtype) and computes from them.
        total, count = stats.values
        return super()._batch_value(
            BatchStats((total.to(self.total_log_probs.dtype), count.to(self.count.dtype)), stats.violations)
        )
