"""Sync-free aggregators with torchmetrics' names, arguments and values.

NaN strategies run as masks and ``torch.where`` fills, ``"error"``/``"warn"`` deferred to ``compute()``
(:mod:`torchmetrics_async.nan`). Python numbers enter kernels as arguments (``state.add_(one, alpha=x)``, where
``torch.as_tensor(x, device=cuda)`` is a stalling copy); arithmetic on them is done on the host, rounded exactly as the
device would round it (:func:`round_to_dtype`). ``forward()`` reduces the batch once. ``nan_strategy="disable"`` keeps
user weights (torchmetrics issue #3434).

The running window (:class:`SyncFreeRunning`, under ``RunningMean``, ``RunningSum`` and
:class:`~torchmetrics_async.wrappers.Running`): torchmetrics' ``Running`` stores a reference to its base metric's states
in window slots and resets the base after every ``update``/``forward``. Here the slots receive copies, and the wrapper
keeps the base's deferred checks as its own over the whole window since its last reset, so ``update``/``forward`` make
no host read and no error is lost.
"""

import math
import numbers
import struct
from collections.abc import Callable
from typing import Any, ClassVar, Union

import torch
import torchmetrics.aggregation as tm_aggregation
from torch import Tensor

from torchmetrics_async._torchmetrics import Running, dim_zero_cat
from torchmetrics_async.batch_stats import all_kept
from torchmetrics_async.deferred import DEFERRED_RAISE_OWNED, UNREPORTED
from torchmetrics_async.errors import ShapeMismatchError
from torchmetrics_async.metric import OWNED_STATES, SyncFreeMixin, clear_compiled_count
from torchmetrics_async.nan import (
    NAN_KEPT_STATE,
    DeferredNanFlag,
    NanStrategy,
    apply_nan_strategy,
    apply_nan_strategy_to_numbers,
)

__all__ = ["CatMetric", "MaxMetric", "MeanMetric", "MinMetric", "RunningMean", "RunningSum", "SumMetric"]

Number = Union[int, float, bool]


class SyncFreeAggregator(SyncFreeMixin, DeferredNanFlag):
    """Shared machinery of the sync-free aggregators; a mixin over torchmetrics' ``BaseAggregator`` subclasses."""

    def _missing_extra_state(self, attr: str, incoming_state: dict[str, Any]) -> Any:
        if attr == NAN_KEPT_STATE:  # torchmetrics already dropped the NaNs from those values
            return all_kept(incoming_state.get("value", []))
        return super()._missing_extra_state(attr, incoming_state)

    def _as_value_tensor(self, value: Any) -> Tensor:
        """A non-tensor value (a number, a list...) as a tensor, as torchmetrics makes it."""
        if isinstance(value, Tensor):
            return value
        if is_number(value):
            return self._number_tensor(value)
        return torch.as_tensor(value, dtype=self.dtype, device=self.device)

    def _add_to(self, state: Tensor, x: Tensor | float | int) -> None:
        if isinstance(x, Tensor):
            state.add_(x)
        elif x:
            state.add_(self._one, alpha=x)

    def _round(self, x: Number) -> float:
        return round_to_dtype(x, self.dtype)

    # Where the batch statistics keep the batch's "a NaN was seen" (a mask, a bool or None).
    _seen_at = -1

    def _batch_violation(self, stats: tuple) -> Tensor | None:
        """Under ``nan_strategy="error"`` a batch with a NaN violates the check: its value is NaN altogether."""
        seen = stats[self._seen_at] if self.nan_strategy == "error" else None
        if isinstance(seen, Tensor):
            return _any(seen)
        return torch.ones((), dtype=torch.bool, device=self.device) if seen else None

    def update(self, value: float | Tensor) -> None:
        """Fold ``value`` (a tensor of any shape, or a number) into the states."""
        stats = self._batch_stats(value)  # _update_from_stats, inlined: one frame less on the hot path
        if stats is not None:
            self._merge_stats(stats)

    def compute(self) -> Any:
        """Raise or warn for deferred NaNs with torchmetrics' message, then compute as torchmetrics does."""
        self._raise_deferred_checks()
        return super().compute()


