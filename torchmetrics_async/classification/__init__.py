"""Sync-free classification metrics with torchmetrics' names (``torchmetrics.classification``).

Example:
    >>> import torch, torchmetrics
    >>> from torchmetrics_async.classification import MulticlassAccuracy
    >>> isinstance(MulticlassAccuracy(num_classes=3), torchmetrics.classification.MulticlassAccuracy)
    True
"""

# The package's names: every class of its modules (their `__all__` also lists helpers, left out here).
from torchmetrics_async.classification import (
    binary,
    calibration,
    confusion_derived,
    curves,
    fixed_point,
    group_fairness,
    hinge,
    multiclass,
    multilabel,
    ranking,
    roc_scores,
    tasks,
)
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

_MODULES = (binary, calibration, confusion_derived, curves, fixed_point, group_fairness, hinge, multiclass, multilabel)
__all__ = [
    name
    for module in (*_MODULES, ranking, roc_scores, tasks)
    for name in module.__all__
    if isinstance(getattr(module, name), type)
]
