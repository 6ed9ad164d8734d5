"""Sync-free classification metrics with torchmetrics' names (``torchmetrics.classification``).

Example:
    >>> import torch, torchmetrics
    >>> from torchmetrics_async.classification import MulticlassAccuracy
    >>> isinstance(MulticlassAccuracy(num_classes=3), torchmetrics.classification.MulticlassAccuracy)
    True
"""

from torchmetrics_async.classification.binary import *  # noqa: F403
from torchmetrics_async.classification.calibration import *  # noqa: F403
from torchmetrics_async.classification.confusion_derived import *  # noqa: F403
from torchmetrics_async.classification.curves import *  # noqa: F403
from torchmetrics_async.classification.fixed_point import *  # noqa: F403
from torchmetrics_async.classification.group_fairness import *  # noqa: F403
from torchmetrics_async.classification.hinge import *  # noqa: F403
from torchmetrics_async.classification.multiclass import *  # noqa: F403
from torchmetrics_async.classification.multilabel import *  # noqa: F403
from torchmetrics_async.classification.ranking import *  # noqa: F403
from torchmetrics_async.classification.roc_scores import *  # noqa: F403
from torchmetrics_async.classification.tasks import *  # noqa: F403

# Every class the star imports bring (the modules' own `__all__` also list their helpers, left out here).
__all__ = [
    name for name, value in list(globals().items()) if isinstance(value, type) and value.__module__.startswith(__name__)
]
