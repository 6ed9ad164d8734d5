"""Class decorators that make users' own torchmetrics classes sync-free.

:func:`suppress_nan_check` (no NaN handling at all), :func:`scalar_to_tensor_updates` (Python numbers enter without a
host-to-device copy) and :func:`sync_free` (every acceleration that applies; a class with no accelerated counterpart
gets a *generic* class, whose ``repr()`` says its ``update()`` may still sync). Decorated classes subclass the class
they decorate, keep its name, and pickle.

Numbers are made tensors only where torchmetrics' own code would copy them to the device (``torch.as_tensor(x,
device=...)``): an aggregator's value and weight. Everywhere else a number reaches the user's ``update`` as it was
given: an ``int``/``bool`` may be an index, a size or a flag, and a float is a kernel argument as it is
(``tensor * 0.5`` copies nothing), while a tensor in ``if scale > 0.5`` or ``math.log(scale)`` would be a host read.
"""

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

import torch
from torch import Tensor

from torchmetrics_async._torchmetrics import BaseAggregator, Metric, rank_zero_warn
from torchmetrics_async.aggregation import is_number
from torchmetrics_async.metric import SyncFreeMixin
from torchmetrics_async.nan import DeferredNanFlag, apply_nan_strategy
from torchmetrics_async.reductions import neutral_element
from torchmetrics_async.registry import accelerated_class_for, derive

__all__ = ["GENERIC_MARK", "scalar_to_tensor_updates", "suppress_nan_check", "sync_free"]

M = TypeVar("M", bound=type)

# What repr() appends to the name of a generic sync_free class (no accelerated class exists for what it decorates).
GENERIC_MARK = "[generic: update may sync]"


def _require_subclass(decorator: str, cls: Any, base: type, why: str) -> None:
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise TypeError(f"{decorator} applies to {base.__module__}.{base.__name__} subclasses ({why}); got {cls!r}.")


def _number_to_tensor(metric: Metric, x: Any) -> Any:
    """``x`` as torchmetrics' ``torch.as_tensor(x, dtype, device)`` makes it, by a fill kernel (no copy); else as is."""
    return torch.full((), x, dtype=metric.dtype, device=metric.device) if is_number(x) else x


def _neutral_element(metric: BaseAggregator) -> float | None:
    """What a dropped value becomes for this aggregator's reduction (``None``: dropping changes a shape)."""
    return neutral_element(metric._reductions[metric.state_name])


def _cast_without_nan_check(self: Any, x: Any, weight: Any = None) -> tuple[Tensor, Tensor]:
    x = _number_to_tensor(self, x)
    if not isinstance(x, Tensor):
        x = torch.as_tensor(x, dtype=self.dtype, device=self.device)
    if weight is None:
        weight = torch.ones_like(x)
    elif not isinstance(weight, Tensor):
        weight = _number_to_tensor(self, weight)
    return x.to(self.dtype), weight.to(self.dtype)


def suppress_nan_check(cls: M) -> M:
    """A subclass of the ``BaseAggregator`` ``cls``, same name, with no NaN handling at all; user weights are kept.

    Example:
        >>> import torch
        >>> from torchmetrics import SumMetric
        >>> metric = suppress_nan_check(SumMetric)()
        >>> metric.update(torch.tensor([1.0, float("nan")]))
        >>> metric.compute()
        tensor(nan)
    """
    _require_subclass("suppress_nan_check", cls, BaseAggregator, "they own _cast_and_nan_check_input")
    namespace = {
        **_scalar_namespace(cls),
        "_cast_and_nan_check_input": _cast_without_nan_check,
        "__init__": _refusing_nan_strategies(cls),
    }
    return derive(suppress_nan_check, cls, (cls,), namespace)


