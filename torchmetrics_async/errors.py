"""The package's own exception types (a leaf module: it imports nothing of the package)."""

__all__ = ["ShapeMismatchError"]


class ShapeMismatchError(ValueError, RuntimeError):
    """Inputs whose shapes do not fit together, raised at once (shapes are metadata: checking them is free).

    A ``ValueError`` (bad input) and a ``RuntimeError``, the type torchmetrics raises for these shapes, so callers that
    catch torchmetrics' type keep working (as numpy's ``AxisError(ValueError, IndexError)``).

    Example:
        >>> import torch
        >>> from torchmetrics_async import MeanMetric
        >>> try:
        ...     MeanMetric().update(torch.ones(7), torch.ones(8))
        ... except RuntimeError as err:  # what torchmetrics' callers catch
        ...     print(isinstance(err, ShapeMismatchError), isinstance(err, ValueError))
        True True
    """
