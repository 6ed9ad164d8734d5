"""Class resolution: torchmetrics class -> accelerated class, classes derived from users' classes, and why not.

A public class of a ``torchmetrics_async`` module that subclasses a torchmetrics class of the same name registers
itself on definition; ``accelerate``, ``patch`` and coverage read the registry. Derived classes keep their origin's
name and pickle by re-deriving from it.

Example:
    >>> import torchmetrics
    >>> import torchmetrics_async
    >>> registry()[torchmetrics.MeanMetric] is torchmetrics_async.MeanMetric
    True
"""

import importlib
import inspect
import os
from collections.abc import Callable
from typing import Any

from torchmetrics_async._docs import accelerated_doc
from torchmetrics_async._torchmetrics import BaseAggregator, Metric
from torchmetrics_async.unaccelerated import EXPLAINED, SYNC_FREE_AS_IS, SYNCING_ARGUMENTS, VERIFIED_SYNC_FREE

__all__ = [
    "EXPLAINED",
    "SYNCING_ARGUMENTS",
    "SYNC_FREE_AS_IS",
    "VERIFIED_SYNC_FREE",
    "AutoRegistered",
    "accelerated_class_for",
    "defined_in_package",
    "derive",
    "is_deprecated_alias",
    "is_torchmetrics_class",
    "note_one_pass_methods",
    "register",
    "register_on_definition",
    "registry",
    "torchmetrics_base",
    "torchmetrics_origin",
    "uses_one_pass_forward",
    "why_not_accelerated",
]

_REGISTRY: dict[type, type] = {}
_PACKAGE = __name__.split(".")[0]
# Class attribute of a derived class: the function that derives it from the class it decorates (see derive()).
_DERIVED_BY = "_decorator"
_DERIVED: dict[tuple[Callable, type], type] = {}


def torchmetrics_origin(cls: type) -> type | None:
    """The torchmetrics class of the same name that ``cls`` subclasses (what it stands in for), or ``None``."""
    for base in cls.__mro__[1:]:
        if base.__module__.split(".")[0] == "torchmetrics" and base.__name__ == cls.__name__:
            return base
    return None


def is_torchmetrics_class(cls: type) -> bool:
    """Whether ``cls`` is torchmetrics' own (defined in the ``torchmetrics`` package, not derived from one)."""
    return cls.__module__.split(".")[0] == "torchmetrics" and _DERIVED_BY not in vars(cls)


def torchmetrics_base(cls: type) -> type | None:
    """The nearest torchmetrics class in the MRO of ``cls`` (``cls`` itself if it is one), or ``None``."""
    return next((base for base in cls.__mro__ if is_torchmetrics_class(base)), None)


def register(accelerated: type) -> type:
    """Register an accelerated class under the torchmetrics class of the same name it subclasses.

    Package classes register themselves; call this (or use it as a class decorator) for a class defined elsewhere
    that ``patch()`` should install. ``TypeError`` if no base class is a torchmetrics class of the same name.
    """
    origin = torchmetrics_origin(accelerated)
    if origin is None:
        raise TypeError(f"{accelerated.__qualname__} does not subclass a torchmetrics class of the same name.")
    _REGISTRY[origin] = accelerated
    return accelerated


def registry() -> dict[type, type]:
    """A copy of the registry: torchmetrics class -> accelerated class."""
    return dict(_REGISTRY)


def defined_in_package(cls: type) -> bool:
    """Whether ``cls`` is one of this package's own classes (not a user's, not a derived one)."""
    return cls.__module__.split(".")[0] == _PACKAGE and _DERIVED_BY not in vars(cls)


def register_on_definition(cls: type) -> None:
    """Register ``cls``, with its docstring, if it is a package class subclassing a torchmetrics class by name."""
    origin = torchmetrics_origin(cls)
    if defined_in_package(cls) and not cls.__name__.startswith("_") and origin is not None:
        register(cls)
        cls.__doc__ = accelerated_doc(cls, origin)