def _refusing_nan_strategies(cls: type) -> Callable:
    """``cls.__init__``, refusing a ``nan_strategy`` given explicitly that a class without NaN checks cannot honour."""
    inner_init = cls.__init__
    signature = inspect.signature(inner_init)
    # A subclass may take nan_strategy through **kwargs only.
    rest = next((p.name for p in signature.parameters.values() if p.kind is p.VAR_KEYWORD), None)

    @functools.wraps(inner_init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        given = signature.bind_partial(self, *args, **kwargs).arguments
        strategy = given.get("nan_strategy", given.get(rest, {}).get("nan_strategy", "disable"))
        if strategy != "disable":
            raise ValueError(
                f"suppress_nan_check({cls.__name__}) makes no NaN check, so it cannot honour nan_strategy={strategy!r}"
                " (NaNs reach the states). Leave nan_strategy out (or pass 'disable'), or use"
                f" sync_free({cls.__name__}), which honours every strategy without a host sync."
            )
        inner_init(self, *args, **kwargs)

    return __init__


def scalar_to_tensor_updates(cls: M) -> M:
    """A subclass of ``cls`` in which Python numbers that torchmetrics would copy to the device are made there instead.

    That is an aggregator's value and weight (``BaseAggregator._cast_and_nan_check_input``, and ``MeanMetric.update``
    of torchmetrics); every other argument reaches ``update`` unchanged (see the module's docstring).

    Example:
        >>> from torchmetrics import MaxMetric
        >>> metric = scalar_to_tensor_updates(MaxMetric)()
        >>> metric.update(2.0)
        >>> metric.compute()
        tensor(2.)
    """
    _require_subclass("scalar_to_tensor_updates", cls, Metric, "they have update()")
    return derive(scalar_to_tensor_updates, cls, (cls,), _scalar_namespace(cls))


def _scalar_namespace(cls: type) -> dict:
    """Where torchmetrics copies numbers to the device: an aggregator's cast, and its own ``update`` (value, weight)."""
    if not issubclass(cls, BaseAggregator):
        return {}  # a number is left to the user's update, which the plain class also gets
    inner_cast, inner_update = cls._cast_and_nan_check_input, cls.update

    @functools.wraps(inner_cast)
    def _cast_and_nan_check_input(self: Any, x: Any, weight: Any = None) -> tuple[Tensor, Tensor]:
        weight = None if weight is None else _number_to_tensor(self, weight)
        return inner_cast(self, _number_to_tensor(self, x), weight)

    namespace: dict[str, Any] = {"_cast_and_nan_check_input": _cast_and_nan_check_input}
    if inner_update.__module__ == BaseAggregator.__module__:  # torchmetrics' MeanMetric.update copies before the cast

        @functools.wraps(inner_update)
        def update(self: Any, *args: Any, **kwargs: Any) -> None:
            args = tuple(_number_to_tensor(self, a) for a in args)
            kwargs = {k: _number_to_tensor(self, v) for k, v in kwargs.items()}
            return inner_update(self, *args, **kwargs)

        namespace["update"] = update
    return namespace


class _SyncFreeNanAggregator(DeferredNanFlag):
    """Sync-free ``_cast_and_nan_check_input`` for users' ``BaseAggregator`` subclasses."""

    def _cast_and_nan_check_input(self, x: Any, weight: Any = None) -> tuple[Tensor, Tensor]:
        neutral = _neutral_element(self)
        if neutral is None and self.nan_strategy in ("ignore", "warn"):
            return super()._cast_and_nan_check_input(x, weight)  # dropping from a cat state changes its shape
        x = _number_to_tensor(self, x)
        if not isinstance(x, Tensor):
            x = torch.as_tensor(x, dtype=self.dtype, device=self.device)
        if weight is not None:
            weight = _number_to_tensor(self, weight)
        x, weight, seen = apply_nan_strategy(self.nan_strategy, x, weight, neutral=neutral or 0.0)
        self._record_nan(seen)
        if weight is None:
            weight = torch.ones_like(x)
        return x.to(self.dtype), weight.to(self.dtype)

    def compute(self) -> Any:
        self._raise_deferred_checks()
        return super().compute()


def _sync_free_init(cls: type) -> Callable:
    inner_init = cls.__init__

    @functools.wraps(inner_init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        inner_init(self, *args, **kwargs)
        if (
            isinstance(self, DeferredNanFlag)
            and _neutral_element(self) is None
            and self.nan_strategy in ("ignore", "warn")
        ):
            rank_zero_warn(
                f"{cls.__name__}: nan_strategy={self.nan_strategy!r} on a cat state drops values, which changes"
                " the state's shape; torchmetrics-async keeps torchmetrics' NaN check here (a host sync).",
                UserWarning,
            )

    return __init__


def sync_free(cls: M) -> M:
    """Apply every acceleration that fits the ``Metric`` subclass ``cls``.

    A torchmetrics class gives its accelerated class, a user's subclass of one is rebased on it, any other class gets
    a generic class: not accelerated (``update()`` may still sync), which its ``repr()`` says.

    Example:
        >>> import torchmetrics
        >>> class Total(torchmetrics.SumMetric):
        ...     pass
        >>> sync_free(torchmetrics.SumMetric).__module__, sync_free(Total)().update.__module__
        ('torchmetrics_async.aggregation', 'torchmetrics_async.aggregation')
    """
    _require_subclass("sync_free", cls, Metric, "it accelerates torchmetrics metrics")
    accelerated = accelerated_class_for(cls)
    if accelerated is not None:
        return accelerated
    if issubclass(cls, SyncFreeMixin):
        return cls
    mixins: tuple = (SyncFreeMixin,)
    if issubclass(cls, BaseAggregator):
        mixins += (_SyncFreeNanAggregator,)
    scalar_cls = scalar_to_tensor_updates(cls)
    namespace = {"__init__": _sync_free_init(cls), "_get_name": _generic_name}
    return derive(sync_free, cls, (*mixins, scalar_cls), namespace)


def _generic_name(self: Any) -> str:
    """``repr()`` names a generic ``sync_free`` class as such: not accelerated, its ``update()`` may sync."""
    return f"{type(self).__name__}{GENERIC_MARK}"
