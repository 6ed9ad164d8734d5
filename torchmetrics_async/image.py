"""Sync-free image metrics, torchmetrics' values: each overrides only what syncs in torchmetrics' class.

Boolean-mask writes become ``torch.where`` (in torchmetrics' op order), indexing by CPU tensors and Python ``max()`` of
tensors become device ops, and constants reach the metric's device once, not per update: each function and class
says which.

Example:
    >>> import torch
    >>> metric = SpatialCorrelationCoefficient()
    >>> x = torch.rand(2, 1, 16, 16, generator=torch.Generator().manual_seed(0))
    >>> metric(x, x)
    tensor(1.)
"""

import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
import torchmetrics.image as tm
from torch import Tensor
from torch.nn.functional import conv2d

from torchmetrics_async._torchmetrics import (
    _check_same_shape,
    _get_normalized_sim_and_cs,
    _hp_2d_laplacian,
    _local_variance_covariance,
    _rase_compute,
    _scc_update,
    _ssim_check_inputs,
    _ssim_update,
    _uniform_weight_bias_conv2d,
    _vif_filter,
    check_same_shape,
    dim_zero_cat,
)
from torchmetrics_async.batch_stats import BatchStats, SyncFreeBatchStats
from torchmetrics_async.metric import SyncFreeMixin

__all__ = [
    "MultiScaleStructuralSimilarityIndexMeasure",
    "PeakSignalNoiseRatioWithBlockedEffect",
    "RelativeAverageSpectralError",
    "RootMeanSquaredErrorUsingSlidingWindow",
    "SpatialCorrelationCoefficient",
    "StructuralSimilarityIndexMeasure",
    "VisualInformationFidelity",
    "block_effect",
    "image_range",
    "scc_per_channel",
    "vif_per_channel",
]


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
            state["_hp_filter_on_device"] = self.hp_filter.to(device, torch.float32)
            state["_hp_filter_source"] = self.hp_filter
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
        # torchmetrics' kernels reject differing dtypes, except an empty batch whose `preds` dtype holds `target`'s
        # (its NaN); an empty float32 / float64 batch it rejects only in an index put: here at once, by name.
        if preds.dtype != target.dtype and (
            preds.numel() or torch.promote_types(preds.dtype, target.dtype) != preds.dtype
        ):
            raise RuntimeError(f"Expected `preds` and `target` of one dtype, got {preds.dtype} and {target.dtype}.")
        channels = preds.size(1)
        scores = [vif_per_channel(preds[:, i, :, :], target[:, i, :, :], self.sigma_n_sq) for i in range(channels)]
        return BatchStats((torch.mean(torch.stack(scores), 0) if channels > 1 else torch.cat(scores),), {})


def uniform_filter(x: Tensor, window_size: int) -> Tensor:
    """Torchmetrics' ``_uniform_filter``, its reflection padding by ``flip`` (torchmetrics: CPU index tensors)."""
    pad, outer = window_size // 2, window_size % 2
    for dim in (2, 3):  # torchmetrics' _single_dimension_pad: `pad` leading and `pad + outer - 1` trailing, mirrored
        size = x.shape[dim]
        head = x.narrow(dim, 0, pad).flip(dim)
        tail = x.narrow(dim, size - (pad + outer - 1), pad + outer - 1).flip(dim)
        x = torch.cat((head, x, tail), dim)
    weight, bias = _uniform_weight_bias_conv2d(x, window_size)
    return torch.cat([F.conv2d(x[:, c].unsqueeze(1), weight, bias, padding=0) for c in range(x.shape[1])], dim=1)


def rmse_sw_map(preds: Tensor, target: Tensor, window_size: int) -> Tensor:
    """Torchmetrics' ``_rmse_sw_update`` checks and per-image RMSE map ``(N, C, H, W)``, without a host sync."""
    if preds.dtype != target.dtype:
        raise TypeError(
            f"Expected `preds` and `target` to have the same data type. But got {preds.dtype} and {target.dtype}."
        )
    _check_same_shape(preds, target)
    if len(preds.shape) != 4:
        raise ValueError(f"Expected `preds` and `target` to have BxCxHxW shape. But got {preds.shape}.")
    if round(window_size / 2) >= target.shape[2] or round(window_size / 2) >= target.shape[3]:
        raise ValueError(
            f"Parameter `round(window_size / 2)` is expected to be smaller than {min(target.shape[2], target.shape[3])}"
            f" but got {round(window_size / 2)}."
        )
    return torch.sqrt(uniform_filter((target - preds) ** 2, window_size))


