"""Sync-free image metrics: ``SpatialCorrelationCoefficient`` and ``VisualInformationFidelity``, torchmetrics' values.

torchmetrics clamps and masks their local statistics with boolean-mask writes (``x[x < 0] = 0``: a ``nonzero`` per
write, 12 per update for 3 channels in SCC, 108 in VIF), copies SCC's CPU filter to the device in every update and
creates VIF's constants with ``torch.tensor(..., device=...)``. Here every boolean-mask write is a ``torch.where`` of
the same values, SCC's filter is copied to the metric's device when the metric moves, and VIF's constants are made by
fill kernels. The channel loops and every other op are torchmetrics' own, in its order, so the values are its own.

Example:
    >>> import torch
    >>> metric = SpatialCorrelationCoefficient()
    >>> x = torch.rand(2, 1, 16, 16, generator=torch.Generator().manual_seed(0))
    >>> metric(x, x)
    tensor(1.)
"""

import torch
import torchmetrics.image as tm
from torch import Tensor
from torch.nn.functional import conv2d

from torchmetrics_async._torchmetrics import (
    _hp_2d_laplacian,
    _local_variance_covariance,
    _scc_update,
    _vif_filter,
    check_same_shape,
)
from torchmetrics_async.batch_stats import BatchStats, SyncFreeBatchStats

__all__ = ["SpatialCorrelationCoefficient", "VisualInformationFidelity", "scc_per_channel", "vif_per_channel"]


def scc_per_channel(preds: Tensor, target: Tensor, hp_filter: Tensor, window_size: int) -> Tensor:
    """Torchmetrics' ``_scc_per_channel_compute`` with ``torch.where`` for its boolean-mask writes.

    Example:
        >>> x = torch.rand(1, 1, 8, 8, generator=torch.Generator().manual_seed(0))
        >>> scc_per_channel(x, x, torch.tensor([[[[0.0, 1.0], [1.0, 0.0]]]]), 4).mean()
        tensor(1.)
    """
    window = torch.ones(size=(1, 1, window_size, window_size), dtype=preds.dtype, device=preds.device)
    window = window / (window_size**2)
    preds_hp, target_hp = _hp_2d_laplacian(preds, hp_filter), _hp_2d_laplacian(target, hp_filter)
    preds_var, target_var, target_preds_cov = _local_variance_covariance(preds_hp, target_hp, window)
    preds_var = torch.where(preds_var < 0, 0, preds_var)
    target_var = torch.where(target_var < 0, 0, target_var)
    den = torch.sqrt(target_var) * torch.sqrt(preds_var)
    zero = den == 0
    return torch.where(zero, 0, target_preds_cov / torch.where(zero, 1, den))


class SpatialCorrelationCoefficient(SyncFreeBatchStats, tm.SpatialCorrelationCoefficient):
    """No host sync in ``update()``/``forward()``: ``torch.where`` for the masks; the filter moves with the metric."""

    _stat_states = ("scc_score", "total")

    def _set_constants(self) -> None:
        super()._set_constants()
        self._device_filter(self.device)

    def _device_filter(self, device: torch.device) -> Tensor:
        """``hp_filter`` as float32 on ``device``, copied when the metric moves (or ``hp_filter`` is replaced)."""
        state = self.__dict__
        copied = state.get("_hp_filter_on_device")
        if copied is None or state["_hp_filter_source"] is not self.hp_filter or copied.device != device:
            state["_hp_filter_source"], state["_hp_filter_on_device"] = (
                self.hp_filter,
                self.hp_filter.to(device, torch.float32),
            )
        return state["_hp_filter_on_device"]

    def _batch_stats(self, preds: Tensor, target: Tensor) -> BatchStats:
        hp_filter = self._device_filter(preds.device)
        preds, target, hp_filter = _scc_update(preds, target, hp_filter, self.ws)
        channels = [
            scc_per_channel(preds[:, i].unsqueeze(1), target[:, i].unsqueeze(1), hp_filter, self.ws)
            for i in range(preds.size(1))
        ]
        score = torch.sum(torch.mean(torch.cat(channels, dim=1), dim=[1, 2, 3]))
        return BatchStats((score, float(preds.size(0))), {})


