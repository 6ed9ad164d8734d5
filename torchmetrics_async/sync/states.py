"""Metric-state entries: which metrics a sync covers, which of them the fused sync may take over, one state each.

Example:
    >>> from torchmetrics_async import SumMetric
    >>> metric = SumMetric()
    >>> list(_collect_metrics({"a": metric, "b": [metric]}, {}).values()) == [metric], _fusable_metric(metric)
    (True, True)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from torchmetrics_async._torchmetrics import (
    Metric,
    dim_zero_max,
    dim_zero_mean,
    dim_zero_min,
    dim_zero_sum,
    gather_all_tensors,
    rank_zero_warn,
)
from torchmetrics_async._torchmetrics import (
    MetricCollection as _TorchMetricsCollection,
)

__all__: list[str] = []

#: The reductions of fusable metric states, as the bucket op names them.
_STATE_OPS: dict[Callable, str] = {dim_zero_sum: "sum", dim_zero_mean: "mean", dim_zero_max: "max", dim_zero_min: "min"}
_ANNOUNCED: set[tuple[str, str]] = set()


def _collect_metrics(metrics: Any, into: dict[int, Metric]) -> dict[int, Metric]:
    if isinstance(metrics, _TorchMetricsCollection):
        for member in metrics.values(copy_state=False):  # links compute-group states, as its compute does
            _collect_metrics(member, into)
    elif isinstance(metrics, Metric):
        into.setdefault(id(metrics), metrics)
    elif isinstance(metrics, Mapping):
        for member in metrics.values():
            _collect_metrics(member, into)
    elif isinstance(metrics, (list, tuple)):
        for member in metrics:
            _collect_metrics(member, into)
    else:
        raise TypeError(f"Expected a Metric, a MetricCollection, or a dict/list of them; got {type(metrics).__name__}.")
    return into


def _fused_sync_dists() -> tuple[Callable, ...]:
    from torchmetrics_async.metric import SyncFreeMixin  # metric.py imports this module: resolve at call time

    return (Metric._sync_dist, SyncFreeMixin._sync_dist)


def _fusable_metric(metric: Metric) -> bool:
    """Whether ``metric.sync()`` would run the stock ``_sync_dist`` with the stock ``gather_all_tensors``."""
    return metric.dist_sync_fn in (None, gather_all_tensors) and type(metric)._sync_dist in _fused_sync_dists()


class _Entry:
    """One state to sync: the (metric, attribute) that holds it and how it is reduced."""

    __slots__ = ("attr", "fn", "metric", "value")

    def __init__(self, metric: Metric, attr: str, value: Any, fn: Callable | None) -> None:
        self.metric = metric
        self.attr = attr
        self.value = value
        self.fn = fn


def _announce_fallback(metric: Metric, attr: str, fn: Any) -> None:
    key = (type(metric).__qualname__, attr)
    if key not in _ANNOUNCED:
        _ANNOUNCED.add(key)
        rank_zero_warn(
            f"{type(metric).__name__}.{attr}: a list state reduced with {getattr(fn, '__name__', fn)!r} syncs through"
            " torchmetrics' gather_all_tensors (a barrier and gathers per element), not the fused sync.",
            UserWarning,
        )
