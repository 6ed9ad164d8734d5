"""Sync and compute metrics off the critical path: snapshot a window, keep training, collect Python scalars later.

``schedule_collection()`` copies the window's states into a collector-owned *shadow*, resets the live metrics in place
and launches one fused round of collectives on the shadow; ``collect_results()`` finishes the sync, computes, and
reads results and deferred-error flags in one byte-packed host transfer (on CUDA, the sync and compute run on a side
stream). Scheduling is collective (every collective of a window is issued there), collecting is local: see
``docs/distributed.md`` for the host reads, dropped windows and checkpoints. Modules: ``collector`` (lifecycle,
checkpoint), ``window`` (the shadow), ``transfer`` (the one host read), ``streams`` (the stream seam).

Example:
    >>> import torch
    >>> from torchmetrics_async import MaxMetric, MeanMetric, MetricCollection
    >>> metrics = MetricCollection({"loss": MeanMetric(), "peak": MaxMetric()})
    >>> collector = AsyncMetricCollector(metrics)
    >>> collector.bind()
    >>> metrics.update(torch.tensor([1.0, 3.0]))
    >>> collector.schedule_collection()
    >>> metrics.update(torch.tensor(10.0))  # the next window
    >>> collector.collect_results()
    {'loss': 2.0, 'peak': 3.0}
    >>> collector.schedule_collection()
    >>> collector.collect_results()
    {'loss': 10.0, 'peak': 10.0}
"""

from torchmetrics_async.collector.collector import AsyncMetricCollector
from torchmetrics_async.collector.streams import CudaStreamOps, StreamOps

__all__ = ["AsyncMetricCollector", "CudaStreamOps", "StreamOps"]
