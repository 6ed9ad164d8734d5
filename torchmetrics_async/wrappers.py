"""torchmetrics' wrappers over sync-free metrics: ``Running`` around any accelerated base metric.

torchmetrics' ``Running`` resets its base every step, which around an accelerated base would read the base's deferred
flags every step; this one reports them itself (see :class:`~torchmetrics_async.aggregation.SyncFreeRunning`).

Example:
    >>> import torch
    >>> from torchmetrics_async import SumMetric
    >>> from torchmetrics_async.wrappers import Running
    >>> metric = Running(SumMetric(), window=2)
    >>> for x in (1.0, 2.0, 3.0):
    ...     _ = metric(torch.tensor(x))
    >>> metric.compute()
    tensor(5.)
"""

from typing import Any

from torchmetrics_async._torchmetrics import Metric, rank_zero_warn
from torchmetrics_async._torchmetrics import Running as _TorchmetricsRunning
from torchmetrics_async.accelerate import accelerate, accelerated_class_for
from torchmetrics_async.aggregation import SyncFreeRunning
from torchmetrics_async.metric import SyncFreeMixin

__all__ = ["Running"]


class Running(SyncFreeRunning, _TorchmetricsRunning):
    """No host read per step over an accelerated ``base_metric`` (a torchmetrics one is converted in place)."""

    def __new__(cls, base_metric: Any = None, *args: Any, **kwargs: Any) -> Any:
        """This class around an accelerated base, torchmetrics' ``Running`` (after one warning) otherwise."""
        # Anything but a metric (unpickling passes torchmetrics' __getnewargs__) is left to __init__ to judge.
        if not isinstance(base_metric, Metric) or isinstance(base_metric, SyncFreeMixin):
            return super().__new__(cls)
        if accelerated_class_for(type(base_metric)) is not None:
            accelerate(base_metric)
            return super().__new__(cls)
        key = type(base_metric).__qualname__
        if key not in _FELL_BACK:
            _FELL_BACK.add(key)
            rank_zero_warn(
                f"Running({key}): the base metric is not accelerated, so torchmetrics' own Running is used (a host"
                " read per update where the base has deferred checks).",
                UserWarning,
            )
        fallback = _TorchmetricsRunning.__new__(_TorchmetricsRunning)
        fallback.__init__(base_metric, *args, **kwargs)
        return fallback


_FELL_BACK: set[str] = set()
