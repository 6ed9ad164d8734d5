"""``accelerate()`` and ``patch()``/``unpatch()``, over the classes :mod:`torchmetrics_async.registry` resolves.

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
from types import ModuleType
from typing import Any, TypeVar

from torch import nn
from torchmetrics import MetricCollection

from torchmetrics_async._torchmetrics import CompositionalMetric, Metric, MetricTracker, Running, WrapperMetric
from torchmetrics_async.compute_groups import equal_metric_states
from torchmetrics_async.distributed.collection import fused_collection_class
from torchmetrics_async.registry import (
    _REGISTRY,
    accelerated_class_for,
    is_deprecated_alias,
    is_torchmetrics_class,
    register,
    registry,
    torchmetrics_base,
    why_not_accelerated,
)

__all__ = [
    "accelerate",
    "accelerated_class_for",
    "is_patched",
    "is_torchmetrics_class",
    "patch",
    "register",
    "registry",
    "torchmetrics_base",
    "unpatch",
]

T = TypeVar("T")


def _why_not(obj: Any) -> str:
    if isinstance(obj, type) and issubclass(obj, Metric):
        return f"{obj.__name__}: {why_not_accelerated(obj)}"
    if isinstance(obj, Metric):
        reason = why_not_accelerated(type(obj))
        held = (m for m in obj.modules() if m is not obj and isinstance(m, Metric))
        base = next((m for m in held if accelerated_class_for(type(m)) is None), None)
        if not reason and base is not None:
            reason = f"its base metric {type(base).__name__} is not accelerated, so the wrapper is left as it is too"
        return f"{type(obj).__name__}: {reason}"
    return f"{obj!r:.200} is not a torchmetrics Metric, MetricCollection or a container of them"


def _holds_convertible_metrics(obj: Any) -> bool:
    """A torchmetrics wrapper or composition (not ``Running``, converted itself) whose inner metrics are converted."""
    return (
        isinstance(obj, (WrapperMetric, MetricTracker, CompositionalMetric))
        and not isinstance(obj, Running)
        and is_torchmetrics_class(type(obj))
        and type(obj) not in _REGISTRY
    )


# One step of a conversion: (object, class it becomes); the class is None for something that cannot be accelerated.
_Step = tuple[Any, type | None]


def _plan_held(module: nn.Module, steps: list[_Step]) -> None:
    """Plan the metrics a wrapper or composition holds: its child modules, through ``ModuleList``/``ModuleDict``."""
    for child in module.children():
        if isinstance(child, (Metric, MetricCollection, MetricTracker)):
            _plan(child, steps)
        elif isinstance(child, (nn.ModuleList, nn.ModuleDict)):
            _plan_held(child, steps)


def _plan(obj: Any, steps: list[_Step]) -> None:
    """Append what converting ``obj`` takes, inner objects first (a base metric before its ``Running``)."""
    if isinstance(obj, type) and issubclass(obj, Metric):
        steps.append((obj, accelerated_class_for(obj)))
    elif isinstance(obj, MetricCollection):
        for member in obj.values(copy_state=False):
            _plan(member, steps)
        # compute() then syncs every member in one fused round (a subclass of the collection's own class).
        steps.append((obj, fused_collection_class(type(obj))))
    elif _holds_convertible_metrics(obj):
        _plan_held(obj, steps)
    elif isinstance(obj, Metric):
        target = accelerated_class_for(type(obj))
        if target is not None and isinstance(obj, WrapperMetric):  # Running, MinMaxMetric: their base metrics first
            planned = len(steps)
            _plan_held(obj, steps)
            if any(to is None for _, to in steps[planned:]):
                target = None  # a wrapper over a base that stays torchmetrics' stays torchmetrics' too
        steps.append((obj, target))
    elif isinstance(obj, (dict, list, tuple)):
        for value in obj.values() if isinstance(obj, dict) else obj:
            _plan(value, steps)
    else:
        steps.append((obj, None))


def _convert(obj: Any, target: type) -> None:
    if isinstance(obj, type) or type(obj) is target:  # a class maps, it is not converted; a repeated object is done
        return
    obj.__class__ = target
    if isinstance(obj, Metric):
        obj._setup_sync_free()


def accelerate(obj: T, strict: bool = False) -> T:
    """Make torchmetrics metrics sync-free in place (and return them), or return a class's accelerated class.

    ``obj``: a ``Metric`` (its class swapped, states and options kept), a ``MetricCollection`` (every member), a
    torchmetrics wrapper or composition (the metrics it holds; it stays torchmetrics'), a ``dict``/``list``/``tuple`` of
    them, or a ``Metric`` subclass. What cannot be accelerated is left unchanged after a ``UserWarning`` naming it;
    with ``strict=True`` a ``TypeError`` names all of it and nothing is converted.
    """
    steps: list[_Step] = []
    _plan(obj, steps)
    refused = [_why_not(thing) for thing, target in steps if target is None]
    if strict and refused:
        raise TypeError(
            f"torchmetrics_async cannot accelerate {'; '.join(refused)}. With strict=True nothing was converted."
        )
    for reason in refused:
        warnings.warn(
            f"torchmetrics_async cannot accelerate {reason}. It is left unchanged.", UserWarning, stacklevel=2
        )
    for thing, target in steps:
        if target is not None:
            _convert(thing, target)
    if isinstance(obj, type) and issubclass(obj, Metric):
        return steps[0][1] or obj  # type: ignore[return-value]
    return obj


_PATCHED: list[tuple[ModuleType, str, Any]] = []


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
    """Rebind torchmetrics' public names (``torchmetrics.MeanMetric``, ...) to the accelerated classes.

    Names imported before keep the original class (call ``patch()`` first, or use :func:`accelerate`). Calling it again
    while patched does nothing; ``with patch():`` unpatches on exit.

    Example:
        >>> import torchmetrics
        >>> with patch():
        ...     print(torchmetrics.MeanMetric.__module__)
        torchmetrics_async.aggregation
    """
    if _PATCHED:
        return _PatchHandle(patched_now=False)
    # torchmetrics' own MetricCollection groups accelerated members too (see torchmetrics_async.compute_groups).
    _PATCHED.append((MetricCollection, "_equal_metric_states", MetricCollection.__dict__["_equal_metric_states"]))
    MetricCollection._equal_metric_states = staticmethod(equal_metric_states)
    for module_name, module in list(sys.modules.items()):
        if module is None or module_name.split(".")[0] != "torchmetrics":
            continue
        for name, value in list(vars(module).items()):
            if not isinstance(value, type):
                continue
            # torchmetrics' deprecated aliases (torchmetrics.RetrievalMAP) get their rebased class: they still warn.
            accelerated = _REGISTRY.get(value) or (accelerated_class_for(value) if is_deprecated_alias(value) else None)
            if accelerated is not None:
                _PATCHED.append((module, name, value))
                setattr(module, name, accelerated)
    return _PatchHandle(patched_now=True)


def unpatch() -> None:
    """Restore exactly the torchmetrics names :func:`patch` replaced."""
    while _PATCHED:
        module, name, value = _PATCHED.pop()
        setattr(module, name, value)


def is_patched() -> bool:
    """Whether :func:`patch` is in effect (between ``patch()`` and ``unpatch()``)."""
    return bool(_PATCHED)
