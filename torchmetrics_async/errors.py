"""The package's own exception types (a leaf module: it imports nothing of the package).

Example:
    >>> import torch
    >>> from torchmetrics_async import MeanMetric, ShapeMismatchError
    >>> try:
    ...     MeanMetric().update(torch.ones(7), torch.ones(8))
    ... except ShapeMismatchError as err:
    ...     print(isinstance(err, ValueError), isinstance(err, RuntimeError))
    True True
"""

__all__ = ["ShapeMismatchError"]


class ShapeMismatchError(ValueError, RuntimeError):
    """Inputs whose shapes do not fit together, raised at once (shapes are metadata: checking them is free).

    A ``ValueError`` (bad input) and a ``RuntimeError``, the type torchmetrics raises for these shapes, so callers that
    catch torchmetrics' type keep working (as numpy's ``AxisError(ValueError, IndexError)``).

    Example:
        >>> try:
        ...     raise ShapeMismatchError("`weight` of shape (8,) does not broadcast to `value` of shape (7,)")
        ... except RuntimeError as err:  # what torchmetrics' callers catch
        ...     print(isinstance(err, ValueError), err)
        True `weight` of shape (8,) does not broadcast to `value` of shape (7,)
    """
