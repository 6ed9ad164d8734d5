"""Metric-state entries: which metrics a sync covers, which of them the fused sync may take over, one state each."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, TypeVar

from torchmetrics_async._torchmetrics import Metric, gather_all_tensors, rank_zero_warn
from torchmetrics_async._torchmetrics import MetricCollection as _TorchMetricsCollection

__all__ = ["fused_sync_dist"]

_ANNOUNCED: set[tuple[str, str]] = set()


def _collect_metrics(metrics: Any, labels: dict[int, str], prefix: str = "") -> dict[int, Metric]:
    """Every metric of a (nested) collection, dict or list, once, by id; ``labels`` gets their names for messages."""
    if isinstance(metrics, Metric):
        return {id(metrics): metrics}
    if isinstance(metrics, _TorchMetricsCollection):
        items: Any = metrics.items(copy_state=False)  # links compute-group states, as its compute does
    elif isinstance(metrics, Mapping):
        items = metrics.items()
    elif isinstance(metrics, (list, tuple)):
        items = enumerate(metrics)
    else:
        raise TypeError(f"Expected a Metric, a MetricCollection, or a dict/list of them; got {type(metrics).__name__}.")
    found: dict[int, Metric] = {}
    for name, member in items:
        if isinstance(member, Metric):
            labels.setdefault(id(member), f"{prefix}{name}")
        for key, metric in _collect_metrics(member, labels, f"{prefix}{name}.").items():
            found.setdefault(key, metric)
    return found


# Set on a ``_sync_dist`` by fused_sync_dist(): a mark on the function, so a subclass that overrides it has none.
_FUSED_MARK = "_runs_sync_states"

F = TypeVar("F", bound=Callable)


def fused_sync_dist(sync_dist: F) -> F:
    """Mark a ``_sync_dist`` that runs the fused sync itself, so ``sync_metrics`` may fuse its metric with others.

    The metric base's ``_sync_dist`` carries the mark (this module sits below it and cannot name it).

    Example:
        >>> from torchmetrics_async import SumMetric
        >>> getattr(SumMetric._sync_dist, _FUSED_MARK)
        True
    """
    setattr(sync_dist, _FUSED_MARK, True)
    return sync_dist


def _fusable_metric(metric: Metric) -> bool:
    """Whether ``metric.sync()`` would run the stock ``_sync_dist``, or a fused one, with the stock gather."""
    sync_dist = type(metric)._sync_dist
    fused = sync_dist is Metric._sync_dist or getattr(sync_dist, _FUSED_MARK, False)
    return metric.dist_sync_fn in (None, gather_all_tensors) and fused


def _distributed(metric: Metric) -> bool:
    """Whether torchmetrics' ``sync()`` would find a process group: the metric's ``distributed_available_fn``."""
    return callable(metric.distributed_available_fn) and bool(metric.distributed_available_fn())


class _Entry(NamedTuple):
    """One state to sync: the (metric, attribute) that holds it and how it is reduced."""

    metric: Metric
    attr: str
    value: Any
    fn: Callable | None


def _announce_fallback(metric: Metric, attr: str, fn: Any) -> None:
    key = (type(metric).__qualname__, attr)
    if key not in _ANNOUNCED:
        _ANNOUNCED.add(key)
        rank_zero_warn(
            f"{type(metric).__name__}.{attr}: a list state reduced with {getattr(fn, '__name__', fn)!r} syncs through"
            " torchmetrics' gather_all_tensors (a barrier and gathers per element), not the fused sync.",
            UserWarning,
        )
