"""Sync-free ``TweedieDevianceScore``: the domain checks deferred to ``compute()``, the count a Python int."""

import torch
import torchmetrics.regression as tm
from torch import Tensor

from torchmetrics_async._torchmetrics import _check_same_shape, tweedie_domain_message
from torchmetrics_async.batch_stats import BatchStats
from torchmetrics_async.regression.divergence import safe_xlogy
from torchmetrics_async.regression.sums import SyncFreeSums

__all__ = ["OUTSIDE_DOMAIN", "TweedieDevianceScore", "outside_domain"]

#: The deferred check's state (see torchmetrics_async.deferred).
OUTSIDE_DOMAIN = "outside_domain"


def outside_domain(preds: Tensor, targets: Tensor, power: float) -> Tensor | None:
    """0-dim bool: some input lies outside the power's domain (torchmetrics' conditions, no read); ``None`` for power 0.

    Example:
        >>> outside_domain(torch.tensor([1.0, -1.0]), torch.tensor([1.0, 1.0]), power=2)
        tensor(True)
    """
    if power == 0:
        return None
    preds_bad = torch.any(preds <= 0)
    if power < 0:
        return preds_bad
    if power == 1 or 1 < power < 2:
        return preds_bad | torch.any(targets < 0)
    return preds_bad | torch.any(targets <= 0)


def _deviance(preds: Tensor, targets: Tensor, power: float) -> Tensor:
    """Torchmetrics' deviance per element, without its checks."""
    if power == 0:
        return torch.pow(targets - preds, exponent=2)
    if power == 1:
        return 2 * (safe_xlogy(targets, targets / preds) + preds - targets)
    if power == 2:
        return 2 * (torch.log(preds / targets) + (targets / preds) - 1)
    zero_tensor = torch.zeros(preds.shape, device=preds.device)  # float32, as torchmetrics' (it promotes alike)
    term_1 = torch.pow(torch.max(targets, zero_tensor), 2 - power) / ((1 - power) * (2 - power))
    term_2 = targets * torch.pow(preds, 1 - power) / (1 - power)
    term_3 = torch.pow(preds, 2 - power) / (2 - power)
    return 2 * (term_1 - term_2 + term_3)


class TweedieDevianceScore(SyncFreeSums, tm.TweedieDevianceScore):
    """No host sync in ``update()`` or ``forward()``."""

    _stat_states = ("sum_deviance_score", "num_observations")

    def _deferred_checks(self) -> dict[str, str]:
        message = tweedie_domain_message(self.power)
        return {} if message is None else {OUTSIDE_DOMAIN: message}

    def _batch_stats(self, preds: Tensor, targets: Tensor) -> BatchStats:
        _check_same_shape(preds, targets)
        deviance = _deviance(preds, targets, self.power)
        outside = outside_domain(preds, targets, self.power)
        violations = {} if outside is None else {OUTSIDE_DOMAIN: outside}
        return BatchStats((torch.sum(deviance), deviance.numel()), violations)

    def update(self, preds: Tensor, targets: Tensor) -> None:
        """Accumulate a batch without a host sync; inputs outside the domain are reported by ``compute()``."""
        self._update_from_stats(preds, targets)