class RootMeanSquaredErrorUsingSlidingWindow(SyncFreeMixin, tm.RootMeanSquaredErrorUsingSlidingWindow):
    """No host sync in ``update()`` or ``forward()``."""

    def update(self, preds: Tensor, target: Tensor) -> None:
        """Torchmetrics' ``update`` with :func:`rmse_sw_map`; a batch it rejects leaves the states as they were."""
        if self.rmse_map is None:  # before the checks, as torchmetrics: a rejected first batch sets the map's shape
            self.rmse_map = torch.zeros(target.shape[1:], dtype=target.dtype, device=target.device)
        rmse_map, crop = rmse_sw_map(preds, target, self.window_size), round(self.window_size / 2)
        summed = rmse_map.sum(0)
        if not _fits_in_place(self.rmse_map, summed):
            # torchmetrics fails here after adding the batch's count and RMSE sum; the same error, nothing written
            self.rmse_map.clone().add_(summed)
        self.rmse_val_sum += rmse_map[:, :, crop:-crop, crop:-crop].sum(0).mean()
        self.rmse_map += summed
        self.total_images += target.shape[0]


def _fits_in_place(state: Tensor, batch: Tensor) -> bool:
    """Whether ``state += batch`` works: ``batch`` broadcasts to ``state``'s shape and casts to its dtype."""
    try:
        fits = torch.broadcast_shapes(state.shape, batch.shape) == state.shape
    except RuntimeError:
        return False
    return fits and torch.can_cast(batch.dtype, state.dtype)


class RelativeAverageSpectralError(SyncFreeMixin, tm.RelativeAverageSpectralError):
    """No host sync in ``update()``, ``forward()`` or ``compute()``; shapes that differ are rejected by ``update()``."""

    def update(self, preds: Tensor, target: Tensor) -> None:
        """Torchmetrics' ``update``, after its ``compute``'s shape check (made at once, not at ``compute()``)."""
        if preds.shape != target.shape:
            check_same_shape(preds, target)
        super().update(preds, target)

    def compute(self) -> Tensor:
        """Torchmetrics' ``relative_average_spectral_error`` on the stored images, with :func:`uniform_filter`."""
        preds, target = dim_zero_cat(self.preds), dim_zero_cat(self.target)
        window = self.window_size
        rmse_map = rmse_sw_map(preds, target, window).sum(0)
        target_sum = torch.sum(uniform_filter(target, window) / (window**2), dim=0)
        total = torch.full((), float(target.shape[0]), device=target.device)
        return _rase_compute(rmse_map, target_sum, total, window)


_BAD_INDEX = "tensors used as indices must be long, int, byte or bool tensors"


def block_effect(x: Tensor, block_size: int) -> Tensor:
    """Torchmetrics' ``_compute_bef`` (the blocking effect of grayscale images ``(N, 1, H, W)``) without a host read.

    Example:
        >>> block_effect(torch.zeros(1, 1, 16, 16), 8)
        tensor(0.)
    """
    _, channels, height, width = x.shape
    if channels > 1:
        raise ValueError(f"`psnrb` metric expects grayscale images, but got images with {channels} channels.")
    if block_size == 1 or min(height, width) <= block_size:
        raise IndexError(_BAD_INDEX)  # torchmetrics indexes with an empty (float) index tensor then
    sums = []
    for dim, size in ((3, width), (2, height)):
        block = torch.arange(block_size - 1, size - 1, block_size, device=x.device)
        # The other positions 0 .. size - 2, ascending (as torchmetrics' set of small ints iterates).
        other = torch.arange(size - 1 - block.numel(), device=x.device)
        other = other + other // (block_size - 1)
        sums.append([(x.index_select(dim, i) - x.index_select(dim, i + 1)).pow(2.0).sum() for i in (block, other)])
    (d_b, d_bc), (v_b, v_bc) = sums
    d_b, d_bc = d_b + v_b, d_bc + v_bc
    n_hb, n_vb = height * (width / block_size) - 1, width * (height / block_size) - 1
    d_b = d_b / (n_hb + n_vb)
    d_bc = d_bc / ((height * (width - 1)) - n_hb + (width * (height - 1)) - n_vb)
    t = math.log2(block_size) / math.log2(min(height, width))
    # torchmetrics' `t * (d_b - d_bc)`, `t` 0 unless d_b > d_bc: in the images' dtype (float16 stays float16).
    return torch.where(d_b > d_bc, t * (d_b - d_bc), 0 * (d_b - d_bc))


