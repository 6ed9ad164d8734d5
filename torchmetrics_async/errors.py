"""The package's own exception types (a leaf module: it imports nothing of the package)."""

__all__ = ["ShapeMismatchError"]


class ShapeMismatchError(ValueError, RuntimeError):
    """Inputs whose shapes do not fit together, raised at once (shapes are metadata: checking them is free).

    A ``ValueError`` (bad input) and a ``RuntimeError``, the type torchmetrics raises for these shapes, so callers that
    catch torchmetrics' type keep working.

    Example:
        >>> issubclass(ShapeMismatchError, RuntimeError), issubclass(ShapeMismatchError, ValueError)
        (True, True)
    """
