"""Compute groups with accelerated members: torchmetrics' state comparison, blind to this package's extra states.

Example:
    >>> import torch, torchmetrics
    >>> from torchmetrics_async.classification import MulticlassConfusionMatrix
    >>> cm, kappa = MulticlassConfusionMatrix(num_classes=3), torchmetrics.classification.MulticlassCohenKappa(3)
    >>> for metric in (cm, kappa):
    ...     metric.update(torch.tensor([0, 2, 1]), torch.tensor([0, 1, 1]))
    >>> equal_metric_states(cm, kappa)
    True
"""

from typing import Any

from torchmetrics_async._torchmetrics import equal_metric_states as _torchmetrics_equal_metric_states

__all__ = ["equal_metric_states"]


class _StatesWithout:
    """A metric as torchmetrics' comparison sees it, with some state names left out of ``_defaults``."""

    def __init__(self, metric: Any, hidden: set[str]) -> None:
        self._metric = metric
        self._defaults = {name: value for name, value in metric._defaults.items() if name not in hidden}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._metric, name)


def _extra_states(metric: Any) -> tuple[str, ...]:
    extra = getattr(metric, "_extra_states", None)
    return extra() if callable(extra) else ()


def equal_metric_states(metric1: Any, metric2: Any) -> bool:
    """Torchmetrics' ``MetricCollection._equal_metric_states``, ignoring the states this package adds."""
    hidden = set(_extra_states(metric1)) | set(_extra_states(metric2))
    if not hidden:
        return _torchmetrics_equal_metric_states(metric1, metric2)
    return _torchmetrics_equal_metric_states(_StatesWithout(metric1, hidden), _StatesWithout(metric2, hidden))
