"""Sync and compute metrics off the critical path: snapshot a window, keep training, collect Python scalars later.

:class:`AsyncMetricCollector` runs steps 2 and 3 of the metric lifecycle (sync, compute; see ``design.md``) while the
training loop goes on with step 1 (update). At the logging interval ``schedule_collection()`` copies the window's
states into a collector-owned *shadow* of the metrics and resets the live metrics in place, so updates made from then
on belong to the next window; it then launches one fused round of collectives on the shadow
(:func:`~torchmetrics_async.distributed.sync_metrics` with ``async_op=True``). ``collect_results()``, some steps
later, finishes the sync, computes, and returns Python scalars.

The snapshot copies every tensor state into the shadow's buffers, and the live metrics' reset copies their defaults into
fresh states, each with one ``torch._foreach_copy_`` per device and dtype
(:func:`~torchmetrics_async.metric.fused_copy_`, :func:`~torchmetrics_async.metric.fused_reset`); the window's bucket
plan is cached by its layout (see :mod:`~torchmetrics_async.sync.metrics`).

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
discarded there; the synced deferred-error flags make the collecting rank raise what any rank recorded). Members
that sync inside their own ``compute()`` (wrappers) are therefore computed at schedule time in a distributed run.
A window restored by ``load_state_dict()`` starts its collectives there (or at ``bind()`` if not bound yet).

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

``collect_results()`` reads the device once: every result and every deferred flag is byte-packed into one buffer and
moved in one copy (on CUDA into pinned memory, on the side stream, after which one event closes the window; the host
waits on it once and reads host memory). On CPU the one read is of that buffer (plus the reads of members like
``CatMetric`` above, whose compute runs here on CPU). The metrics must live on one device (``bind()`` refuses
several: one side stream and one event serve a window), and neither call may run inside a CUDA graph capture.

Deferred errors: the shadow's ``compute()`` does not read the deferred NaN and value-check flags (the
:data:`~torchmetrics_async.deferred.DEFERRED_RAISE_OWNED` hook); the collector transfers them with the results and
raises (``RuntimeError``) or warns at collect time with torchmetrics' messages, member by member in ``compute()`` order,
as ``compute()`` would. An exception raised by a member's ``compute()`` itself is also held and raised at collect time,
after the deferred errors of the members before it. Other warnings of ``compute()`` are emitted where it runs (at
collect time on CPU, at schedule time on CUDA and for members computed early, below).

Metrics with their own ``compute()`` wrapper (torchmetrics' ``Running``, wrappers, compositions) are computed as they
are: they sync inside their ``compute()`` (not fused, not overlapped; in a distributed run at schedule time, with the
whole window) and raise their own errors; ``bind()`` says so once per class.

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

from __future__ import annotations

import contextlib
import copy
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch
from torch import Tensor

from torchmetrics_async._torchmetrics import Metric, MetricCollection, jit_distributed_available, rank_zero_warn
from torchmetrics_async.checkpoint import (
    _COUNTERS,
    WORLD_SIZE,
    check_structure,
    clone_state,
    counters,
    entry,
    load_metric_entry,
    metric_entry,
    named_metrics,
    per_rank,
    state,
    this_rank,
)
from torchmetrics_async.deferred import DEFERRED_RAISE_OWNED, UNREPORTED, DeferredChecks, report_deferred
from torchmetrics_async.metric import (
    _same_layout,
    copy_update_count,
    fused_copy_,
    fused_reset,
    has_stock_compute,
    set_update_count,
)
from torchmetrics_async.sync.collectives import SyncHandle
from torchmetrics_async.sync.metrics import sync_metrics

__all__ = ["AsyncMetricCollector", "CudaStreamOps", "StreamOps"]

_ANNOUNCED: set[str] = set()
_WHAT = "AsyncMetricCollector"
# Collectors whose window's collectives may still be running (scheduled, not collected): ``drain_in_flight()`` (called
# by ``torchmetrics_async.shutdown()``) waits for them so no collective is left running when the process group goes.
_IN_FLIGHT: weakref.WeakSet[AsyncMetricCollector] = weakref.WeakSet()


# --------------------------------------------------------------------------------------------------------------------
# The stream seam
# --------------------------------------------------------------------------------------------------------------------


@runtime_checkable
class StreamOps(Protocol):
    """The few stream operations the collector's accelerator path needs; a fake one lets CPU tests drive that path.

    Example:
        >>> isinstance(CudaStreamOps("cuda:0"), StreamOps)
        True
    """

    def current_stream(self) -> Any:
        """The stream the caller enqueues work on."""

    def new_stream(self) -> Any:
        """A new side stream."""

    def record_event(self, stream: Any) -> Any:
        """An event recorded on ``stream`` now (it completes when the work enqueued so far completes)."""

    def wait_event(self, stream: Any, event: Any) -> None:
        """Make ``stream`` wait for ``event`` (no host wait)."""

    def use(self, stream: Any) -> contextlib.AbstractContextManager:
        """A context in which new work is enqueued on ``stream``."""

    def to_host(self, tensor: Tensor) -> Tensor:
        """Start an asynchronous copy of ``tensor`` to (pinned) host memory on the current stream; return it."""

    def synchronize(self, event: Any) -> None:
        """Block the host until ``event`` has completed."""


class CudaStreamOps:
    """:class:`StreamOps` on CUDA.

    Args:
        device: the CUDA device of the metrics.

    Example:
        >>> CudaStreamOps("cuda:1").device
        device(type='cuda', index=1)
    """

    def __init__(self, device: torch.device | str) -> None:
        self.device = torch.device(device)

    def current_stream(self) -> Any:
        """The current stream of the device.

        Returns:
            ``torch.cuda.current_stream(device)``.

        Example:
            >>> callable(CudaStreamOps.current_stream)
            True
        """
        return torch.cuda.current_stream(self.device)

    def new_stream(self) -> Any:
        """A new stream on the device.

        Returns:
            ``torch.cuda.Stream(device)``.

        Example:
            >>> callable(CudaStreamOps.new_stream)
            True
        """
        return torch.cuda.Stream(device=self.device)

    def record_event(self, stream: Any) -> Any:
        """Record an event (no timing) on ``stream``.

        Args:
            stream: the stream.

        Returns:
            The event.

        Example:
            >>> callable(CudaStreamOps.record_event)
            True
        """
        event = torch.cuda.Event()
        event.record(stream)
        return event

    def wait_event(self, stream: Any, event: Any) -> None:
        """``stream.wait_event(event)``: a device-side dependency.

        Args:
            stream: the waiting stream.
            event: the event.

        Example:
            >>> callable(CudaStreamOps.wait_event)
            True
        """
        stream.wait_event(event)

    def use(self, stream: Any) -> contextlib.AbstractContextManager:
        """``torch.cuda.stream(stream)``.

        Args:
            stream: the stream.

        Returns:
            The context manager.

        Example:
            >>> callable(CudaStreamOps.use)
            True
        """
        return torch.cuda.stream(stream)

    def to_host(self, tensor: Tensor) -> Tensor:
        """Copy to the host asynchronously: a non-blocking device-to-host copy lands in pinned memory.

        Args:
            tensor: a CUDA tensor.

        Returns:
            The host tensor (valid once the current stream has reached this point).

        Example:
            >>> callable(CudaStreamOps.to_host)
            True
        """
        if tensor.device.type == "cpu":
            return tensor
        # Pinned explicitly: a non-blocking copy into pageable memory would be synchronous.
        host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
        host.copy_(tensor, non_blocking=True)
        return host

    def synchronize(self, event: Any) -> None:
        """``event.synchronize()``: the one host wait of a collection.

        Args:
            event: the event.

        Example:
            >>> callable(CudaStreamOps.synchronize)
            True
        """
        event.synchronize()


# --------------------------------------------------------------------------------------------------------------------
# Metric structure
# --------------------------------------------------------------------------------------------------------------------


def _units(tree: Any) -> list[Metric]:
    """The metrics whose ``compute()`` the structure's compute calls, in that order."""
    if isinstance(tree, MetricCollection):
        return list(tree._modules.values())
    if isinstance(tree, Metric):
        return [tree]
    return [unit for value in tree.values() for unit in _units(value)]


