"""Sync-free R2Score, ExplainedVariance, PearsonCorrCoef, ConcordanceCorrCoef, NormalizedRootMeanSquaredError.

torchmetrics' ``forward`` runs ``compute`` per batch, with 4 to 10 host reads; here the batch value is the same
arithmetic with ``torch.where`` and a Python count. ``compute()`` keeps torchmetrics' code, reads and warning.
"""

import math
from typing import Any

import torch
import torchmetrics.regression as tm
from torch import Tensor

from torchmetrics_async._torchmetrics import (
    R2_ADJUSTED_DIVISION_MESSAGE,
    R2_ADJUSTED_TOO_LARGE_MESSAGE,
    R2_TOO_FEW_SAMPLES_MESSAGE,
    _explained_variance_update,
    _final_aggregation,
    _mean_squared_error_update,
    _pearson_corrcoef_update,
    _r2_score_update,
    rank_zero_warn,
)
from torchmetrics_async.batch_stats import BatchStats, SyncFreeBatchStats, assign_state
from torchmetrics_async.deferred import FORWARD_BATCH
from torchmetrics_async.metric import SyncFreeMixin
from torchmetrics_async.regression.sums import SyncFreeSums

__all__ = [
    "ConcordanceCorrCoef",
    "ExplainedVariance",
    "NormalizedRootMeanSquaredError",
    "PearsonCorrCoef",
    "R2Score",
    "explained_variance_value",
    "pearson_value",
    "r2_value",
]

#: torchmetrics' running-moment states of PearsonCorrCoef/ConcordanceCorrCoef, in ``_pearson_corrcoef_update``'s order.
MOMENTS = ("mean_x", "mean_y", "max_abs_dev_x", "max_abs_dev_y", "var_x", "var_y", "corr_xy", "n_total")


def _states(metric: Any) -> tuple[Tensor, ...]:
    return tuple(getattr(metric, name) for name in metric._stat_states)


def _scores(
    numerator: Tensor, denominator: Tensor, nonzero: tuple[Tensor, Tensor], like: Tensor, multioutput: str
) -> Tensor:
    """R2's and explained variance's ``1 - numerator / denominator`` (1 or 0 where zero), averaged: no mask writes."""
    nonzero_numerator, nonzero_denominator = nonzero
    scores = torch.ones_like(like)
    ratio = (1 - numerator / denominator).to(scores.dtype)
    scores = torch.where(nonzero_numerator & nonzero_denominator, ratio, scores)
    scores = scores.masked_fill(nonzero_numerator & ~nonzero_denominator, 0.0)
    if multioutput == "raw_values":
        return scores
    if multioutput == "uniform_average":
        return torch.mean(scores)
    return torch.sum(denominator / torch.sum(denominator) * scores)


def r2_value(
    sum_squared_obs: Tensor,
    sum_obs: Tensor,
    rss: Tensor,
    num_obs: int | Tensor,
    adjusted: int = 0,
    multioutput: str = "uniform_average",
) -> Tensor:
    """Torchmetrics' ``_r2_score_compute`` with ``torch.where`` for masks; ``num_obs`` a tensor: NaN where it raises.

    Example:
        >>> r2_value(torch.tensor(5.0), torch.tensor(3.0), torch.tensor(0.5), 2)
        tensor(0.)
    """
    host_count = not isinstance(num_obs, Tensor)
    if host_count and num_obs < 2:
        raise ValueError(R2_TOO_FEW_SAMPLES_MESSAGE)
    mean_obs = sum_obs / num_obs
    tss = sum_squared_obs - sum_obs * mean_obs
    nonzero_rss = ~torch.isclose(rss, torch.zeros_like(rss), atol=1e-4)
    nonzero_tss = ~torch.isclose(tss, torch.zeros_like(tss), atol=1e-4)
    r2 = _scores(rss, tss, (nonzero_rss, nonzero_tss), rss, multioutput)
    if adjusted == 0:
        return r2 if host_count else r2.masked_fill(num_obs < 2, math.nan)
    if host_count:
        if adjusted > num_obs - 1:
            rank_zero_warn(R2_ADJUSTED_TOO_LARGE_MESSAGE, UserWarning)
        elif adjusted == num_obs - 1:
            rank_zero_warn(R2_ADJUSTED_DIVISION_MESSAGE, UserWarning)
        else:
            return 1 - (1 - r2) * (num_obs - 1) / (num_obs - adjusted - 1)
        return r2
    adjusted_r2 = torch.where(num_obs - 1 > adjusted, 1 - (1 - r2) * (num_obs - 1) / (num_obs - adjusted - 1), r2)
    return adjusted_r2.masked_fill(num_obs < 2, math.nan)


