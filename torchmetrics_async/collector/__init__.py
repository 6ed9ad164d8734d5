"""Sync and compute metrics off the critical path: snapshot a window, keep training, collect Python scalars later.

Scheduling copies the window into a collector-owned shadow, resets the live metrics and launches the fused sync (it is
collective); collecting computes and reads results and deferred flags in one host transfer (it is local).
"""

from torchmetrics_async.collector.collector import AsyncMetricCollector
from torchmetrics_async.collector.streams import CudaStreamOps, StreamOps

__all__ = ["AsyncMetricCollector", "CudaStreamOps", "StreamOps"]