def _compute_tree(tree: Any) -> Any:
    if isinstance(tree, (Metric, MetricCollection)):
        return tree.compute()
    return {key: _compute_tree(value) for key, value in tree.items()}


def _reset_tree(tree: Any) -> None:
    if isinstance(tree, (Metric, MetricCollection)):
        tree.reset()  # a collection also re-links its compute groups
    else:
        for value in tree.values():
            _reset_tree(value)


def _deferred_flags(metric: Metric) -> list[tuple[str, str, Tensor]]:
    """``(message, action, state)`` for the deferred checks ``metric.compute()`` reads, in the order it reads them."""
    if not isinstance(metric, DeferredChecks):
        return []
    return [
        (message, action, getattr(metric, name))
        for name, (message, action) in metric._deferred_checks_registered().items()
    ]


# --------------------------------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------------------------------


def _tensor_leaves(tree: Any, into: list[Tensor]) -> list[Tensor]:
    if isinstance(tree, Tensor):
        into.append(tree)
    elif isinstance(tree, Mapping):
        for value in tree.values():
            _tensor_leaves(value, into)
    elif isinstance(tree, (list, tuple)):
        for value in tree:
            _tensor_leaves(value, into)
    return into


def _to_python(tree: Any, values: Iterator[Any]) -> Any:
    """The tree with each tensor replaced by the next host value (``float|int|bool`` or nested lists)."""
    if isinstance(tree, Tensor):
        return next(values)
    if isinstance(tree, Mapping):
        return {key: _to_python(value, values) for key, value in tree.items()}
    if isinstance(tree, (list, tuple)):
        items = [_to_python(value, values) for value in tree]
        if hasattr(tree, "_fields"):  # a named tuple
            return type(tree)(*items)
        return type(tree)(items)
    return tree


