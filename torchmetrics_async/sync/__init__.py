"""The fused sync engine, below the metric base: it imports nothing of ``metric.py`` or above.

- :mod:`~torchmetrics_async.sync.collectives`: where and whether collectives run, :class:`~.collectives.SyncHandle`;
- :mod:`~torchmetrics_async.sync.buckets`: all_reduce buckets;
- :mod:`~torchmetrics_async.sync.gather`: the byte-packed gather;
- :mod:`~torchmetrics_async.sync.functional`: reduce_*/all_gather on dicts;
- :mod:`~torchmetrics_async.sync.states`: metric-state entries;
- :mod:`~torchmetrics_async.sync.plan`: the plan check (fingerprints, :class:`~.plan.PlanMismatchError`);
- :mod:`~torchmetrics_async.sync.metrics`: :func:`~.metrics.sync_states` (``_sync_dist``) and
  :func:`~.metrics.sync_metrics` (``sync()``).

The public names are exported by :mod:`torchmetrics_async.distributed`, with the fused ``MetricCollection`` that
sits above the metric base.
"""