def explained_variance_value(
    num_obs: int | Tensor,
    sum_error: Tensor,
    sum_squared_error: Tensor,
    sum_target: Tensor,
    sum_squared_target: Tensor,
    multioutput: str = "uniform_average",
) -> Tensor:
    """Torchmetrics' ``_explained_variance_compute`` with ``torch.where`` instead of its masked assignments.

    Example:
        >>> explained_variance_value(2, torch.tensor(0.0), torch.tensor(0.5), torch.tensor(2.0), torch.tensor(4.0))
        tensor(0.7500)
    """
    diff_avg = sum_error / num_obs
    numerator = sum_squared_error / num_obs - (diff_avg * diff_avg)
    target_avg = sum_target / num_obs
    denominator = sum_squared_target / num_obs - (target_avg * target_avg)
    return _scores(numerator, denominator, (numerator != 0, denominator != 0), diff_avg, multioutput)


def pearson_value(
    max_abs_dev_x: Tensor, max_abs_dev_y: Tensor, var_x: Tensor, var_y: Tensor, corr_xy: Tensor, nb: Tensor
) -> Tensor:
    """Torchmetrics' ``_pearson_corrcoef_compute`` without its host reads (and so without its warning).

    Example:
        >>> ones = torch.ones(1)
        >>> pearson_value(ones, ones, ones, ones, -ones, 2 * ones)
        tensor(-1.)
    """
    var_x = var_x / (nb - 1)
    var_y = var_y / (nb - 1)
    corr_xy = corr_xy / (nb - 1)
    if var_x.dtype == torch.float16 and var_x.device == torch.device("cpu"):
        var_x = var_x.bfloat16()
        var_y = var_y.bfloat16()
    var_x = var_x * torch.pow(max_abs_dev_x, -2)
    var_y = var_y * torch.pow(max_abs_dev_y, -2)
    corr_xy = corr_xy / (max_abs_dev_x * max_abs_dev_y)
    bound = math.sqrt(torch.finfo(var_x.dtype).eps)
    invalid = (
        (var_x < bound) | (var_y < bound) | ~torch.isfinite(var_x) | ~torch.isfinite(var_y) | ~torch.isfinite(corr_xy)
    )
    corrcoef = (corr_xy / (var_x * var_y).sqrt()).to(corr_xy.dtype)
    return torch.clamp(corrcoef.masked_fill(invalid, math.nan), -1.0, 1.0).squeeze()


def concordance_value(mean_x: Tensor, mean_y: Tensor, *moments: Tensor) -> Tensor:
    """Torchmetrics' ``_concordance_corrcoef_compute`` on :func:`pearson_value` (its ``moments``): no host read."""
    pearson = pearson_value(*moments)
    _, _, var_x, var_y, _, nb = moments
    var_x = var_x / (nb - 1)
    var_y = var_y / (nb - 1)
    return 2.0 * pearson * var_x.sqrt() * var_y.sqrt() / (var_x + var_y + (mean_x - mean_y) ** 2)


class _NoReadInForward:
    """``compute()`` inside the generic ``forward`` (of a subclass overriding it): ``_value`` of the states, no read."""

    def compute(self) -> Tensor:
        """Torchmetrics' ``compute`` (inside an overriding subclass's ``forward``: without host reads)."""
        if self.__dict__.get(FORWARD_BATCH) is not None:
            return self._value(_states(self))
        return super().compute()  # type: ignore[misc]


class R2Score(_NoReadInForward, SyncFreeSums, tm.R2Score):
    """No host sync in ``update()`` or ``forward()``."""

    _stat_states = ("sum_squared_error", "sum_error", "residual", "total")
    _reassigned_states = frozenset(_stat_states)
    _sums_update = staticmethod(_r2_score_update)

    def _batch_value(self, stats: BatchStats) -> Tensor:
        sum_squared_obs, sum_obs, rss, _ = self._batch_states(stats[0])
        return r2_value(sum_squared_obs, sum_obs, rss, stats[0][3], self.adjusted, self.multioutput)

    def _value(self, states: tuple[Tensor, ...]) -> Tensor:
        return r2_value(*states, self.adjusted, self.multioutput)