class SumMetric(SyncFreeAggregator, tm_aggregation.SumMetric):
    """No host sync in ``update()`` or ``forward()``."""

    def _batch_stats(self, value: Number | Tensor) -> tuple | None:
        if not isinstance(value, Tensor):
            if is_number(value):
                v, _, seen = apply_nan_strategy_to_numbers(self.nan_strategy, value, None)
                return (0.0 if v is None else self._round(v), seen)
            value = self._as_value_tensor(value)
        if value.numel() == 0:
            return None
        strategy = self.nan_strategy
        if strategy in {"warn", "ignore"}:
            value = _as_dtype(value, self.dtype)  # NaNs survive a float cast, so masking after it is the same
            return value.nansum(), (_any(torch.isnan(value)) if strategy == "warn" else None)
        seen = _any(torch.isnan(value)) if strategy == "error" else None
        if isinstance(strategy, float):
            value, _, _ = apply_nan_strategy(strategy, value, None, neutral=0.0)
        value = _as_dtype(value, self.dtype)
        return (value.sum() if value.dim() else value), seen

    def _merge_stats(self, stats: tuple) -> None:
        total, seen = stats
        self._add_to(self.sum_value, total)
        self._record_nan(seen)

    def _batch_value(self, stats: tuple | None) -> Tensor:
        if stats is None:
            return self._number_tensor(0.0)
        total = stats[0]
        return total if isinstance(total, Tensor) else self._number_tensor(total)


class MeanMetric(SyncFreeAggregator, tm_aggregation.MeanMetric):
    """No host sync in ``update()`` or ``forward()``; ``nan_strategy="disable"`` keeps weights (torchmetrics #3434)."""

    def update(self, value: float | Tensor, weight: float | Tensor | None = None) -> None:
        """Add ``value`` with ``weight`` (broadcast to ``value``'s shape; ``None`` means ones)."""
        stats = self._batch_stats(value, weight)  # _update_from_stats, inlined: one frame less on the hot path
        if stats is not None:
            self._merge_stats(stats)

    def _batch_stats(self, value: Number | Tensor, weight: Number | Tensor | None = None) -> tuple | None:
        strategy = self.nan_strategy
        if weight is None and isinstance(value, Tensor) and not isinstance(strategy, float):
            return self._unweighted_tensor_stats(value, strategy)
        if is_number(value) and (weight is None or is_number(weight)):
            return self._number_stats(value, weight)
        value = self._as_value_tensor(value)
        if weight is not None:
            if is_number(weight):
                weight = torch.full((), weight, dtype=self.dtype, device=value.device)
            elif not isinstance(weight, Tensor):
                weight = torch.as_tensor(weight, dtype=self.dtype, device=value.device)
            # A 0-dim weight on another device (a CPU scalar) stays a scalar operand: a kernel argument, not a copy.
            if weight.dim() or weight.device == value.device:
                try:
                    weight = torch.broadcast_to(weight, value.shape)
                except RuntimeError as err:  # torchmetrics' own broadcast_to raises torch's kernel message
                    raise ShapeMismatchError(
                        f"`weight` of shape {tuple(weight.shape)} does not broadcast to `value` of shape"
                        f" {tuple(value.shape)}: {err}"
                    ) from None
        if value.numel() == 0:
            return None
        value, weight, seen = apply_nan_strategy(strategy, value, weight, neutral=0.0)
        seen = None if seen is None else _any(seen)
        value = _as_dtype(value, self.dtype)
        if weight is None:
            return (value if value.dim() == 0 else value.sum()), value.numel(), seen
        weight = _as_dtype(weight, self.dtype)
        total_weight = weight.sum() if weight.shape == value.shape else weight.expand(value.shape).sum()
        return (value * weight).sum(), total_weight, seen

    def _unweighted_tensor_stats(self, value: Tensor, strategy: str) -> tuple | None:
        """The hot path (a loss tensor, no weight): as few tensor ops as the strategy allows."""
        if value.numel() == 0:
            return None
        if value.dtype != self.dtype:  # NaNs survive a float cast, so masking after it is the same
            value = value.to(self.dtype)
        if strategy in {"warn", "ignore"}:
            kept = torch.eq(value, value)  # false exactly at the NaNs: one op where isnan + logical_not are two
            if value.dim():
                # Counted in the state dtype where exact (float32 up to 2**24): one fused add with the sum on CUDA.
                exact = value.dtype == torch.float64 or (value.dtype == torch.float32 and value.numel() <= 1 << 24)
                kept = kept.sum(dtype=value.dtype) if exact else kept.sum()
                seen = kept != value.numel() if strategy == "warn" else None
            else:
                seen = torch.logical_not(kept) if strategy == "warn" else None
            return value.nansum(), kept, seen
        total = value.sum() if value.dim() else value
        return total, value.numel(), (_any(torch.isnan(value)) if strategy == "error" else None)

    def _number_stats(self, value: Number, weight: Number | None) -> tuple:
        v, w, seen = apply_nan_strategy_to_numbers(self.nan_strategy, value, weight)
        if v is None:
            return 0.0, 0.0, seen
        v = self._round(v)
        w = 1.0 if w is None else self._round(w)
        return self._round(v * w), w, seen

    def _merge_stats(self, stats: tuple) -> None:
        total, total_weight, seen = stats
        if not isinstance(total, Tensor) or not isinstance(total_weight, Tensor):
            self._add_to(self.mean_value, total)
            self._add_to(self.weight, total_weight)
        elif total_weight.dtype == total.dtype:  # both 0-dim: one fused kernel on CUDA
            torch._foreach_add_((self.mean_value, self.weight), (total, total_weight))
        else:  # a bool kept count (0-dim value): no fused kernel either way, and two adds cost less host time
            self.mean_value.add_(total)
            self.weight.add_(total_weight)
        self._record_nan(seen)

    def _batch_value(self, stats: tuple | None) -> Tensor:
        if stats is None:
            return self._number_tensor(math.nan)
        total, total_weight, _ = stats
        if not isinstance(total, Tensor):
            total = self._number_tensor(total)
        return total / total_weight


