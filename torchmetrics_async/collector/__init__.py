"""Sync and compute metrics off the critical path: snapshot a window, keep training, collect Python scalars later.

:class:`AsyncMetricCollector` runs steps 2 and 3 of the metric lifecycle (sync, compute; see ``design.md``) while the
training loop goes on with step 1 (update). At the logging interval ``schedule_collection()`` copies the window's
states into a collector-owned *shadow* of the metrics and resets the live metrics in place, so updates made from then
on belong to the next window; it then launches one fused round of collectives on the shadow
(:func:`~torchmetrics_async.distributed.sync_metrics` with ``async_op=True``). ``collect_results()``, some steps
later, finishes the sync, computes, and returns Python scalars.

Where the work runs:

- **CUDA**: the sync and the compute are enqueued on a side stream that waits for an event recorded on the current
  stream after the snapshot; every result and every deferred error flag is then byte-packed into one buffer on the
  side stream and copied to pinned host memory with ``non_blocking=True``, and one event closes the window.
  ``collect_results()`` synchronizes on that event once and reads host memory.
- **CPU** (gloo): collectives run in gloo's threads; ``collect_results()`` waits for them, computes, and reads the
  results and flags in one read of one byte-packed buffer.

Collection is local, scheduling is collective: ``schedule_collection()`` issues every collective of its window, on
every rank, and ``collect_results()`` issues none. So ``if rank == 0: log(collector.collect_results())`` works: a
rank that does not collect a window drops it at its next ``schedule_collection()`` (its results and errors are
discarded there; the synced deferred-error flags make the collecting rank raise what any rank recorded). A window
restored by ``load_state_dict()`` starts its collectives there (or at ``bind()`` if not bound yet).

Host syncs: ``schedule_collection()`` has none in a single process, and in a distributed run one: the plan check
(:mod:`~torchmetrics_async.sync.plan`), a fixed-size all_gather of each rank's plan fingerprint that must be
read before any collective whose size depends on the plan (ranks whose metrics differ raise ``PlanMismatchError``
there instead of aborting or hanging in a collective of another size). It returns once every rank has scheduled the
window: the cost is waiting for the slowest rank to reach ``schedule_collection()`` plus one tiny all_gather's round
trip; on CUDA the check runs on a stream of its own, so the read never waits for the training step's queued work.
List (``"cat"``) states in a distributed run also need their shapes exchanged before their data, and reading those
shapes is a second host read (:meth:`SyncHandle.launch_remaining
<torchmetrics_async.distributed.SyncHandle.launch_remaining>`), in ``schedule_collection()`` on both paths.
On the accelerator path the compute runs there too, so a member whose
``compute()`` reads the device makes that read there: ``CatMetric`` with its default ``nan_strategy="warn"`` (or
``"ignore"``) drops NaNs, a result whose length depends on the data (one read; ``"error"``, ``"disable"`` or a number
make none). Members that torchmetrics syncs itself (a user's ``dist_sync_fn`` or ``_sync_dist``) run torchmetrics'
blocking gather, with its barrier, there in a distributed run. ``tests/test_collector.py`` counts them.

``collect_results()`` reads the device once, the byte-packed buffer above (plus, on CPU, the reads of members like
``CatMetric`` above, whose compute runs there). The metrics must live on one device (``bind()`` refuses several: one
side stream and one event serve a window), and neither call may run inside a CUDA graph capture.

Deferred errors: the shadow's ``compute()`` does not read the deferred NaN and value-check flags (the
:data:`~torchmetrics_async.deferred.DEFERRED_RAISE_OWNED` hook); the collector transfers them with the results and
raises (``RuntimeError``) or warns at collect time with torchmetrics' messages, member by member in ``compute()`` order,
as ``compute()`` would. An exception raised by a member's ``compute()`` itself is also held and raised at collect time,
after the deferred errors of the members before it. Other warnings of ``compute()`` are emitted where it runs (at
collect time on CPU, at schedule time on CUDA and for members computed early, below).

Metrics with their own ``compute()`` wrapper (torchmetrics' ``Running``, wrappers, compositions) are computed as they
are: they sync inside their ``compute()`` (not fused, not overlapped; in a distributed run at schedule time, with the
whole window) and raise their own errors; ``bind()`` says so once per class.

The modules: :mod:`~torchmetrics_async.collector.collector` (the lifecycle and the checkpoint),
:mod:`~torchmetrics_async.collector.window` (the shadow: snapshot, install, release),
:mod:`~torchmetrics_async.collector.transfer` (the one host read) and :mod:`~torchmetrics_async.collector.streams`
(the stream seam).

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
