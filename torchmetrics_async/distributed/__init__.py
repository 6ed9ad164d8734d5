"""Fused collectives for metric states: one collective per bucket instead of a barrier and gathers per state.

torchmetrics syncs metric states one at a time: ``gather_all_tensors`` runs a barrier, an ``all_gather`` of the
state's shape and an ``all_gather`` of its data for every state of every metric, and each rank then reduces the
gathered stack. Here all states of many metrics travel together:

- tensor states reduced with ``sum``, ``mean``, ``max`` or ``min`` are flattened into one buffer per
  (device, dtype, reduce op) and reduced with one ``all_reduce``. ``mean`` is a sum divided by the world size, so
  mean and sum states share a buffer; half-precision states are reduced in float32 (as ``torch.sum`` accumulates);
- bool states (the deferred-NaN flags) ride in a buffer that exists anyway: a max/min buffer of any dtype (0 and 1
  are exact), a sum buffer (as the count of ranks where they are true), or the shape exchange of list states;
  only alone do they get a uint8 buffer;
- list (``"cat"``) states, and tensor states whose reduction needs every rank's value (``None``, a custom callable),
  travel byte-packed in one buffer: one small ``all_gather`` of every state's dtype and shape, then one
  ``all_gather`` of all the data, padded to the longest rank. Results are reassembled in rank order, so they equal
  torchmetrics' ``dim_zero_cat`` of the gathered states;
- no barrier, no pickling (``all_gather_object``), no per-state collective.

Reading the gathered shapes is the one host sync, and only list states need it: their output shape depends on the
other ranks' data. Collectives can run with ``async_op=True``; the returned :class:`SyncHandle` finishes on ``wait()``.

The sync engine (plan, buckets, gather, collectives, the functional API) is :mod:`torchmetrics_async.sync`, below
the metric base; this package, above it, adds the fused ``MetricCollection`` and :func:`sync_context`
(:mod:`~torchmetrics_async.distributed.collection`) and exports the public names of both.

The same machinery backs a functional API on dicts (datarax's, in PyTorch): :func:`reduce_mean`, :func:`reduce_sum`,
:func:`reduce_max`, :func:`reduce_min`, :func:`reduce_custom` and :func:`all_gather`. Without an initialised process
group they return their inputs (the reduction over one rank is the value itself).

Example:
    >>> import torch
    >>> reduce_custom({"loss": torch.tensor(0.5), "step": 10, "tag": "train"}, {"step": "max"})
    {'loss': tensor(0.5000), 'step': 10, 'tag': 'train'}
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