def _numpy_dtypes() -> dict[torch.dtype, np.dtype]:
    dtypes = {}
    for dtype in (
        torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.float32,
        torch.float64, torch.complex64, torch.complex128,
        getattr(torch, "uint16", None), getattr(torch, "uint32", None), getattr(torch, "uint64", None),
    ):  # fmt: skip
        if isinstance(dtype, torch.dtype):
            with contextlib.suppress(TypeError, RuntimeError):
                dtypes[dtype] = torch.empty(0, dtype=dtype).numpy().dtype
    return dtypes


#: torch dtype -> the numpy dtype the host reads it as (computed once at import, outside any host-sync detector).
_NUMPY_DTYPES = _numpy_dtypes()


def _wire_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a result travels in: its own if numpy has it, else a wider one that holds it exactly."""
    if dtype in _NUMPY_DTYPES:
        return dtype
    if dtype.is_complex:
        return torch.complex64  # complex32
    return torch.float32  # bfloat16, the float8 types: exact in float32 (Python floats from either are equal)


class _Transfer:
    """Every tensor of a window byte-packed into one buffer (per device) and moved to the host in one copy.

    Results of every dtype and the deferred flags travel together: one ``torch.cat`` of their bytes on the device,
    one device-to-host copy (pinned memory, asynchronous, on the side stream), and on the host one read of the buffer
    (a numpy view), from which the Python values are built without touching the device again.
    """

    def __init__(self, tensors: list[Tensor], ops: StreamOps | None) -> None:
        #: per tensor: (group, byte offset, byte length, numpy dtype, shape)
        self.layout: list[tuple[int, int, int, np.dtype, tuple[int, ...]]] = []
        groups: dict[torch.device, tuple[int, list[Tensor], list[int]]] = {}
        for tensor in tensors:
            value = tensor.detach()
            wire = _wire_dtype(value.dtype)
            if wire != value.dtype:
                value = value.to(wire)
            index, pieces, length = groups.setdefault(value.device, (len(groups), [], [0]))
            data = value.reshape(-1).contiguous().view(torch.uint8)
            self.layout.append((index, length[0], data.numel(), _NUMPY_DTYPES[wire], tuple(value.shape)))
            pieces.append(data)
            length[0] += data.numel()
        self.device_buffers: list[Tensor] = []  # alive until the host has synchronized on the copies
        self.hosts: list[Tensor] = []
        for _, pieces, _ in groups.values():
            buffer = pieces[0] if len(pieces) == 1 else torch.cat(pieces)  # one kernel for the whole window
            self.device_buffers.append(buffer)
            self.hosts.append(buffer if ops is None else ops.to_host(buffer))

    def values(self) -> list[Any]:
        """Host values in the original order: one read of each host buffer; call after synchronizing."""
        arrays = [host.numpy() for host in self.hosts]  # the read (numpy shares the host memory)
        return [
            arrays[group][offset : offset + nbytes].view(dtype).reshape(shape).tolist()
            for group, offset, nbytes, dtype, shape in self.layout
        ]


class _Slot:
    """One metric of the structure: the live metric, its shadow, and the shadow's snapshot buffers."""

    __slots__ = ("buffers", "lists", "live", "name", "shadow")

    def __init__(self, name: str, live: Metric, shadow: Metric) -> None:
        self.name = name
        self.live = live
        self.shadow = shadow
        self.buffers: dict[str, Tensor] = {}  # tensor state -> buffer: the window's local values, stable storage
        self.lists: dict[str, list[Tensor]] = {}  # list state -> the window's elements (copies the window owns)


class _Record:
    """What one shadow member's ``compute()`` did: its exception, its deferred flags."""

    __slots__ = ("error", "flags", "metric")

    def __init__(self, metric: Metric) -> None:
        self.metric = metric
        self.error: BaseException | None = None
        # (message, action, violated): the check state until read, then its Python value
        self.flags: list[tuple] = []


def _capturing(metric: Metric, inner: Callable, log: list[_Record]) -> Callable:
    """``compute`` that records (for ``collect_results`` to re-raise in order) an exception instead of raising it.

    Warnings are not held back: ``warnings.catch_warnings`` resets the registry that shows a warning once per
    location, so replaying them would repeat them every window.
    """

    def compute(*args: Any, **kwargs: Any) -> Any:
        record = _Record(metric)
        log.append(record)
        try:
            return inner(*args, **kwargs)
        except Exception as err:  # re-raised at collect time, after the deferred flags of the members before it
            record.error = err
            return None

    return compute


# --------------------------------------------------------------------------------------------------------------------
# The collector
# --------------------------------------------------------------------------------------------------------------------


