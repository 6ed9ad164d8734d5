"""``accelerate()``, ``patch()``/``unpatch()`` and the registry torchmetrics class -> accelerated class.

Example:
    >>> import torch, torchmetrics
    >>> from torchmetrics_async import accelerate
    >>> metric = torchmetrics.MeanMetric()
    >>> metric.update(torch.tensor(2.0))
    >>> accelerate(metric) is metric, type(metric).__module__, metric.compute()
    (True, 'torchmetrics_async.aggregation', tensor(2.))
"""

import sys
import warnings
from collections.abc import Iterator
from types import ModuleType
from typing import Any, TypeVar

from torchmetrics import MetricCollection

from torchmetrics_async import aggregation, classification
from torchmetrics_async._torchmetrics import Metric, torchmetrics_origin
from torchmetrics_async.distributed import fused_collection_class
from torchmetrics_async.metric import SyncFreeMixin

__all__ = ["accelerate", "accelerated_class_for", "is_patched", "patch", "register", "registry", "unpatch"]

T = TypeVar("T")

_REGISTRY: dict[type, type] = {}


def register(accelerated: type) -> type:
    """Register an accelerated class under the torchmetrics class of the same name it subclasses.

    Args:
        accelerated: a class of this package that subclasses a torchmetrics class of the same name.

    Returns:
        ``accelerated``, so this works as a class decorator.

    Raises:
        TypeError: if no base class of ``accelerated`` is a torchmetrics class of the same name.

    Example:
        >>> import torchmetrics
        >>> from torchmetrics_async import MeanMetric
        >>> register(MeanMetric) is MeanMetric and registry()[torchmetrics.MeanMetric] is MeanMetric
        True
    """
    origin = torchmetrics_origin(accelerated)
    if origin is None:
        raise TypeError(f"{accelerated.__qualname__} does not subclass a torchmetrics class of the same name.")
    _REGISTRY[origin] = accelerated
    return accelerated


def registry() -> dict[type, type]:
    """A copy of the registry: torchmetrics class -> accelerated class.

    Returns:
        The mapping.

    Example:
        >>> import torchmetrics
        >>> registry()[torchmetrics.SumMetric].__module__
        'torchmetrics_async.aggregation'
    """
    return dict(_REGISTRY)


for _module in (aggregation, classification):
    for _name in _module.__all__:
        register(getattr(_module, _name))


def _is_accelerated(cls: type) -> bool:
    return issubclass(cls, SyncFreeMixin) or cls in _REGISTRY.values()


def accelerated_class_for(cls: type) -> type | None:
    """The accelerated class for a torchmetrics class, ``cls`` itself if it is accelerated, else ``None``.

    Args:
        cls: a ``Metric`` subclass.

    Returns:
        The class or ``None``.

    Example:
        >>> import torchmetrics
        >>> accelerated_class_for(torchmetrics.MaxMetric).__module__
        'torchmetrics_async.aggregation'
    """
    if cls in _REGISTRY:
        return _REGISTRY[cls]
    return cls if _is_accelerated(cls) else None


def _class_for_instance(cls: type) -> type | None:
    """Accelerated class for a live instance of ``cls``: registered, or a user subclass the decorators can handle."""
    accelerated = accelerated_class_for(cls)
    if accelerated is not None:
        return accelerated
    from torchmetrics_async._torchmetrics import BaseAggregator
    from torchmetrics_async.decorators import sync_free

    # A user subclass of a class we accelerate, or any aggregator: the user's overrides must win, so only the generic
    # accelerations apply (sync-free NaN handling, lean wrapper, in-place reset, scalars without copies).
    if issubclass(cls, BaseAggregator) or any(base in _REGISTRY for base in cls.__mro__[1:]):
        return sync_free(cls)
    return None


def _unaccelerated(obj: Any, strict: bool) -> Any:
    message = f"torchmetrics_async cannot accelerate {obj!r:.200}; it is left unchanged."
    if strict:
        raise TypeError(message)
    warnings.warn(message, UserWarning, stacklevel=3)
    return obj


def _convert_instance(metric: Metric, strict: bool) -> Metric:
    target = _class_for_instance(type(metric))
    if target is None:
        return _unaccelerated(metric, strict)
    base = getattr(metric, "base_metric", None)
    if isinstance(base, Metric):
        _convert_instance(base, strict)
    if type(metric) is not target:
        metric.__class__ = target
        metric._adopt()
    return metric


