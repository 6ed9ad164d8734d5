"""``accelerate()`` and ``patch()``/``unpatch()``, over the classes :mod:`torchmetrics_async.registry` resolves.

Example:
    >>> import torch, torchmetrics
    >>> from torchmetrics_async import accelerate
    >>> metric = torchmetrics.MeanMetric()
    >>> metric.update(torch.tensor(2.0))
    >>> accelerate(metric) is metric, type(metric).__module__, metric.compute()
    (True, 'torchmetrics_async.aggregation', tensor(2.))
"""

import functools
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
    _DERIVED_BY,
    _REGISTRY,
    EXPLAINED,
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
        reason = why_not_accelerated(obj)
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
        if type(obj) in _SYNCING_WRAPPERS:  # MultioutputWrapper: left as it is, with the reason
            steps.append((obj, None))
    elif isinstance(obj, Metric):
        target = accelerated_class_for(type(obj))
        if target is not None and isinstance(obj, WrapperMetric):  # Running, MinMaxMetric...: their base metrics first
            planned = len(steps)
            _plan_held(obj, steps)
            if any(to is None for _, to in steps[planned:]) or why_not_accelerated(obj):
                target = None  # over a base that stays torchmetrics', or with arguments that sync: left as it is
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


# What patch() replaced: (module or class, attribute, the value it had; _ABSENT where it had none of its own).
_PATCHED: list[tuple[ModuleType | type, str, Any]] = []
_ABSENT = object()
# torchmetrics wrappers that sync themselves: accelerate() converts what they hold, and names them.
_SYNCING_WRAPPERS = [cls for cls in EXPLAINED if issubclass(cls, WrapperMetric)]
_CANNOT: set[type] = set()  # classes patch() has warned it cannot accelerate (once each)


def _target_of(cls: type) -> type | None:
    """The class ``accelerate()`` makes of an instance of ``cls``: itself if accelerated, ``None`` if it cannot."""
    return fused_collection_class(cls) if issubclass(cls, MetricCollection) else accelerated_class_for(cls)


def _cannot(cls: type, why: str) -> None:
    if cls not in _CANNOT:
        _CANNOT.add(cls)
        message = f"patch() cannot accelerate {why}. Its instances are built as they are."
        warnings.warn(message, UserWarning, stacklevel=4)


def _hooked_init(cls: type) -> Any:
    """``cls.__init__`` while patched: an object whose class finds it first is built as ``accelerate()``'s class.

    That is a direct construction of the accelerated class (its own ``__init__`` and setup), whatever name ``cls`` was
    found by. Reached from a subclass's own ``__init__`` instead, the construction has begun and is left as it is.
    """
    own = vars(cls).get("__init__") or functools.wraps(cls.__init__)(
        lambda self, *args, **kwargs: super(cls, self).__init__(*args, **kwargs)  # a class without one: the next
    )

    @functools.wraps(own)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        built = type(self)
        target = _target_of(built)
        if target is None or target is built:
            base = torchmetrics_base(built)
            if target is None and built in _SYNCING_WRAPPERS:  # it holds accelerated metrics, but syncs itself
                _cannot(built, f"{built.__qualname__}: {EXPLAINED[built]}")
            elif target is None and base in _REGISTRY and _DERIVED_BY not in vars(built):  # decorated ones are as meant
                _cannot(
                    built,
                    f"{built.__qualname__}: its bases and those of the accelerated {_REGISTRY[base].__name__} have no"
                    " consistent MRO (multiple inheritance), so it cannot be rebased on that class",
                )
        elif built.__init__ is __init__ and target.__new__ is built.__new__:
            self.__class__ = target
            return target.__init__(self, *args, **kwargs)
        elif built.__init__ is __init__:  # the target picks its class in __new__ (wrappers.Running): adopt it
            own(self, *args, **kwargs)
            accelerate(self)
            return None
        else:
            _cannot(
                built,
                f"{built.__qualname__}: its own __init__ was defined after patch() on a class bound before it"
                " (use accelerate(), or import the torchmetrics name after patch())",
            )
        return own(self, *args, **kwargs)

    return __init__


def _hooked_classes() -> list[type]:
    """The classes whose ``__init__`` patch() hooks: those ``accelerate()`` converts, and the wrappers that sync."""
    found, todo = set(), [*_REGISTRY, MetricCollection]
    while todo:
        cls = todo.pop()
        if cls not in found:
            found.add(cls)
            todo.extend(cls.__subclasses__())
    return [cls for cls in found if _target_of(cls) not in (None, cls)] + _SYNCING_WRAPPERS


def _replace(owner: ModuleType | type, name: str, value: Any) -> None:
    _PATCHED.append((owner, name, vars(owner).get(name, _ABSENT)))
    setattr(owner, name, value)


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
    """Make every torchmetrics metric and ``MetricCollection`` built from now on what :func:`accelerate` makes of it.

    torchmetrics' public names (``torchmetrics.MeanMetric``, ...) are rebound to the accelerated classes, and
    construction is hooked (``__init__``), so a class imported before (``from torchmetrics import MeanMetric``), a
    user's subclass of one and a ``MetricCollection`` built later are accelerated too, as if built from the accelerated
    class. Objects that exist already, and copies or unpickled objects (no ``__init__``), are left as they are (use
    :func:`accelerate`). What it cannot cover it names in one ``UserWarning`` per class. Calling it again while patched
    does nothing; ``with patch():`` unpatches on exit.

    Example:
        >>> import torchmetrics
        >>> with patch():
        ...     print(torchmetrics.MeanMetric.__module__)
        torchmetrics_async.aggregation
    """
    if _PATCHED:
        return _PatchHandle(patched_now=False)
    # torchmetrics' own MetricCollection groups accelerated members too (see torchmetrics_async.compute_groups).
    _replace(MetricCollection, "_equal_metric_states", staticmethod(equal_metric_states))
    for cls in _hooked_classes():
        _replace(cls, "__init__", _hooked_init(cls))
    for module_name, module in list(sys.modules.items()):
        if module is None or module_name.split(".")[0] != "torchmetrics":
            continue
        for name, value in list(vars(module).items()):
            if not isinstance(value, type):
                continue
            # torchmetrics' deprecated aliases (torchmetrics.RetrievalMAP) get their rebased class: they still warn.
            accelerated = _REGISTRY.get(value) or (accelerated_class_for(value) if is_deprecated_alias(value) else None)
            if accelerated is not None:
                _replace(module, name, accelerated)
    return _PatchHandle(patched_now=True)


def unpatch() -> None:
    """Restore exactly the torchmetrics names and construction hooks :func:`patch` replaced."""
    while _PATCHED:
        owner, name, value = _PATCHED.pop()
        if value is _ABSENT:
            delattr(owner, name)
        else:
            setattr(owner, name, value)


def is_patched() -> bool:
    """Whether :func:`patch` is in effect (between ``patch()`` and ``unpatch()``)."""
    return bool(_PATCHED)