class ExplainedVariance(_NoReadInForward, SyncFreeSums, tm.ExplainedVariance):
    """No host sync in ``update()`` or ``forward()``."""

    _stat_states = ("num_obs", "sum_error", "sum_squared_error", "sum_target", "sum_squared_target")
    _reassigned_states = frozenset(_stat_states)
    _sums_update = staticmethod(_explained_variance_update)

    def _batch_value(self, stats: BatchStats) -> Tensor:
        return self._value(self._batch_states(stats[0]))

    def _value(self, states: tuple[Tensor, ...]) -> Tensor:
        return explained_variance_value(*states, self.multioutput)


class _SyncFreeMoments(_NoReadInForward, SyncFreeBatchStats):
    """Running moments updated in place; the batch value (``_from_moments``) from the batch's own, no host read."""

    _stat_states = MOMENTS

    def update(self, preds: Tensor, target: Tensor) -> None:
        """Fold a batch into the running moments (torchmetrics' update, written in place), without a host sync."""
        self._fold(preds, target)

    def _fold(self, preds: Tensor, target: Tensor) -> None:
        moments = _pearson_corrcoef_update(preds, target, *_states(self), self.num_outputs)
        for name, value in zip(MOMENTS, moments, strict=True):
            assign_state(self, name, value)

    def _batch_stats(self, preds: Tensor, target: Tensor) -> BatchStats:
        defaults = (self._defaults[name] for name in MOMENTS)
        return BatchStats((preds, target, _pearson_corrcoef_update(preds, target, *defaults, self.num_outputs)), {})

    def _merge_stats(self, stats: BatchStats) -> None:
        preds, target, _ = stats[0]
        self._fold(preds, target)

    def _batch_value(self, stats: BatchStats) -> Tensor:
        return self._value(stats[0][2])

    def _value(self, moments: tuple[Tensor, ...]) -> Tensor:
        """Torchmetrics' ``compute`` on ``moments`` (stacked ones aggregated first), without reads."""
        mean_x = moments[0]
        if (self.num_outputs == 1 and mean_x.numel() > 1) or (self.num_outputs > 1 and mean_x.ndim > 1):
            moments = _final_aggregation(*moments)
        return self._from_moments(*moments)


class PearsonCorrCoef(_SyncFreeMoments, tm.PearsonCorrCoef):
    """No host sync in ``update()`` or ``forward()``, which omits the zero-variance warning."""

    def _from_moments(self, *moments: Tensor) -> Tensor:
        return pearson_value(*moments[2:])


class ConcordanceCorrCoef(_SyncFreeMoments, tm.ConcordanceCorrCoef):
    """No host sync in ``update()`` or ``forward()``, which omits the zero-variance warning."""

    def _from_moments(self, *moments: Tensor) -> Tensor:
        return concordance_value(*moments)


class NormalizedRootMeanSquaredError(SyncFreeMixin, tm.NormalizedRootMeanSquaredError):
    """No host sync in ``update()`` or ``forward()``."""

    def update(self, preds: Tensor, target: Tensor) -> None:
        """Torchmetrics' ``update``, the states it rebinds kept in place: compiled code need not recompile."""
        sum_squared_error, num_obs = _mean_squared_error_update(preds, target, self.num_outputs)
        self.sum_squared_error += sum_squared_error
        target = target.view(-1) if self.num_outputs == 1 else target
        assign_state(self, "min_val", torch.minimum(target.min(dim=0).values, self.min_val))
        assign_state(self, "max_val", torch.maximum(target.max(dim=0).values, self.max_val))
        self.target_squared += (target**2).sum(dim=0)
        new_mean = (self.total * self.mean_val + target.sum(dim=0)) / (self.total + num_obs)
        self.total += num_obs
        new_var = ((target - new_mean) * (target - self.mean_val)).sum(dim=0)  # the old mean: assign it after
        assign_state(self, "mean_val", new_mean)
        self.var_val += new_var