def vif_per_channel(preds: Tensor, target: Tensor, sigma_n_sq: float) -> Tensor:
    """Torchmetrics' ``_vif_per_channel`` with ``torch.where`` for its boolean-mask writes, constants by fill kernels.

    Example:
        >>> x = torch.rand(1, 41, 41, generator=torch.Generator().manual_seed(0))
        >>> vif_per_channel(x, x, 2.0)
        tensor([1.])
    """
    dtype, device = preds.dtype, preds.device
    preds, target = preds.unsqueeze(1), target.unsqueeze(1)
    eps = torch.full((), 1e-10, dtype=dtype, device=device)
    sigma_n_sq = torch.full((), sigma_n_sq, dtype=dtype, device=device)
    preds_vif = torch.zeros(preds.size(0), dtype=dtype, device=device)
    target_vif = torch.zeros(preds.size(0), dtype=dtype, device=device)
    for scale in range(4):
        n = 2.0 ** (4 - scale) + 1
        kernel = _vif_filter(n, n / 5, dtype=dtype, device=device)[None, None, :]
        if scale > 0:
            target = conv2d(target, kernel)[:, :, ::2, ::2]
            preds = conv2d(preds, kernel)[:, :, ::2, ::2]
        mu_target, mu_preds = conv2d(target, kernel), conv2d(preds, kernel)
        mu_target_sq, mu_preds_sq, mu_target_preds = mu_target**2, mu_preds**2, mu_target * mu_preds
        sigma_target_sq = torch.clamp(conv2d(target**2, kernel) - mu_target_sq, min=0.0)
        sigma_preds_sq = torch.clamp(conv2d(preds**2, kernel) - mu_preds_sq, min=0.0)
        sigma_target_preds = conv2d(target * preds, kernel) - mu_target_preds
        g = sigma_target_preds / (sigma_target_sq + eps)
        sigma_v_sq = sigma_preds_sq - g * sigma_target_preds
        mask = sigma_target_sq < eps
        g = torch.where(mask, 0, g)
        sigma_v_sq = torch.where(mask, sigma_preds_sq, sigma_v_sq)
        sigma_target_sq = torch.where(mask, 0, sigma_target_sq)
        mask = sigma_preds_sq < eps
        g, sigma_v_sq = torch.where(mask, 0, g), torch.where(mask, 0, sigma_v_sq)
        mask = g < 0
        sigma_v_sq, g = torch.where(mask, sigma_preds_sq, sigma_v_sq), torch.where(mask, 0, g)
        sigma_v_sq = torch.clamp(sigma_v_sq, min=eps)
        preds_vif += torch.sum(torch.log10(1.0 + (g**2.0) * sigma_target_sq / (sigma_v_sq + sigma_n_sq)), dim=[1, 2, 3])
        target_vif += torch.sum(torch.log10(1.0 + sigma_target_sq / sigma_n_sq), dim=[1, 2, 3])
    return preds_vif / target_vif


class VisualInformationFidelity(SyncFreeBatchStats, tm.VisualInformationFidelity):
    """No host sync in ``update()`` or ``forward()``: ``torch.where`` for the masks; shape mismatches raise at once."""

    _stat_states = ("vif_score",)

    def _batch_stats(self, preds: Tensor, target: Tensor) -> BatchStats:
        check_same_shape(preds, target)  # torchmetrics' update broadcasts a batch of 1 across the other
        channels = preds.size(1)
        scores = [vif_per_channel(preds[:, i, :, :], target[:, i, :, :], self.sigma_n_sq) for i in range(channels)]
        return BatchStats((torch.mean(torch.stack(scores), 0) if channels > 1 else torch.cat(scores),), {})
