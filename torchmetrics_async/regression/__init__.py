"""Sync-free regression metrics with torchmetrics' names: ``from torchmetrics_async.regression import R2Score``."""

from torchmetrics_async.regression.divergence import *  # noqa: F403
from torchmetrics_async.regression.errors import *  # noqa: F403
from torchmetrics_async.regression.moments import *  # noqa: F403
from torchmetrics_async.regression.stored_inputs import *  # noqa: F403
from torchmetrics_async.regression.tweedie import *  # noqa: F403

# Every class the star imports bring (the modules' own `__all__` also list their helpers, left out here).
__all__ = [
    name for name, value in list(globals().items()) if isinstance(value, type) and value.__module__.startswith(__name__)
]
