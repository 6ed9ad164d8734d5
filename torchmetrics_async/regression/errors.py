"""Sync-free mean-error regression metrics: one-pass ``forward`` on :mod:`~torchmetrics_async.regression.sums`."""

import torch
import torchmetrics.regression as tm
from torch import Tensor

from torchmetrics_async._torchmetrics import (
    _check_data_shape_to_num_outputs,
    _check_same_shape,
    _critical_success_index_update,
    _crps_update,
    _mean_absolute_percentage_error_update,
    _mean_squared_error_update,
    _mean_squared_log_error_update,
    _minkowski_distance_update,
    _r2_score_update,
    _symmetric_mean_absolute_percentage_error_update,
    _unsqueeze_tensors,
    _weighted_mean_absolute_percentage_error_update,
)
from torchmetrics_async.batch_stats import BatchStats
from torchmetrics_async.regression.sums import SyncFreeSums

__all__ = [
    "ContinuousRankedProbabilityScore",
    "CriticalSuccessIndex",
    "LogCoshError",
    "MeanAbsoluteError",
    "MeanAbsolutePercentageError",
    "MeanSquaredError",
    "MeanSquaredLogError",
    "MinkowskiDistance",
    "RelativeSquaredError",
    "SymmetricMeanAbsolutePercentageError",
    "WeightedMeanAbsolutePercentageError",
]


class MeanSquaredError(SyncFreeSums, tm.MeanSquaredError):
    """No host sync in ``update()`` or ``forward()``."""

    _stat_states = ("sum_squared_error", "total")

    def _batch_stats(self, preds: Tensor, target: Tensor) -> BatchStats:
        return BatchStats(_mean_squared_error_update(preds, target, num_outputs=self.num_outputs), {})


class MeanAbsoluteError(SyncFreeSums, tm.MeanAbsoluteError):
    """No host sync in ``update()`` or ``forward()``."""

    _stat_states = ("sum_abs_error", "total")

    def _batch_stats(self, preds: Tensor, target: Tensor) -> BatchStats:
        # torchmetrics' _mean_absolute_error_update minus `if x.is_floating_point` (always true; Dynamo fails on it)
        _check_same_shape(preds, target)
        if self.num_outputs == 1:
            preds, target = preds.view(-1), target.view(-1)
        return BatchStats((torch.sum(torch.abs(preds - target), dim=0), target.shape[0]), {})


class MeanAbsolutePercentageError(SyncFreeSums, tm.MeanAbsolutePercentageError):
    """No host sync in ``update()`` or ``forward()``."""

    _stat_states = ("sum_abs_per_error", "total")
    _sums_update = staticmethod(_mean_absolute_percentage_error_update)


class SymmetricMeanAbsolutePercentageError(SyncFreeSums, tm.SymmetricMeanAbsolutePercentageError):
    """No host sync in ``update()`` or ``forward()``."""

    _stat_states = ("sum_abs_per_error", "total")
    _sums_update = staticmethod(_symmetric_mean_absolute_percentage_error_update)


class WeightedMeanAbsolutePercentageError(SyncFreeSums, tm.WeightedMeanAbsolutePercentageError):
    """No host sync in ``update()`` or ``forward()``."""

    _stat_states = ("sum_abs_error", "sum_scale")
    _sums_update = staticmethod(_weighted_mean_absolute_percentage_error_update)


class MeanSquaredLogError(SyncFreeSums, tm.MeanSquaredLogError):
    """No host sync in ``update()`` or ``forward()``."""

    _stat_states = ("sum_squared_log_error", "total")
    _sums_update = staticmethod(_mean_squared_log_error_update)


class LogCoshError(SyncFreeSums, tm.LogCoshError):
    """No host sync in ``update()`` or ``forward()``."""

    _stat_states = ("sum_log_cosh_error", "total")

    def _batch_stats(self, preds: Tensor, target: Tensor) -> BatchStats:
        # torchmetrics' _log_cosh_error_update, the count a Python int (there: torch.tensor(n, device=...), a copy)
        _check_same_shape(preds, target)
        _check_data_shape_to_num_outputs(preds, target, self.num_outputs)
        preds, target = _unsqueeze_tensors(preds, target)
        diff = preds - target
        sum_log_cosh_error = torch.log((torch.exp(diff) + torch.exp(-diff)) / 2).sum(0).squeeze()
        return BatchStats((sum_log_cosh_error, target.shape[0]), {})


class MinkowskiDistance(SyncFreeSums, tm.MinkowskiDistance):
    """No host sync in ``update()`` or ``forward()``."""

    _stat_states = ("minkowski_dist_sum",)

    def _batch_stats(self, preds: Tensor, targets: Tensor) -> BatchStats:
        return BatchStats((_minkowski_distance_update(preds, targets, self.p),), {})

    def update(self, preds: Tensor, targets: Tensor) -> None:  # torchmetrics names the second argument `targets`
        """Accumulate a batch without a host sync."""
        self._update_from_stats(preds, targets)


class RelativeSquaredError(SyncFreeSums, tm.RelativeSquaredError):
    """No host sync in ``update()`` or ``forward()``."""

    _stat_states = ("sum_squared_error", "sum_error", "residual", "total")
    _sums_update = staticmethod(_r2_score_update)


class CriticalSuccessIndex(SyncFreeSums, tm.CriticalSuccessIndex):
    """No host sync in ``update()`` or ``forward()``."""

    @property
    def _stat_states(self) -> tuple[str, ...]:  # type: ignore[override]
        if self.keep_sequence_dim is None:
            return ("hits", "misses", "false_alarms")
        return ("hits_list", "misses_list", "false_alarms_list")

    def _batch_stats(self, preds: Tensor, target: Tensor) -> BatchStats:
        stats = _critical_success_index_update(preds, target, self.threshold, self.keep_sequence_dim)
        return BatchStats(stats, {})


class ContinuousRankedProbabilityScore(SyncFreeSums, tm.ContinuousRankedProbabilityScore):
    """No host sync in ``update()`` or ``forward()``."""

    _stat_states = ("score", "total")

    def _batch_stats(self, preds: Tensor, target: Tensor) -> BatchStats:
        batch_size, diff, ensemble_sum = _crps_update(preds, target)
        return BatchStats((torch.sum(diff - ensemble_sum), batch_size), {})