def _as_dtype(value: Tensor, dtype: torch.dtype) -> Tensor:
    """``value.to(dtype)`` without the call when it would do nothing (a no-op ``.to`` costs as much as an add)."""
    return value if value.dtype == dtype else value.to(dtype)


def is_number(x: object) -> bool:
    """Return whether ``x`` is a Python (or NumPy) real number rather than a tensor."""
    return isinstance(x, numbers.Number) and not isinstance(x, complex)


def _round_bfloat16(x: float) -> float:
    # bfloat16 is the upper half of a float32: round-to-nearest-even on the dropped 16 bits.
    if math.isnan(x) or math.isinf(x):
        return x
    (bits,) = struct.unpack("<I", struct.pack("<f", x))
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def _round_with(fmt: str, x: float) -> float:
    try:
        return struct.unpack(fmt, struct.pack(fmt, x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)


def round_to_dtype(x: float, dtype: torch.dtype) -> float:
    """Round a number to the nearest value of a floating ``dtype`` (others: ``float(x)``), as ``as_tensor`` would.

    Double carries more than ``2p + 2`` bits, so host arithmetic on rounded numbers, rounded again, matches the device.

    Example:
        >>> import torch
        >>> round_to_dtype(1 / 3, torch.float16)
        0.333251953125
    """
    x = float(x)
    if dtype == torch.float32:
        return _round_with("<f", x)
    if dtype == torch.float16:
        return _round_with("<e", x)
    if dtype == torch.bfloat16:
        return _round_bfloat16(_round_with("<f", x) if abs(x) < 3.4e38 else x)
    return x


def _any(mask: Tensor) -> Tensor:
    """A per-element mask as the 0-dim "any" a check takes (no host read)."""
    return mask.any() if mask.dim() else mask


class _ExtremumMetric(SyncFreeAggregator):
    """Max or min: the batch reduces to one extremum, folded in with ``maximum``/``minimum`` in place."""

    _state: str
    _neutral: float
    _seen_at = 1
    _reduce = staticmethod(torch.max)
    _combine = staticmethod(torch.maximum)
    # fmax/fmin ignore a NaN operand: under "ignore"/"warn" they drop a NaN and merge in one op.
    _combine_dropping_nan = staticmethod(torch.fmax)
    _clamp: str

    def _batch_stats(self, value: Number | Tensor) -> tuple | None:
        if not isinstance(value, Tensor):
            if is_number(value):
                v, _, seen = apply_nan_strategy_to_numbers(self.nan_strategy, value, None)
                return (None if v is None else self._round(v)), seen, False
            value = self._as_value_tensor(value)
        if value.numel() == 0:
            return None
        strategy = self.nan_strategy
        dropping = strategy in {"warn", "ignore"}
        if dropping or strategy == "error":
            seen = _any(torch.isnan(value)) if strategy != "ignore" else None
        else:
            value, _, seen = apply_nan_strategy(strategy, value, None, neutral=self._neutral)
        if value.dim():
            if dropping:
                value = value.nan_to_num(self._neutral, math.inf, -math.inf)
            value = self._reduce(value)
        # Casting is monotone, so the extremum of the cast values is the cast of the extremum: cast one element.
        return _as_dtype(value, self.dtype), seen, dropping

    def _merge_stats(self, stats: tuple) -> None:
        extremum, seen, dropping = stats
        state = getattr(self, self._state)
        if isinstance(extremum, Tensor):
            (self._combine_dropping_nan if dropping else self._combine)(state, extremum, out=state)
        elif extremum is not None:
            getattr(state, self._clamp)(extremum)
        self._record_nan(seen)

    def _batch_value(self, stats: tuple | None) -> Tensor:
        extremum = None if stats is None else stats[0]
        if extremum is None:
            return self._number_tensor(self._neutral)
        if not isinstance(extremum, Tensor):
            return self._number_tensor(extremum)
        # A dropped 0-dim NaN leaves nothing: the batch value is the empty batch's, the neutral element.
        return extremum.nan_to_num(self._neutral, math.inf, -math.inf) if stats[2] else extremum


class MaxMetric(_ExtremumMetric, tm_aggregation.MaxMetric):
    """No host sync in ``update()`` or ``forward()``."""

    _state = "max_value"
    _neutral = -math.inf
    _clamp = "clamp_min_"


class MinMetric(_ExtremumMetric, tm_aggregation.MinMetric):
    """No host sync in ``update()`` or ``forward()``."""

    _state = "min_value"
    _neutral = math.inf
    _reduce = staticmethod(torch.min)
    _combine = staticmethod(torch.minimum)
    _combine_dropping_nan = staticmethod(torch.fmin)
    _clamp = "clamp_max_"


class CatMetric(SyncFreeAggregator, tm_aggregation.CatMetric):
    """No host sync in ``update()``.

    With ``nan_strategy="ignore"``/``"warn"``, ``compute()`` and ``forward()`` drop the NaNs with a host read of the
    keep-masks (state ``nan_kept``).
    """

    def _add_extra_states(self) -> None:
        if self._masks_nans and NAN_KEPT_STATE not in self._defaults:
            self.add_state(NAN_KEPT_STATE, default=[], dist_reduce_fx="cat")
            # Values held by an adopted instance were filtered by torchmetrics in its update: all are kept.
            setattr(self, NAN_KEPT_STATE, all_kept(self.value))
        super()._add_extra_states()

    def _load_from_state_dict(self, state_dict: dict, prefix: str, *args: Any, **kwargs: Any) -> None:
        had_masks = prefix + NAN_KEPT_STATE in state_dict
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        if self._masks_nans and not had_masks:
            # A torchmetrics checkpoint: its values were filtered in its update, so every one is kept.
            setattr(self, NAN_KEPT_STATE, all_kept(self.value))

    @property
    def _masks_nans(self) -> bool:
        return self.nan_strategy in ("ignore", "warn")

    @staticmethod
    def _nan_free(values: Tensor | list, kept: Tensor | list) -> Tensor | list:
        """``values`` without the NaNs torchmetrics drops (one host read; meta tensors hold no data: as they are)."""
        if any(k.is_meta for k in ([kept] if isinstance(kept, Tensor) else kept)):
            return values
        if isinstance(values, Tensor):  # after a distributed sync both lists arrive concatenated
            return values if bool(kept.all()) else values[kept]
        return _drop_unkept(values, kept)

    def _as_torchmetrics_holds(self, states: dict[str, Any], prefix: str = "") -> None:
        """``value`` without the NaNs torchmetrics' ``update()`` drops, for a plain ``CatMetric`` to merge or load."""
        value_key, kept_key = prefix + "value", prefix + NAN_KEPT_STATE
        if self._masks_nans and value_key in states and kept_key in states:
            states[value_key] = self._nan_free(states[value_key], states[kept_key])
            states[kept_key] = all_kept(states[value_key])

    def _batch_stats(self, value: Number | Tensor) -> tuple | None:
        if is_number(value):
            v, _, seen = apply_nan_strategy_to_numbers(self.nan_strategy, value, None)
            if v is None:
                return None, None, seen
            v = self._number_tensor(v)
            return v, (torch.ones((), dtype=torch.bool, device=v.device) if self._masks_nans else None), seen
        value = self._as_value_tensor(value)
        if value.numel() == 0:
            return None
        if self._masks_nans:
            nans = torch.isnan(value)
            return value.to(self.dtype), torch.logical_not(nans), (nans if self.nan_strategy == "warn" else None)
        value, _, seen = apply_nan_strategy(self.nan_strategy, value, None, neutral=0.0)
        return value.to(self.dtype), None, seen

    def _merge_stats(self, stats: tuple) -> None:
        value, kept, seen = stats
        if value is not None:
            self.value.append(value)
            if kept is not None:
                getattr(self, NAN_KEPT_STATE).append(kept)
        self._record_nan(seen)

    def _batch_value(self, stats: tuple | None) -> Tensor | list:
        if stats is None or stats[0] is None:
            return []
        value, kept, _ = stats
        pieces = _drop_unkept([value], [kept]) if kept is not None else [value]
        return dim_zero_cat(pieces) if pieces else []

    def compute(self) -> Tensor | list:
        """Concatenate the values, NaNs dropped under ``"ignore"``/``"warn"`` (``[]`` if none kept, as torchmetrics)."""
        self._raise_deferred_checks()
        values = self.value
        if self._masks_nans:
            values = self._nan_free(values, getattr(self, NAN_KEPT_STATE))
        if isinstance(values, list) and values:
            return dim_zero_cat(values)
        return values


def _drop_unkept(values: list, kept: list) -> list:
    """Torchmetrics flattens and filters a batch that had a NaN and drops a batch left empty; one host read."""
    if len(values) != len(kept):
        raise RuntimeError(
            f"CatMetric holds {len(values)} value batches but {len(kept)} NaN masks; its state is corrupt."
        )
    if not values:
        return []
    all_kept = torch.stack([k.all() for k in kept]).tolist()
    pieces = [v if keep else v[k] for v, k, keep in zip(values, kept, all_kept, strict=True)]
    return [p for p in pieces if p.numel()]


class SyncFreeRunning(SyncFreeMixin):
    """Torchmetrics' ``Running`` over a sync-free base: owned slot copies; the wrapper reports the base's checks."""

    # torchmetrics' Running leaves ``_update_count`` alone (its wrapper does not count); the window is its own count.
    _window_counter = "_num_vals_seen"
    __jit_unused_properties__: ClassVar[list[str]] = [*SyncFreeMixin.__jit_unused_properties__, "_num_vals_seen"]

    def _wrap_update(self, update: Callable) -> Callable:
        """As torchmetrics' wrappers: ``update`` unwrapped (the slots are the wrapper's own from every door on)."""
        return update

    def _add_extra_states(self) -> None:
        """Window slots for the base's extra states (an adopted ``Running`` lacks them); we report the base's checks."""
        base = self.base_metric
        for key in base._defaults:
            for slot in range(self.window):
                if f"{key}_{slot}" not in self._defaults:
                    self.add_state(f"{key}_{slot}", default=base._defaults[key], dist_reduce_fx=base._reductions[key])
        for name, (message, action) in base._deferred_checks_registered().items():
            self._add_deferred_check(name, message, action)
        base.__dict__[DEFERRED_RAISE_OWNED] = True
        super()._add_extra_states()

    def _extra_states(self) -> tuple[str, ...]:
        """Our own, and the window slots of the base's (torchmetrics' ``Running`` has slots of its states only)."""
        extra = self.base_metric._extra_states()
        return (*super()._extra_states(), *(f"{key}_{slot}" for key in extra for slot in range(self.window)))

    @property
    def _num_vals_seen(self) -> int:
        """The count of updates since the last reset (torchmetrics' window position), as a Python int."""
        # After compiled updates the count is on the device (an int would recompile every step): one host read.
        return self._read_window_count()

    @_num_vals_seen.setter
    def _num_vals_seen(self, value: int) -> None:
        self.__dict__["_num_vals_seen"] = value
        clear_compiled_count(self)

    @property
    def _update_count(self) -> int:
        """The int as torchmetrics left it: its ``Running`` does not count its own updates (its base does)."""
        return self.__dict__["_update_count"]

    @_update_count.setter
    def _update_count(self, value: int) -> None:
        self.__dict__["_update_count"] = value
        if OWNED_STATES in self.__dict__:  # a compute-group link (see SyncFreeMixin._update_count)
            self._own_states(in_place=True)

    def _store_window_slot(self) -> None:
        state = self.__dict__
        base = self.base_metric
        # Once compiled code has counted in this window, the slot is picked on the device until the next reset.
        position = self._unread_window_count()  # before this update is counted: its 0-based position in the window
        if isinstance(position, Tensor):
            position = torch.remainder(position, self.window)
            self._count_compiled_update()
        else:
            slot, position = position % self.window, None
            state["_num_vals_seen"] += 1
            state[UNREPORTED] = True
        for name in self._deferred_checks_registered():
            self._record_violation(name, getattr(base, name))
        if position is None:
            for key in base._defaults:
                self._write_slot(f"{key}_{slot}", getattr(base, key))
        else:
            hits = [position == slot for slot in range(self.window)]
            for key in base._defaults:
                current = getattr(base, key)
                for slot, hit in enumerate(hits):
                    # Every slot is written (itself where it is not the one): the same graph whatever the position.
                    name = f"{key}_{slot}"
                    self._write_slot(name, torch.where(hit, current, getattr(self, name).to(current)))
        base._reset_states(in_place=True)  # the slot holds a copy; the base's states are its own

    def _write_slot(self, name: str, value: Tensor | list) -> None:
        """Copy ``value`` into window slot ``name`` (in place where the layouts agree, else a new owned state)."""
        target = getattr(self, name)
        if (
            isinstance(value, Tensor)
            and isinstance(target, Tensor)
            and (target.shape, target.dtype, target.device) == (value.shape, value.dtype, value.device)
        ):
            target.copy_(value)
        else:
            mine = value.clone() if isinstance(value, Tensor) else list(value)
            setattr(self, name, mine)
            self.__dict__[OWNED_STATES][name] = mine

    def update(self, *args: Any, **kwargs: Any) -> None:
        """Update the base metric and store its state in the current window slot."""
        self.base_metric.update(*args, **kwargs)
        self._store_window_slot()

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Forward to the base metric (one pass) and store its state in the current window slot."""
        result = self.base_metric.forward(*args, **kwargs)
        self._store_window_slot()
        self.__dict__["_computed"] = None
        return result

    def compute(self) -> Any:
        """Raise what the window since the last reset recorded, then compute over the running window."""
        self._raise_deferred_checks()
        return super().compute()

    def reset(self) -> None:
        """Reset the window (raising what it recorded and nobody reported, as every sync-free metric does)."""
        try:
            super().reset()
        finally:
            self._num_vals_seen = 0


class RunningMean(SyncFreeRunning, tm_aggregation.RunningMean):
    """No host sync in ``update()`` or ``forward()``."""

    def __init__(self, window: int = 5, nan_strategy: NanStrategy = "warn", **kwargs: Any) -> None:
        Running.__init__(self, base_metric=MeanMetric(nan_strategy=nan_strategy, **kwargs), window=window)


class RunningSum(SyncFreeRunning, tm_aggregation.RunningSum):
    """No host sync in ``update()`` or ``forward()``."""

    def __init__(self, window: int = 5, nan_strategy: NanStrategy = "warn", **kwargs: Any) -> None:
        Running.__init__(self, base_metric=SumMetric(nan_strategy=nan_strategy, **kwargs), window=window)