def accelerate(obj: T, strict: bool = False) -> T:
    """Make torchmetrics metrics sync-free in place, or map a class to its accelerated class.

    Args:
        obj: a ``Metric`` instance (its class is swapped in place, states and options kept, mid-window too), a
            ``MetricCollection`` (every member), a ``dict``/``list``/``tuple`` of them, or a ``Metric`` subclass.
        strict: raise ``TypeError`` instead of warning for anything that cannot be accelerated.

    Returns:
        The same object (converted), or for a class its accelerated class. Anything that cannot be accelerated is
        returned unchanged after one ``UserWarning`` naming it.

    Raises:
        TypeError: with ``strict=True``, for anything that cannot be accelerated.

    Example:
        >>> import torchmetrics
        >>> metrics = accelerate({"loss": torchmetrics.MeanMetric(), "max": torchmetrics.MaxMetric()})
        >>> sorted(type(m).__module__ for m in metrics.values())
        ['torchmetrics_async.aggregation', 'torchmetrics_async.aggregation']
    """
    if isinstance(obj, type) and issubclass(obj, Metric):
        target = _class_for_instance(obj)
        return target if target is not None else _unaccelerated(obj, strict)
    if isinstance(obj, MetricCollection):
        for member in obj.values(copy_state=False):
            _convert_instance(member, strict)
        # compute() then syncs every member in one fused round (a subclass of the collection's own class).
        obj.__class__ = fused_collection_class(type(obj))
        return obj
    if isinstance(obj, Metric):
        return _convert_instance(obj, strict)
    if isinstance(obj, dict):
        for value in obj.values():
            accelerate(value, strict)
        return obj
    if isinstance(obj, (list, tuple)):
        for value in obj:
            accelerate(value, strict)
        return obj
    return _unaccelerated(obj, strict)


_PATCHED: list[tuple[ModuleType, str, Any]] = []


def _torchmetrics_modules() -> Iterator[ModuleType]:
    for name, module in list(sys.modules.items()):
        if module is not None and (name == "torchmetrics" or name.startswith("torchmetrics.")):
            yield module


class _PatchHandle:
    """What :func:`patch` returns: usable as ``with patch():`` to unpatch on exit."""

    def __init__(self, patched_now: bool) -> None:
        self._patched_now = patched_now

    def __enter__(self) -> "_PatchHandle":
        return self

    def __exit__(self, *exc: object) -> None:
        if self._patched_now:
            unpatch()


def patch() -> _PatchHandle:
    """Rebind torchmetrics' public names to the accelerated classes.

    Every loaded ``torchmetrics`` module attribute that is a registered torchmetrics class (``torchmetrics.MeanMetric``,
    ``torchmetrics.aggregation.MeanMetric``, ...) is replaced, so unchanged code that imports those names after this
    call, and torchmetrics' own code that looks them up at run time, gets the accelerated class. Names that user
    modules imported *before* the call keep the original class: call ``patch()`` first, or use :func:`accelerate`.
    Calling it again while patched does nothing.

    Returns:
        A handle; ``with patch():`` unpatches on exit (if this call did the patching).

    Example:
        >>> import torchmetrics
        >>> with patch():
        ...     print(torchmetrics.MeanMetric.__module__)
        torchmetrics_async.aggregation
        >>> torchmetrics.MeanMetric.__module__
        'torchmetrics.aggregation'
    """
    if _PATCHED:
        return _PatchHandle(patched_now=False)
    for module in _torchmetrics_modules():
        for name, value in list(vars(module).items()):
            if isinstance(value, type) and value in _REGISTRY:
                _PATCHED.append((module, name, value))
                setattr(module, name, _REGISTRY[value])
    return _PatchHandle(patched_now=True)


def unpatch() -> None:
    """Restore exactly the torchmetrics names :func:`patch` replaced.

    Example:
        >>> import torchmetrics
        >>> original = torchmetrics.SumMetric
        >>> _ = patch()
        >>> unpatch()
        >>> torchmetrics.SumMetric is original
        True
    """
    while _PATCHED:
        module, name, value = _PATCHED.pop()
        setattr(module, name, value)


def is_patched() -> bool:
    """Whether :func:`patch` is in effect.

    Returns:
        ``True`` between ``patch()`` and ``unpatch()``.

    Example:
        >>> is_patched()
        False
    """
    return bool(_PATCHED)
