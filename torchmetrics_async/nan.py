"""Sync-free NaN strategies: masks, where-fills and deferred error/warn flags.

torchmetrics tests ``if nans.any()`` (a host read) and drops NaNs by boolean-mask indexing (a data-dependent shape).
Here NaNs are replaced on the device by a neutral element (nothing to a sum or a max), and "a NaN was seen" is kept in
a metric state that ``compute()`` reads once.
"""

import math
from typing import Literal, Union

import torch
from torch import Tensor

from torchmetrics_async._torchmetrics import NAN_ERROR_MESSAGE, NAN_WARN_MESSAGE

__all__ = [
    "NAN_FLAG_STATE",
    "NAN_KEPT_STATE",
    "DeferredNanFlag",
    "NanStrategy",
    "apply_nan_strategy",
    "apply_nan_strategy_to_numbers",
]

NanStrategy = Union[Literal["error", "warn", "ignore", "disable"], float]

#: Name of the metric state holding "a NaN was seen in this window" (a bool, reduced with max across ranks).
NAN_FLAG_STATE = "nan_seen"
#: Name of CatMetric's list state of keep-masks under ``nan_strategy="ignore"``/``"warn"`` (bool, concatenated).
NAN_KEPT_STATE = "nan_kept"


def apply_nan_strategy(
    strategy: NanStrategy, value: Tensor, weight: Tensor | None, neutral: float
) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """Apply a NaN strategy to a value tensor and its (broadcast) weights without a host sync.

    Follows ``BaseAggregator._cast_and_nan_check_input``: a pair is "nan" when the value or its weight is NaN. Fills
    happen in the input dtype (torchmetrics fills before it casts). Returns ``(value, weight, seen)``: a dropped pair
    gets ``neutral`` (0 for sums, -inf for a max) and weight 0 (a mask when ``weight`` was ``None``); ``seen`` is the
    NaN mask for ``"error"``/``"warn"``, else ``None``.

    Example:
        >>> apply_nan_strategy("ignore", torch.tensor([1.0, float("nan")]), None, neutral=0.0)
        (tensor([1., 0.]), tensor([ True, False]), None)
    """
    if strategy == "disable":
        return value, weight, None
    nans = torch.isnan(value)
    if weight is not None:
        nans = torch.logical_or(nans, torch.isnan(weight))
    if strategy == "error":
        return value, weight, nans
    if isinstance(strategy, float):
        value = torch.where(nans, _fill_in_dtype(strategy, value.dtype), value)
        if weight is not None:
            weight = torch.where(nans, 1.0, weight)
        return value, weight, None
    # masked_fill takes the fill as a kernel argument; torch.where would first wrap it in a tensor.
    value = value.masked_fill(nans, neutral) if value.shape == nans.shape else torch.where(nans, neutral, value)
    if weight is None:
        weight = torch.logical_not(nans)
    else:
        weight = weight.masked_fill(nans, 0.0) if weight.shape == nans.shape else torch.where(nans, 0.0, weight)
    return value, weight, nans if strategy == "warn" else None


def _fill_in_dtype(fill: float, dtype: torch.dtype) -> float | int | bool:
    """The fill as torchmetrics' ``x[mask] = fill`` stores it in ``x``'s dtype (C++ casts: ints truncate)."""
    if dtype == torch.bool:
        return bool(fill)
    if not dtype.is_floating_point and not dtype.is_complex:
        return int(fill)
    return fill


def apply_nan_strategy_to_numbers(
    strategy: NanStrategy, value: float, weight: float | None
) -> tuple[float | None, float | None, bool]:
    """The same decisions for Python numbers, on the host where they are free; a dropped pair's value is ``None``.

    Example:
        >>> apply_nan_strategy_to_numbers("ignore", float("nan"), None)
        (None, None, False)
    """
    nan = strategy != "disable" and (math.isnan(value) or (weight is not None and math.isnan(weight)))
    if not nan:
        return value, weight, False
    if strategy == "error":
        return value, weight, True
    if isinstance(strategy, float):
        return strategy, (None if weight is None else 1.0), False
    return None, None, strategy == "warn"


class DeferredNanFlag:
    """Mixin deferring ``"error"``/``"warn"`` NaNs to a check (:data:`NAN_FLAG_STATE`) that ``compute()`` reports."""

    def _add_extra_states(self) -> None:  # reached from SyncFreeMixin's, earlier in the MRO
        message = {"error": NAN_ERROR_MESSAGE, "warn": NAN_WARN_MESSAGE}.get(self.nan_strategy)
        if message is not None:
            self._add_deferred_check(NAN_FLAG_STATE, message, self.nan_strategy)

    def _record_nan(self, seen: Tensor | bool | None) -> None:
        """Fold a per-element NaN mask (or a host-known bool) into the flag, without reading it."""
        if seen is not None and seen is not False:
            self._record_violation(NAN_FLAG_STATE, seen)