class AutoRegistered:
    """Base of classes that are no metric of this package (the task wrappers): registers them on definition."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        register_on_definition(cls)


# The update/compute functions of this package's one-pass classes (see uses_one_pass_forward).
_ONE_PASS_METHODS: set[Callable] = set()
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def note_one_pass_methods(cls: type) -> None:
    """Note ``cls``'s ``update`` and ``compute`` as one-pass methods where they are defined in this package's source."""
    for name in ("update", "compute"):
        # As resolved on cls (a package mixin may define it), and in this package's source (not merely a module name).
        method = getattr(cls, name, None)
        code = getattr(method, "__code__", None)
        if code is not None and os.path.dirname(code.co_filename).startswith(_PACKAGE_DIR):
            _ONE_PASS_METHODS.add(method)


def uses_one_pass_forward(cls: type) -> bool:
    """Whether ``forward`` reduces the batch once for ``cls``: its ``update`` and ``compute`` are ours.

    Example:
        >>> import torchmetrics_async
        >>> uses_one_pass_forward(torchmetrics_async.MeanMetric)
        True
    """
    return getattr(cls, "update", None) in _ONE_PASS_METHODS and getattr(cls, "compute", None) in _ONE_PASS_METHODS


def _rebuild(decorator: Callable[[type], type], module: str, qualname: str, state: dict) -> Any:
    """Unpickle an instance of a derived class, found by the name the derived class was given."""
    found: Any = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part)
    # `@decorator class X` binds X to the derived class; `Y = decorator(X)` leaves X as it was.
    cls = found if getattr(found, _DERIVED_BY, None) is decorator else decorator(found)
    obj = cls.__new__(cls)
    obj.__setstate__(state)
    return obj


def _reduce(self: Any) -> tuple:
    cls = type(self)
    return _rebuild, (getattr(cls, _DERIVED_BY), cls.__module__, cls.__qualname__, self.__getstate__())


def derive(decorator: Callable[[type], type], cls: type, bases: tuple, namespace: dict) -> type:
    """The subclass ``decorator`` makes of ``cls`` (created once per decorator and class).

    It keeps the name, module and docstring of ``cls``, is neither registered nor taken for torchmetrics' own, and
    pickles by name: unpickling finds ``cls`` again and applies ``decorator`` (a module-level function) to it.
    """
    key = (decorator, cls)
    if key not in _DERIVED:
        namespace = {
            **namespace,
            "__module__": cls.__module__,
            "__qualname__": cls.__qualname__,
            "__doc__": cls.__doc__,
            _DERIVED_BY: staticmethod(decorator),
            "_decorated": cls,
            "__reduce__": _reduce,
        }
        _DERIVED[key] = type(cls.__name__, bases, namespace)
    return _DERIVED[key]


def _rebased(cls: type) -> type | None:
    """A user subclass (or deprecated alias) of a registered torchmetrics class, rebased on its accelerated class."""
    if (is_torchmetrics_class(cls) and not is_deprecated_alias(cls)) or _DERIVED_BY in vars(cls):
        return None
    origin = torchmetrics_base(cls.__base__ if is_deprecated_alias(cls) else cls)
    if origin not in _REGISTRY:
        return None
    try:
        return derive(_rebase, cls, (cls, _REGISTRY[origin]), {})
    except TypeError:  # no consistent MRO (a user's multiple inheritance): not accelerated
        return None


def is_deprecated_alias(cls: type) -> bool:
    """Whether ``cls`` is one of torchmetrics' deprecated top-level aliases, rebased as users' subclasses are.

    Example:
        >>> import torchmetrics
        >>> is_deprecated_alias(torchmetrics.RetrievalMAP), is_deprecated_alias(torchmetrics.retrieval.RetrievalMAP)
        (True, False)
    """
    return cls.__module__.split(".")[0] == "torchmetrics" and cls.__module__.endswith("._deprecated")


def _rebase(cls: type) -> type:
    """What unpickling an instance of a rebased user subclass calls (see :func:`derive`): rebase ``cls`` again."""
    rebased = _rebased(cls)
    if rebased is None:
        raise TypeError(f"{cls.__qualname__} no longer subclasses an accelerated torchmetrics class.")
    return rebased


def accelerated_class_for(cls: type) -> type | None:
    """The accelerated class for ``cls``: registered, ``cls`` if accelerated, a rebased user subclass, or ``None``.

    Example:
        >>> import torchmetrics
        >>> accelerated_class_for(torchmetrics.text.WordErrorRate) is None
        True
    """
    if cls in _REGISTRY:
        return _REGISTRY[cls]
    if set(_REGISTRY.values()).intersection(cls.__mro__):  # an accelerated class or a subclass (a rebased one too)
        return cls
    return _rebased(cls)


NOT_YET = (
    "not yet accelerated: torchmetrics' own update() and forward() run unchanged, not checked for host syncs"
    " (value checks and data-dependent shapes are the usual ones)"
)


def _is_task_wrapper(cls: type) -> bool:
    """Whether ``cls`` is a task wrapper like ``torchmetrics.Accuracy`` (``__new__`` builds a task metric)."""
    new = cls.__new__
    try:
        return new is not object.__new__ and "task" in inspect.signature(new).parameters
    except (TypeError, ValueError):
        return False


def why_not_accelerated(cls: type | Metric) -> str:
    """A short reason why ``cls`` (torchmetrics' or a user's ``Metric`` subclass) is not accelerated (``""`` if it is).

    Given an instance, its arguments count too: one listed in :data:`SYNCING_ARGUMENTS` is not accelerated.

    Example:
        >>> import torchmetrics
        >>> why_not_accelerated(torchmetrics.text.WordErrorRate).startswith("takes strings")
        True
        >>> base = torchmetrics.MeanMetric()
        >>> why_not_accelerated(torchmetrics.wrappers.BootStrapper(base, sampling_strategy="multinomial"))
        ''
        >>> why_not_accelerated(torchmetrics.wrappers.BootStrapper(base)).startswith("sampling_strategy='poisson'")
        True
    """
    if not isinstance(cls, type):
        return _syncing_arguments(cls) or _class_reason(type(cls))
    return _class_reason(cls)


def _class_reason(cls: type) -> str:
    if accelerated_class_for(cls) is not None:
        return ""
    if is_torchmetrics_class(cls):
        return _torchmetrics_reason(cls)
    if _DERIVED_BY in vars(cls):
        decorator, decorated = getattr(cls, _DERIVED_BY).__name__, vars(cls)["_decorated"].__name__
        return (
            f"made by the {decorator} decorator from {decorated}, which is not accelerated; the decorator's"
            " generic accelerations apply, but update() may still make host syncs"
        )
    base = torchmetrics_base(cls)
    if base is None or base is Metric:
        return (
            "a user Metric subclass: its update() runs as written (the sync_free decorator applies the generic"
            " accelerations: in-place reset, Python numbers without copies)"
        )
    if base is BaseAggregator:
        return (
            "a user BaseAggregator subclass: its update() runs as written with torchmetrics' NaN check, a host sync"
            " (decorate the class with sync_free to make the NaN handling sync-free)"
        )
    return f"subclasses torchmetrics' {base.__name__}, which is {_torchmetrics_reason(base)}"


def _syncing_arguments(metric: Metric) -> str:
    """The reason :data:`SYNCING_ARGUMENTS` gives for ``metric``'s arguments (``""``: none listed syncs)."""
    attribute, value, reason = SYNCING_ARGUMENTS.get(torchmetrics_base(type(metric)), ("", None, ""))
    return reason if attribute and getattr(metric, attribute, None) == value else ""


