"""Sync-free regression metrics with torchmetrics' names: ``from torchmetrics_async.regression import R2Score``."""

# The package's names: every class of its modules (their `__all__` also lists helpers, left out here).
from torchmetrics_async.regression import divergence, errors, moments, stored_inputs, tweedie
from torchmetrics_async.regression.divergence import *  # noqa: F403
from torchmetrics_async.regression.errors import *  # noqa: F403
from torchmetrics_async.regression.moments import *  # noqa: F403
from torchmetrics_async.regression.stored_inputs import *  # noqa: F403
from torchmetrics_async.regression.tweedie import *  # noqa: F403

__all__ = [
    name
    for module in (divergence, errors, moments, stored_inputs, tweedie)
    for name in module.__all__
    if isinstance(getattr(module, name), type)
]