# ``Stateful`` by its methods, not by subclassing: why, above ``checkpoint.PerRankState``.
class AsyncMetricCollector:
    """Sync and compute a metric, a ``MetricCollection`` or a dict of them off the critical path.

    Lifecycle: ``bind()`` once; then per logging interval ``schedule_collection()`` (snapshot, reset, launch) and,
    any number of training steps later, ``collect_results()`` (wait, compute, Python scalars); ``unbind()`` at the
    end. Updates made to the live metrics after ``schedule_collection()`` belong to the next window. The collector is
    ``Stateful``: ``state_dict()``/``load_state_dict()`` work at any point, a window in flight included.

    Args:
        metric: a torchmetrics ``Metric``, a ``MetricCollection``, or a dict whose values are either.
        stream_ops: the stream operations of the accelerator path (default: :class:`CudaStreamOps` when the metrics
            are on CUDA, none on CPU). A test seam: any :class:`StreamOps` forces the accelerator path.

    Raises:
        TypeError: if ``metric`` is not one of the accepted structures.

    Example:
        >>> import torch
        >>> from torchmetrics_async import MeanMetric
        >>> loss = MeanMetric()
        >>> collector = AsyncMetricCollector(loss)
        >>> collector.bind()
        >>> loss.update(torch.tensor([0.5, 1.5]))
        >>> collector.schedule_collection()
        >>> collector.collect_results()
        1.0
        >>> collector.unbind()
    """

    def __init__(self, metric: Any, stream_ops: StreamOps | None = None) -> None:
        check_structure(metric, _WHAT)
        self._metric = metric
        self._stream_ops = stream_ops
        self._live = named_metrics(metric)
        self._bound = False
        self._ops: StreamOps | None = None
        self._side: Any = None
        self._shadow: Any = None
        self._slots: list[_Slot] = []  # per metric: the live one, its shadow and the shadow's buffers
        self._sync_units: list[Metric] = []
        self._checked_units: list[Metric] = []
        self._own_sync = False  # some member computes (and syncs) through its own compute() wrapper
        self._log: list[_Record] = []
        # The window in flight: scheduled (a snapshot exists), launched (its sync has started), what it produced.
        self._scheduled = False
        self._launched = False
        self._process_group: Any = None
        self._handle: SyncHandle | None = None
        # what the window produced when computed at schedule time: (tree, transfer) on CUDA, (tree, flags) on CPU
        self._outcome: tuple[Any, Any] | None = None
        self._done: Any = None
        self._pending: dict[str, dict[str, Any]] | None = None  # a loaded window waiting for bind()

    # ---------------------------------------------------------------------------------------------------------------
    # bind / unbind
    # ---------------------------------------------------------------------------------------------------------------

    def bind(self, device: torch.device | str | None = None) -> None:
        """Move the metrics to ``device`` (if given), create the side stream on CUDA, and the collector's buffers.

        The buffers are a deep copy of the metric structure (the *shadow*) that receives each window's states. Bind
        after moving the metrics to their device; move them later only through ``unbind()`` and ``bind(device)``.

        Args:
            device: where the metrics live from now on (``None``: where they are).

        Raises:
            RuntimeError: if already bound.
            ValueError: if the metrics live on more than one device (after moving them to ``device``, if given).

        Example:
            >>> from torchmetrics_async import SumMetric
            >>> collector = AsyncMetricCollector(SumMetric())
            >>> collector.bind("cpu")
            >>> collector.is_bound
            True
        """
        if self._bound:
            raise RuntimeError("AsyncMetricCollector is already bound: call unbind() first.")
        if device is not None:
            self._move(torch.device(device))
        devices = {metric.device for _, metric in self._live}
        if len(devices) > 1:
            # One side stream and one done-event serve the window: they would order only the first device's work.
            where = ", ".join(f"{name}: {metric.device}" for name, metric in self._live)
            raise ValueError(
                f"AsyncMetricCollector: the metrics live on several devices ({where}); bind(device) moves them all to"
                " one, or use one collector per device."
            )
        metric_device = self._live[0][1].device if self._live else torch.device("cpu")
        ops = self._stream_ops
        if ops is None and metric_device.type == "cuda":
            ops = CudaStreamOps(metric_device)
        self._ops = ops
        self._side = ops.new_stream() if ops is not None else None
        self._make_shadow()
        self._bound = True
        if self._pending is not None:  # a window loaded before bind(): its snapshot goes into the buffers now
            pending, self._pending = self._pending, None
            self._install(pending)

    def _move(self, device: torch.device) -> None:
        if isinstance(self._metric, torch.nn.Module):
            self._metric.to(device)
        else:
            for value in self._metric.values():
                value.to(device)

    def _make_shadow(self) -> None:
        shadow = copy.deepcopy(self._metric)
        named = named_metrics(shadow)
        if [name for name, _ in named] != [name for name, _ in self._live]:
            raise RuntimeError("AsyncMetricCollector: the deep copy of the metrics has a different structure.")
        for collection in _collections(shadow):
            # One group per member: shared compute-group states would make the members' buffers alias each other.
            collection._groups = {index: [name] for index, name in enumerate(collection._modules)}
            collection._enable_compute_groups = False
        self._shadow = shadow
        self._slots = []
        for (name, live), (_, metric) in zip(self._live, named, strict=True):
            slot = _Slot(name, live, metric)
            state = metric.__dict__
            for attr, default in metric._defaults.items():
                if isinstance(default, Tensor):
                    # its own storage (a compute-group follower shares its leader's tensor in the live collection)
                    slot.buffers[attr] = state[attr] = getattr(metric, attr).detach().clone()
                else:
                    state[attr] = []
            self._slots.append(slot)
        self._log = []
        units = list({id(unit): unit for unit in _units(shadow)}.values())  # a metric under two keys: hook it once
        self._checked_units = [unit for unit in units if has_stock_compute(unit)]
        self._sync_units = [unit for unit in self._checked_units if unit.sync_on_compute]
        self._own_sync = len(self._checked_units) < len(units)
        for unit in units:
            if has_stock_compute(unit):
                # Synced explicitly (fused, early); compute leaves it synced until the collector restores it; the
                # deferred flags are read by the collector, with the results, in one transfer.
                unit._to_sync = False
                unit._should_unsync = False
                unit.__dict__[DEFERRED_RAISE_OWNED] = True
            else:
                _announce_own_sync(unit)
            unit.__dict__["compute"] = _capturing(unit, unit.compute, self._log)

    def unbind(self) -> None:
        """Release the side stream and the buffers.

        A window scheduled and not collected is dropped, as the next ``schedule_collection()`` would drop it (its
        collectives were issued when it was scheduled, so this communicates nothing). A window loaded before
        ``bind()`` and not bound since is kept for the next ``bind()``.

        Example:
            >>> from torchmetrics_async import SumMetric
            >>> collector = AsyncMetricCollector(SumMetric())
            >>> collector.bind()
            >>> collector.unbind()
            >>> collector.is_bound
            False
        """
        if self._scheduled and self._bound:
            self._drop()
        self._bound = False
        self._ops = None
        self._side = None
        self._shadow = None
        self._slots = []
        self._sync_units = []
        self._checked_units = []
        self._log = []

    @property
    def is_bound(self) -> bool:
        """Whether ``bind()`` was called (and ``unbind()`` not since).

        Example:
            >>> from torchmetrics_async import SumMetric
            >>> AsyncMetricCollector(SumMetric()).is_bound
            False
        """
        return self._bound

    @property
    def is_scheduled(self) -> bool:
        """Whether a window was scheduled (or loaded in flight) and not collected yet.

        Example:
            >>> from torchmetrics_async import SumMetric
            >>> AsyncMetricCollector(SumMetric()).is_scheduled
            False
        """
        return self._scheduled

    # ---------------------------------------------------------------------------------------------------------------
    # schedule / collect
    # ---------------------------------------------------------------------------------------------------------------

    def schedule_collection(self, process_group: Any = None) -> None:
        """Snapshot the window into the buffers, launch the fused sync, and reset the live metrics in place.

        No barrier, and no host sync in a single process: the states are copied in place into buffers allocated at
        ``bind()`` (list states into copies the window owns: one copy kernel where the elements agree in dtype,
        device and trailing shape), the reset copies device-resident defaults, and the collectives are launched
        asynchronously. On CUDA the sync and the compute are enqueued on the side stream after an event recorded
        once the snapshot is enqueued. In a distributed run the plan check is read here (waiting for every rank to
        schedule the window), and list states read their exchanged shapes here too (see the module docstring).

        Args:
            process_group: the group to sync over (``None``: each metric's ``process_group``, else the world).

        A window scheduled before and not collected (on a rank that does not log, say) is dropped first: its
        results and errors are discarded, never raised here. Every rank's collectives for it were issued by its own
        ``schedule_collection()``, so dropping it communicates nothing.

        Raises:
            RuntimeError: if not bound, or called while a CUDA graph is being captured.
            PlanMismatchError: if the ranks sync different metrics (on every rank; the live metrics keep the window).

        Example:
            >>> import torch
            >>> from torchmetrics_async import SumMetric
            >>> metric = SumMetric()
            >>> collector = AsyncMetricCollector(metric)
            >>> collector.bind()
            >>> metric.update(torch.tensor(2.0))
            >>> collector.schedule_collection()
            >>> metric.update(torch.tensor(5.0))  # counted in the next window
            >>> collector.collect_results(), float(metric.compute())
            (2.0, 5.0)
        """
        self._require_bound("schedule_collection")
        _refuse_capture("schedule_collection")
        if self._scheduled:
            self._drop()
        self._snapshot()
        self._process_group = process_group
        # The sync reads only the buffers, so it can start before the reset; if it fails to start, the live metrics
        # still hold the window and nothing is lost.
        try:
            self._launch()
        except BaseException:
            self._drain()
            self._release()
            raise
        self._scheduled = True
        _IN_FLIGHT.add(self)
        with fused_reset(slot.live for slot in self._slots):
            _reset_tree(self._metric)

    def collect_results(self) -> Any:
        """Wait for the scheduled window, compute it, and return its values as Python scalars.

        Deferred errors are raised (``RuntimeError``) and deferred warnings emitted with torchmetrics' messages, as
        ``compute()`` would; either way the window is over afterwards.

        Returns:
            A PyTree mirroring ``compute()``'s output: ``float``/``int``/``bool`` for scalars, nested lists for other
            tensors; a collection gives its ``compute()`` dict, a dict of metrics a dict with the same keys.

        Raises:
            RuntimeError: if not bound, if nothing was scheduled, if called while a CUDA graph is being captured, or
                a deferred error (torchmetrics' message).

        Example:
            >>> import torch
            >>> from torchmetrics_async import MeanMetric, SumMetric
            >>> metrics = {"loss": MeanMetric(), "tokens": SumMetric()}
            >>> collector = AsyncMetricCollector(metrics)
            >>> collector.bind()
            >>> for metric in metrics.values():
            ...     metric.update(torch.tensor([2.0, 4.0]))
            >>> collector.schedule_collection()
            >>> collector.collect_results()
            {'loss': 3.0, 'tokens': 6.0}
        """
        self._require_bound("collect_results")
        _refuse_capture("collect_results")
        if not self._scheduled:
            raise RuntimeError("AsyncMetricCollector: nothing scheduled: call schedule_collection() first.")
        try:
            if self._ops is None:
                records = self._log
                if self._outcome is None:
                    self._handle.wait()  # local: every collective of the window was issued at schedule time
                    tree = _compute_tree(self._shadow)
                    flags = self._read_flags(records)
                else:  # computed at schedule time (see _launch)
                    tree, flags = self._outcome
                values = _Transfer([*_tensor_leaves(tree, []), *flags], None).values()  # one read
            else:
                tree, transfer = self._outcome
                records = self._log
                self._ops.synchronize(self._done)  # the one host wait: sync, compute and copies are done
                values = transfer.values()
            leaves = len(values) - sum(len(record.flags) for record in records)
            flag_values = iter(values[leaves:])
            for record in records:
                record.flags = [(message, action, next(flag_values)) for message, action, _ in record.flags]
            self._report(records)
            return _to_python(tree, iter(values[:leaves]))
        finally:
            self._release()
            self._scheduled = False

    def _require_bound(self, what: str) -> None:
        if not self._bound:
            raise RuntimeError(f"AsyncMetricCollector is not bound: call bind() before {what}().")

    def _snapshot(self) -> None:
        """Copy the live states into the buffers (in place: one fused copy), copy list elements, copy update counts."""
        buffers: list[Tensor] = []
        values: list[Tensor] = []
        for slot in self._slots:
            source = slot.live.__dict__
            target = slot.shadow.__dict__
            for attr in slot.live._defaults:
                value = source[attr]
                if isinstance(value, Tensor):
                    buffer = slot.buffers.get(attr)
                    if buffer is None or not _same_layout(buffer, value):
                        buffer = slot.buffers[attr] = value.detach().clone()  # the state changed shape: re-allocate
                    else:
                        buffers.append(buffer)
                        values.append(value)
                    target[attr] = buffer
                else:
                    # Copies: the caller may still hold (and change) the tensors it passed to update().
                    slot.lists[attr] = target[attr] = _owned(value)
            copy_update_count(slot.live, slot.shadow)
            # The window's checks travel in the buffers; the collector reports them, the live reset must not.
            source[UNREPORTED] = False
            for name in _COUNTERS:
                if name in source:
                    target[name] = source[name]
            target["_computed"] = None
        fused_copy_(buffers, values)

    def _install(self, window: Mapping[str, Mapping[str, Any]]) -> None:
        """Put a saved window (``state_dict()["window"]``) into the buffers: it is scheduled, not launched."""
        for slot in self._slots:
            states, count, saved_counters = entry(window, slot.name, _WHAT)
            target = slot.shadow.__dict__
            for attr, default in slot.shadow._defaults.items():
                value = state(states, attr, slot.name, _WHAT)
                if isinstance(default, Tensor):
                    buffer = slot.buffers[attr]
                    if _same_layout(buffer, value):
                        buffer.copy_(value)
                    else:
                        buffer = slot.buffers[attr] = value.detach().clone().to(buffer.device)
                    target[attr] = buffer
                else:
                    slot.lists[attr] = target[attr] = [piece.to(slot.shadow.device) for piece in value]
            set_update_count(slot.shadow, int(count))
            if isinstance(slot.shadow, DeferredChecks):
                slot.shadow._reset_deferred()  # a restored window warns afresh
            target.update({name: int(value) for name, value in saved_counters.items()})
            target["_computed"] = None
        self._scheduled = True
        self._launched = False
        # Its collectives start now, at a point every rank passes (bind or load), so that collecting stays local.
        try:
            self._launch()
        except BaseException:
            self._drain()
            self._release()
            self._scheduled = False
            raise

    def _launch(self) -> None:
        """Start the sync of the buffers (and on the accelerator path, the compute and the host copies)."""
        self._log.clear()
        ops = self._ops
        if ops is None:
            handle = self._handle = sync_metrics(self._sync_units, self._process_group, async_op=True)
            # Every collective of the window is issued here, on every rank: list states' data exchange needs the
            # exchanged shapes (a host read, waiting for the other ranks' schedule), so collect_results() is local.
            handle.launch_remaining()
            self._handle = handle
            if self._own_sync and jit_distributed_available():
                # Members that sync inside their own compute() (wrappers) communicate there: compute now.
                handle.wait()
                tree = _compute_tree(self._shadow)
                self._outcome = (tree, self._read_flags(self._log))
            self._launched = True
            return
        ready = ops.record_event(ops.current_stream())  # after the snapshot's copies
        ops.wait_event(self._side, ready)
        with ops.use(self._side):
            handle = self._handle = sync_metrics(self._sync_units, self._process_group, async_op=True)
            # NCCL's wait() orders the current (side) stream after the collectives; the host does not wait.
            handle.wait()
            tree = _compute_tree(self._shadow)
            flags = self._read_flags(self._log)
            transfer = _Transfer([*_tensor_leaves(tree, []), *flags], ops)
            self._done = ops.record_event(self._side)
        self._handle = handle
        self._outcome = (tree, transfer)
        self._launched = True

    def _drain(self) -> None:
        """After a failed launch: let whatever was started stop reading the buffers before they are released.

        The next snapshot overwrites the buffers (and the release drops list elements and ``_cache``): on CUDA the
        current stream waits (no host wait) for everything enqueued on the side stream so far (collectives, packing,
        the compute); on CPU the host waits for the collectives already issued.
        """
        if self._ops is not None:
            self._ops.wait_event(self._ops.current_stream(), self._ops.record_event(self._side))
            return
        handle = self._handle
        for work in [] if handle is None else handle._works:
            with contextlib.suppress(Exception):  # the launch error is the one to report
                work.wait()

    def _read_flags(self, records: list[_Record]) -> list[Tensor]:
        """Attach each computed member's deferred flag tensors to its record; return them all, in order."""
        checked = {id(unit) for unit in self._checked_units}
        out: list[Tensor] = []
        for record in records:
            if id(record.metric) in checked:
                metric = record.metric
                record.flags = _deferred_flags(metric)
                out.extend(first for *_, first in record.flags)
        return out

    def _report(self, records: list[_Record]) -> None:
        """Warn and raise what each member's ``compute()`` would have, member by member, in compute order."""
        for record in records:
            report_deferred(record.metric, record.flags)
            if record.error is not None:
                raise record.error

    def _release(self) -> None:
        """Return the shadow to its buffers (unsynced, list states empty) and drop everything the window held."""
        for slot in self._slots:
            state = slot.shadow.__dict__
            state.update(slot.buffers)
            for attr, default in slot.shadow._defaults.items():
                if not isinstance(default, Tensor):
                    state[attr] = []
            state["_is_synced"] = False
            state["_cache"] = None
            state["_computed"] = None
            slot.lists.clear()
        self._log.clear()
        _IN_FLIGHT.discard(self)
        self._handle = None
        self._outcome = None
        self._done = None
        self._launched = False

    # ---------------------------------------------------------------------------------------------------------------
    # Stateful
    # ---------------------------------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Everything this rank needs to resume: live states and update counts, and the window in flight (local).

        The layout of :mod:`torchmetrics_async.checkpoint`: this rank's values under its own key ``"rank{r}"`` (the
        global rank; ``"rank0"`` without a process group) beside ``"world_size"``, list states as tuples. So
        ``torch.save`` per rank and ``torch.distributed.checkpoint`` (``dcp.save({"collector": collector}, ...)``,
        which calls this) both give every rank back its own window. Every state is included whatever its
        ``persistent`` setting. ``"window"`` holds the scheduled window's local (pre-sync) states when one is in
        flight, else the defaults, so the layout is the same at every point of the lifecycle (DCP loads into the
        layout of a fresh collector). Tensors are copies.

        Returns:
            ``{"world_size": int, "rank{r}": {"metrics": {name: {"states": ..., "update_count": int, "counters":
            ...}}, "window": {same}, "in_flight": bool}}``; ``counters`` holds other window counters (a ``Running``
            wrapper's position).

        Example:
            >>> import torch
            >>> from torchmetrics_async import SumMetric
            >>> metric = SumMetric()
            >>> metric.update(torch.tensor(3.0))
            >>> state = AsyncMetricCollector(metric).state_dict()
            >>> state["world_size"], state["rank0"]["metrics"]["metric"]["states"], state["rank0"]["in_flight"]
            (1, {'sum_value': tensor(3.), 'nan_seen': tensor(False)}, False)
        """
        live = {name: metric_entry(metric) for name, metric in self._live}
        if not self._scheduled:
            window = {
                name: {
                    "states": {attr: clone_state(default) for attr, default in metric._defaults.items()},
                    "update_count": 0,
                    "counters": dict.fromkeys(counters(metric), 0),
                }
                for name, metric in self._live
            }
        elif self._pending is not None:
            window = {
                name: {
                    "states": {attr: clone_state(value) for attr, value in saved["states"].items()},
                    "update_count": int(saved["update_count"]),
                    "counters": dict(saved.get("counters", {})),
                }
                for name, saved in self._pending.items()
            }
        else:
            window = self._window_state()
        return per_rank({"metrics": live, "window": window, "in_flight": self._scheduled})

    def _window_state(self) -> dict[str, dict[str, Any]]:
        """The scheduled window's local states, from the buffers (the sync replaces the shadow's states, not them)."""
        out = {}
        for slot in self._slots:
            states = {}
            for attr, default in slot.shadow._defaults.items():
                local = slot.buffers[attr] if isinstance(default, Tensor) else slot.lists.get(attr, [])
                states[attr] = clone_state(local)
            out[slot.name] = {
                "states": states,
                "update_count": int(slot.shadow._update_count),
                "counters": counters(slot.shadow),
            }
        return out

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore live states, update counts and a window in flight, at any point of the lifecycle.

        A restored window in flight starts its sync here (over each metric's own ``process_group``, else the world),
        or at ``bind()`` if not bound yet, so call this (and ``bind()``) on every rank; the next ``collect_results()``
        returns it. A window this collector had in flight is dropped.

        Args:
            state_dict: from :meth:`state_dict` of a collector over the same metric structure, saved by as many
                processes; or one rank's entry of it (``state_dict["rank1"]``, to load a rank's window elsewhere on
                purpose).

        Raises:
            ValueError: if ``state_dict`` was saved by another number of processes.
            KeyError: if this rank, a metric or a state of this collector is missing from ``state_dict``.

        Example:
            >>> import torch
            >>> from torchmetrics_async import SumMetric
            >>> metric = SumMetric()
            >>> saved = AsyncMetricCollector(metric)
            >>> saved.bind()
            >>> metric.update(torch.tensor(4.0))
            >>> saved.schedule_collection()
            >>> state = saved.state_dict()
            >>> restored = AsyncMetricCollector(SumMetric())
            >>> restored.load_state_dict(state)
            >>> restored.bind()
            >>> restored.collect_results(), saved.collect_results()
            (4.0, 4.0)
        """
        mine = this_rank(state_dict, _WHAT) if WORLD_SIZE in state_dict else state_dict
        live = mine["metrics"]
        for name, metric in self._live:
            load_metric_entry(metric, name, live, _WHAT)
        if self._scheduled and self._bound:
            self._drop()
        self._scheduled = False
        self._pending = None
        if not mine["in_flight"]:
            return
        window = mine["window"]
        for name, _ in self._live:
            entry(window, name, _WHAT)  # fail now, not at bind()
        if self._bound:
            self._install(window)
        else:
            self._pending = {name: dict(saved) for name, saved in window.items()}
            self._scheduled = True
            self._launched = False

    def _drop(self) -> None:
        """Forget the window in flight without reporting it (a rank that did not collect it)."""
        try:
            if self._ops is None:
                self._handle.wait()  # local: its collectives were issued at schedule time; lets them complete
            else:
                # No host wait: the next snapshot (current stream) must not overwrite buffers the side stream reads.
                self._ops.wait_event(self._ops.current_stream(), self._done)
        finally:
            self._release()
            self._scheduled = False