def _listed_reason(cls: type) -> str:
    """The reason the tables of :mod:`~torchmetrics_async.unaccelerated` give for ``cls`` (``""``: not listed)."""
    if cls in VERIFIED_SYNC_FREE:
        note = VERIFIED_SYNC_FREE[cls]
        return f"{SYNC_FREE_AS_IS}: torchmetrics' own update() and forward() make no host sync; {note}"
    return EXPLAINED.get(cls, "")


def _torchmetrics_reason(cls: type) -> str:
    if listed := _listed_reason(cls):
        return listed
    if cls is Metric or cls is BaseAggregator or getattr(cls.update, "__isabstractmethod__", False):
        return "a base class: torchmetrics' metrics subclass it; it computes nothing itself"
    if _is_task_wrapper(cls):
        return "a task wrapper whose task-specific classes are not accelerated (the wrapper builds torchmetrics' own)"
    if cls.__module__.startswith("torchmetrics.wrappers."):
        return (
            "a wrapper: its own update() and forward() are torchmetrics'; accelerate() converts the metrics it wraps"
            " and leaves the wrapper itself as it is"
        )
    accelerated_bases = [base.__name__ for base in cls.__mro__[1:] if base in _REGISTRY]
    if accelerated_bases:
        return f"{NOT_YET}; it subclasses the accelerated {accelerated_bases[0]} but its own methods are torchmetrics'"
    return NOT_YET
