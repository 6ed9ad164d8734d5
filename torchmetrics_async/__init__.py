"""torchmetrics-async: torchmetrics without host syncs in ``update()``/``forward()``.

Swap one import (``from torchmetrics_async import MeanMetric``) or one line (``accelerate(metric)``).

Example:
    >>> import torch, torchmetrics
    >>> import torchmetrics_async
    >>> metric = torchmetrics_async.MeanMetric()
    >>> isinstance(metric, torchmetrics.MeanMetric)
    True
"""

from torchmetrics_async.aggregation import (
    CatMetric,
    MaxMetric,
    MeanMetric,
    MinMetric,
    RunningMean,
    RunningSum,
    SumMetric,
)

__all__ = [
    "CatMetric",
    "MaxMetric",
    "MeanMetric",
    "MinMetric",
    "RunningMean",
    "RunningSum",
    "SumMetric",
]
