"""Sync-free KL and Jensen-Shannon divergences: torchmetrics' ``_safe_xlogy`` mask write done with ``masked_fill``."""

import torch
import torchmetrics.regression as tm
from torch import Tensor

from torchmetrics_async._torchmetrics import _check_same_shape
from torchmetrics_async.batch_stats import BatchStats
from torchmetrics_async.regression.sums import SyncFreeSums

__all__ = ["JensenShannonDivergence", "KLDivergence", "kl_divergence_measures", "safe_xlogy"]

# torchmetrics' log(2) of the log-probability mean: a float32 CPU scalar, whatever the inputs' dtype.
_LOG_2 = torch.log(torch.tensor(2.0))


def _checked(p: Tensor, q: Tensor, log_prob: bool) -> tuple[Tensor, Tensor, int]:
    """Torchmetrics' checks of two ``[N, d]`` distributions; them normalized (unless ``log_prob``) and ``N``."""
    _check_same_shape(p, q)
    if p.ndim != 2 or q.ndim != 2:
        raise ValueError(f"Expected both p and q distribution to be 2D but got {p.ndim} and {q.ndim} respectively")
    if not log_prob:
        p = p / p.sum(axis=-1, keepdim=True)  # type: ignore[call-overload]
        q = q / q.sum(axis=-1, keepdim=True)  # type: ignore[call-overload]
    return p, q, p.shape[0]


def safe_xlogy(x: Tensor, y: Tensor) -> Tensor:
    """``x * log(y)``, 0 where ``x == 0``: torchmetrics' ``_safe_xlogy`` without its boolean-mask assignment.

    Example:
        >>> safe_xlogy(torch.tensor([0.0, 1.0]), torch.tensor([0.0, 1.0]))
        tensor([0., 0.])
    """
    return (x * torch.log(y)).masked_fill(x == 0, 0.0)


def kl_divergence_measures(p: Tensor, q: Tensor, log_prob: bool) -> tuple[Tensor, int]:
    """Torchmetrics' ``_kld_update`` with :func:`safe_xlogy`: the divergence per observation ``[N, d]`` and ``N``.

    Example:
        >>> kl_divergence_measures(torch.tensor([[0.5, 0.5]]), torch.tensor([[0.5, 0.5]]), log_prob=False)
        (tensor([0.]), 1)
    """
    p, q, total = _checked(p, q, log_prob)
    if log_prob:
        return torch.sum(p.exp() * (p - q), axis=-1), total  # type: ignore[call-overload]
    return safe_xlogy(p, p / q).sum(axis=-1), total  # type: ignore[call-overload]


def _js_divergence_measures(p: Tensor, q: Tensor, log_prob: bool) -> tuple[Tensor, int]:
    """Torchmetrics' ``_jsd_update`` on :func:`kl_divergence_measures`."""
    p, q, total = _checked(p, q, log_prob)
    mean = torch.logsumexp(torch.stack([p, q]), dim=0) - _LOG_2 if log_prob else (p + q) / 2
    measures = 0.5 * kl_divergence_measures(p, mean, log_prob)[0] + 0.5 * kl_divergence_measures(q, mean, log_prob)[0]
    return measures, total


class _SyncFreeDivergence(SyncFreeSums):
    """A divergence per observation (``_measures``): summed or kept in a list (``"none"``), as torchmetrics."""

    _reassigned_states = frozenset({"measures"})  # torchmetrics: `self.measures = self.measures + measures.sum()`

    @property
    def _stat_states(self) -> tuple[str, ...]:  # type: ignore[override]
        return ("measures",) if self.reduction in ("none", None) else ("measures", "total")

    def _batch_stats(self, p: Tensor, q: Tensor) -> BatchStats:
        measures, total = self._measures(p, q)
        if self.reduction in ("none", None):
            return BatchStats((measures,), {})
        return BatchStats((measures.sum(), total), {})

    def update(self, p: Tensor, q: Tensor) -> None:
        """Accumulate a batch of distributions without a host sync."""
        self._update_from_stats(p, q)


class KLDivergence(_SyncFreeDivergence, tm.KLDivergence):
    """No host sync in ``update()`` or ``forward()``."""

    def _measures(self, p: Tensor, q: Tensor) -> tuple[Tensor, int]:
        return kl_divergence_measures(p, q, self.log_prob)


class JensenShannonDivergence(_SyncFreeDivergence, tm.JensenShannonDivergence):
    """No host sync in ``update()`` or ``forward()``."""

    def _measures(self, p: Tensor, q: Tensor) -> tuple[Tensor, int]:
        return _js_divergence_measures(p, q, self.log_prob)
