"""Fused collectives for metric states: one collective per bucket instead of a barrier and gathers per state.

Without an initialised process group the functions return their inputs.
"""

from __future__ import annotations

from torchmetrics_async.distributed.collection import (
    MetricCollection,
    _rebuild_collection,  # noqa: F401  (pickles of fused user collections made before the split name it here)
    fused_collection_class,
    sync_context,
)
from torchmetrics_async.sync.collectives import SyncHandle, collective_device
from torchmetrics_async.sync.functional import (
    all_gather,
    reduce_custom,
    reduce_max,
    reduce_mean,
    reduce_min,
    reduce_sum,
)
from torchmetrics_async.sync.metrics import sync_metrics, sync_states
from torchmetrics_async.sync.plan import PlanMismatchError

__all__ = [
    "MetricCollection",
    "PlanMismatchError",
    "SyncHandle",
    "all_gather",
    "collective_device",
    "fused_collection_class",
    "reduce_custom",
    "reduce_max",
    "reduce_mean",
    "reduce_min",
    "reduce_sum",
    "sync_context",
    "sync_metrics",
    "sync_states",
]