def _owned(pieces: list[Tensor]) -> list[Tensor]:
    """Copies of a list state's elements, the same shapes and dtypes (views of one concatenation where they agree)."""
    if not pieces:
        return []
    first = pieces[0]
    rows = [piece.reshape(1, *piece.shape) if piece.ndim == 0 else piece for piece in pieces]
    if len(pieces) > 1 and all(
        row.dtype == first.dtype and row.device == first.device and row.shape[1:] == rows[0].shape[1:] for row in rows
    ):
        joined = torch.cat([row.detach() for row in rows])  # one kernel for the whole window
        parts = joined.split([row.shape[0] for row in rows])
        return [part.view(piece.shape) for part, piece in zip(parts, pieces, strict=True)]
    return [piece.detach().clone() for piece in pieces]


def drain_in_flight() -> int:
    """Wait for the collectives of every scheduled, uncollected window and drop those windows (teardown only).

    Returns:
        How many windows were drained.
    """
    drained = 0
    for collector in list(_IN_FLIGHT):
        if not collector._scheduled:
            continue
        if collector._ops is not None and collector._done is not None:
            collector._ops.synchronize(collector._done)  # the host waits: the process group goes next
        collector._drop()
        drained += 1
    return drained


def _collections(tree: Any) -> list[MetricCollection]:
    if isinstance(tree, MetricCollection):
        return [tree]
    if isinstance(tree, Metric):
        return []
    return [collection for value in tree.values() for collection in _collections(value)]


def _refuse_capture(what: str) -> None:
    # Inside a capture nothing runs: events, host copies and collectives would be recorded into the graph (or fail
    # deep inside torch), and the host would wait on work that never started.
    if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
        raise RuntimeError(
            f"AsyncMetricCollector.{what}() cannot run inside a CUDA graph capture: call it outside the captured"
            " region (update() may be captured; scheduling and collecting happen between graph replays)."
        )


def _announce_own_sync(metric: Metric) -> None:
    name = type(metric).__qualname__
    if name not in _ANNOUNCED:
        _ANNOUNCED.add(name)
        rank_zero_warn(
            f"AsyncMetricCollector: {type(metric).__name__} has its own compute() wrapper; it runs as is (its own"
            " sync, if any, is not fused or overlapped, and its errors are not deferred).",
            UserWarning,
        )
