"""The registry torchmetrics class -> accelerated class, filled by subclassing.

A class of this package registers itself when it is defined: any public class (name not starting with ``_``) defined
in a ``torchmetrics_async`` module whose bases include a torchmetrics class of the same name. So a new family is one
module that subclasses its torchmetrics origins; ``accelerate``, ``patch``, the coverage listing and the README table
read this registry and need no edit. Users' subclasses (defined outside the package) and the classes decorators
derive are never registered.

Example:
    >>> import torchmetrics
    >>> import torchmetrics_async
    >>> registry()[torchmetrics.MeanMetric] is torchmetrics_async.MeanMetric
    True
"""

from typing import Any

from torchmetrics_async._docs import accelerated_doc
from torchmetrics_async._torchmetrics import torchmetrics_origin

__all__ = ["AutoRegistered", "defined_in_package", "register", "registry"]

_REGISTRY: dict[type, type] = {}
_PACKAGE = __name__.split(".")[0]


def register(accelerated: type) -> type:
    """Register an accelerated class under the torchmetrics class of the same name it subclasses.

    Classes of this package register themselves (see :class:`AutoRegistered`); call this for a class defined
    elsewhere, e.g. a user's own sync-free implementation that ``patch()`` should install.

    Args:
        accelerated: a class that subclasses a torchmetrics class of the same name.

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


def defined_in_package(cls: type) -> bool:
    """Whether ``cls`` is one of this package's own classes (not a user's, not one a decorator derived).

    Example:
        >>> from torchmetrics_async import MeanMetric
        >>> defined_in_package(MeanMetric)
        True
    """
    return cls.__module__.split(".")[0] == _PACKAGE and "_decorator" not in vars(cls)


def _registers_itself(cls: type) -> bool:
    return defined_in_package(cls) and not cls.__name__.startswith("_") and torchmetrics_origin(cls) is not None


class AutoRegistered:
    """Base of the accelerated classes: a subclass of a torchmetrics class of the same name registers on definition.

    Example:
        >>> import torchmetrics
        >>> from torchmetrics_async.classification import BinaryAccuracy
        >>> issubclass(BinaryAccuracy, AutoRegistered) and registry()[torchmetrics.classification.BinaryAccuracy]
        <class 'torchmetrics_async.classification.binary.BinaryAccuracy'>
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if _registers_itself(cls):
            register(cls)
            cls.__doc__ = accelerated_doc(cls, torchmetrics_origin(cls))
