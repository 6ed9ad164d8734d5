"""Sync and compute metrics off the critical path: snapshot a window, keep training, collect Python scalars later.

Scheduling copies the window into a collector-owned shadow, resets the live metrics and launches the fused sync (it is
collective); collecting computes and reads results and deferred flags in one host transfer (it is local).

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