class PeakSignalNoiseRatioWithBlockedEffect(SyncFreeMixin, tm.PeakSignalNoiseRatioWithBlockedEffect):
    """No host sync in ``update()`` or ``forward()``."""

    def update(self, preds: Tensor, target: Tensor) -> None:
        """Torchmetrics' ``update`` with :func:`block_effect` and the count added as a Python number.

        A batch :func:`block_effect` rejects (RGB, 3-D, a side at most ``block_size``) leaves the states untouched.
        """
        if preds.shape != target.shape:  # torchmetrics broadcasts (a batch of one) or fails in a kernel
            check_same_shape(preds, target)
        if self.clamping_fn is not None:
            preds, target = self.clamping_fn(preds), self.clamping_fn(target)
        bef = block_effect(preds, self.block_size)  # its checks first: torchmetrics adds nothing from a rejected batch
        self.sum_squared_error += torch.sum(torch.pow(preds - target, 2))
        self.bef += bef
        self.total += target.numel()


def image_range(preds: Tensor, target: Tensor, data_range: Any = None) -> Any:
    """``data_range``, or for ``None`` torchmetrics' Python ``max()`` of the two images' ranges, on the device.

    Example:
        >>> image_range(torch.tensor([0.0, 2.0]), torch.tensor([1.0, float("nan")]))  # NaN as Python's max()
        tensor(2.)
    """
    if data_range is not None:
        return data_range
    first, second = preds.max() - preds.min(), target.max() - target.min()
    return torch.where(second > first, second, first)


class StructuralSimilarityIndexMeasure(SyncFreeMixin, tm.StructuralSimilarityIndexMeasure):
    """No host sync in ``update()`` or ``forward()``, also with ``data_range=None``."""

    def update(self, preds: Tensor, target: Tensor) -> None:
        """Torchmetrics' ``update`` with :func:`image_range` for ``data_range=None``."""
        preds, target = _ssim_check_inputs(preds, target)
        data_range = image_range(preds, target, self.data_range)
        similarity = _ssim_update(
            preds,
            target,
            self.gaussian_kernel,
            self.sigma,
            self.kernel_size,
            data_range,
            self.k1,
            self.k2,
            self.return_full_image,
            self.return_contrast_sensitivity,
        )
        if isinstance(similarity, tuple):
            similarity, image = similarity
            self.image_return.append(image)
        if self.reduction in ("elementwise_mean", "sum"):
            self.similarity += similarity.sum()
            self.total += preds.shape[0]
        else:
            self.similarity.append(similarity)


class MultiScaleStructuralSimilarityIndexMeasure(SyncFreeMixin, tm.MultiScaleStructuralSimilarityIndexMeasure):
    """``betas`` copied to the device once; ``gaussian_kernel=False`` still copies ``kernel_size`` once per scale."""

    def _set_constants(self) -> None:
        super()._set_constants()
        self.__dict__["_betas"] = torch.tensor(self.betas, device=self.device).view(-1, 1)

    def update(self, preds: Tensor, target: Tensor) -> None:
        """Torchmetrics' ``update`` (``_multiscale_ssim_update`` inlined), the exponents held on the device."""
        preds, target = _ssim_check_inputs(preds, target)
        ndim, scales, kernel, sigma = preds.ndim - 2, len(self.betas), self.kernel_size, self.sigma
        kernel = kernel if isinstance(kernel, Sequence) else ndim * [kernel]
        sigma = sigma if isinstance(sigma, Sequence) else ndim * [sigma]
        if preds.size()[-1] < 2**scales or preds.size()[-2] < 2**scales:
            raise ValueError(
                f"For a given number of `betas` parameters {scales}, the image height and width dimensions must be"
                f" larger than or equal to {2**scales}."
            )
        div = max(1, scales - 1) ** 2
        for dim, side, name in ((-2, 0, "height"), (-1, 1, "width")):
            if preds.size()[dim] // div <= kernel[side] - 1:
                raise ValueError(
                    f"For a given number of `betas` parameters {scales} and kernel size {kernel[side]},"
                    f" the image {name} must be larger than {(kernel[side] - 1) * div}."
                )
        pool = F.avg_pool2d if len(kernel) == 2 else F.avg_pool3d
        values = []
        for _ in range(scales):
            data_range = image_range(preds, target, self.data_range)
            sim, contrast = _get_normalized_sim_and_cs(
                preds, target, self.gaussian_kernel, sigma, kernel, data_range, self.k1, self.k2, self.normalize
            )
            values.append(contrast)
            preds, target = pool(preds, 2), pool(target, 2)
        values[-1] = sim
        stack = torch.stack(values)
        if self.normalize == "simple":
            stack = (stack + 1) / 2
        similarity = torch.prod(stack ** self.__dict__["_betas"], 0)
        if self.reduction in ("none", None):
            self.similarity.append(similarity)
        else:
            self.similarity += similarity.sum()
        self.total += similarity.shape[0]
