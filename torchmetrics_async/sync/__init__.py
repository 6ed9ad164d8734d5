"""The fused sync engine, below the metric base (it imports nothing of ``metric.py`` or above).

``collectives`` (where and whether collectives run, ``SyncHandle``), ``buckets`` (all_reduce buckets), ``gather`` (the
byte-packed gather), ``functional`` (reduce_*/all_gather), ``states`` (metric-state entries), ``plan`` (the plan check),
``metrics`` (``sync_states``/``sync_metrics``). :mod:`torchmetrics_async.distributed` exports the public names.
"""
