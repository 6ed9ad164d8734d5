"""The collector's lifecycle (bind, schedule, collect, unbind), its checkpoint (``Stateful``) and its one host read.

A window's results, deferred flags and plan check are byte-packed into one buffer and read by the host in one copy.
"""

from __future__ import annotations

import contextlib
import warnings
import weakref
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch
from torch import Tensor

from torchmetrics_async._torchmetrics import jit_distributed_available
from torchmetrics_async.checkpoint import (
    check_structure,
    entry,
    load_metric_entry,
    metric_entry,
    named_metrics,
    per_rank,
    this_rank,
)
from torchmetrics_async.collector.streams import CudaStreamOps, StreamOps, _refuse_capture
from torchmetrics_async.collector.window import _WHAT, _copied_window, _empty_window, _roots, _Shadow
from torchmetrics_async.metric import fused_reset
from torchmetrics_async.sync.collectives import SyncHandle
from torchmetrics_async.sync.gather import _DTYPES
from torchmetrics_async.sync.metrics import agree_plans, sync_metrics
from torchmetrics_async.sync.plan import AgreedPlans

__all__ = ["AsyncMetricCollector", "drain_in_flight"]

# Collectors whose window's collectives may still be running: ``drain_in_flight()`` waits for them at shutdown.
_IN_FLIGHT: weakref.WeakSet[AsyncMetricCollector] = weakref.WeakSet()


# ``Stateful`` by its methods, not by subclassing: why, above ``checkpoint.PerRankState``.
class AsyncMetricCollector:
    """Sync and compute a metric, a ``MetricCollection`` or a dict of them off the critical path.

    ``stream_ops`` is a test seam: any :class:`StreamOps` forces the accelerator path (default: :class:`CudaStreamOps`
    on CUDA, none on CPU).

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
        self._shadow: _Shadow | None = None  # the buffers of the windows, from bind() to unbind()
        self._scheduled = False
        self._process_group: Any = None
        self._handle: SyncHandle | None = None
        # what the window computed, and its transfer: (tree, transfer)
        self._outcome: tuple[Any, Any] | None = None
        self._done: Any = None
        self._pending: dict[str, dict[str, Any]] | None = None  # a loaded window waiting for bind()
        # The plan every rank verified at bind(): the windows launch at once and check it when collected.
        self._plans = AgreedPlans()

    def bind(self, device: torch.device | str | None = None) -> None:
        """Move the metrics to ``device`` (if given; they must share one), create the side stream and the buffers.

        In a distributed run, collective: every rank verifies the plan of the windows' sync here (one host read).
        """
        if self._bound:
            raise RuntimeError("AsyncMetricCollector is already bound: call unbind() first.")
        if device is not None:
            for root in _roots(self._metric):
                root.to(torch.device(device))
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
        shadow = _Shadow(self._metric, self._live)
        if jit_distributed_available():  # before any window: schedule_collection() then never waits for the ranks
            agree_plans(shadow.sync_units, self._plans)
        self._side = ops.new_stream() if ops is not None else None
        self._shadow = shadow
        self._bound = True
        if self._pending is not None:  # a window loaded before bind(): its snapshot goes into the buffers now
            pending, self._pending = self._pending, None
            self._install(pending)

    def unbind(self) -> None:
        """Release the side stream and the buffers; a window scheduled and not collected is dropped."""
        if self._scheduled and self._bound:
            self._drop()
        self._bound = False
        self._ops = None
        self._side = None
        self._shadow = None

    @property
    def is_bound(self) -> bool:
        """Whether ``bind()`` was called (and ``unbind()`` not since)."""
        return self._bound

    @property
    def is_scheduled(self) -> bool:
        """Whether a window was scheduled (or loaded in flight) and not collected yet."""
        return self._scheduled

    def schedule_collection(self, process_group: Any = None) -> None:
        """Snapshot the window into the buffers, launch the fused sync, and reset the live metrics in place.

        Collective: call it on every rank at the same points. A window scheduled before and not collected is dropped.
        """
        self._require_bound_outside_capture("schedule_collection")
        if self._scheduled:
            self._drop()
        self._shadow.snapshot()
        self._process_group = process_group
        self._launch()  # the sync reads only the buffers: if it fails to start, the live metrics still hold the window
        self._scheduled = True
        _IN_FLIGHT.add(self)
        with fused_reset(slot.live for slot in self._shadow.slots):
            for root in _roots(self._metric):
                root.reset()  # a collection also re-links its compute groups

    def collect_results(self) -> Any:
        """Wait for the scheduled window, compute it, and return ``compute()``'s output as Python scalars and lists.

        Deferred errors are raised and warnings emitted with torchmetrics' messages; either way the window is over.
        """
        self._require_bound_outside_capture("collect_results")
        if not self._scheduled:
            raise RuntimeError("AsyncMetricCollector: nothing scheduled: call schedule_collection() first.")
        try:
            if self._outcome is None:  # CPU, not computed at schedule time (see _start)
                self._handle.wait()  # local: every collective of the window was issued at schedule time
                self._outcome = self._compute(None)
            tree, transfer = self._outcome
            if self._ops is not None:
                self._ops.synchronize(self._done)  # the one host wait: sync, compute and copies are done
            values = transfer.values()  # one read
            checks = self._plans.unread
            for check, rows in zip(checks, values[len(values) - len(checks) :], strict=True):
                check.check(rows)  # ranks whose plans differ: before any result or deferred error of this one
            leaves = len(values) - len(checks) - self._shadow.flag_count()
            self._shadow.report(values[leaves : len(values) - len(checks)])
            return _to_python(tree, iter(values[:leaves]))
        finally:
            self._release()

    def _require_bound_outside_capture(self, what: str) -> None:
        if not self._bound:
            raise RuntimeError(f"AsyncMetricCollector is not bound: call bind() before {what}().")
        _refuse_capture(what)

    def _install(self, window: Mapping[str, Mapping[str, Any]]) -> None:
        """Put a saved window into the buffers and launch it."""
        self._shadow.install(window)
        self._scheduled = True
        # Its collectives start now, at a point every rank passes (bind or load), so that collecting stays local.
        self._launch()

    def _launch(self) -> None:
        """Start the window's sync; if that fails, stop what started and drop the window."""
        try:
            self._start()
        except BaseException:
            self._drain()
            self._release()
            raise

    def _start(self) -> None:
        """Start the sync of the buffers (and on the accelerator path, the compute and the host copies)."""
        shadow = self._shadow
        shadow.log.clear()
        self._plans.unread.clear()
        ops = self._ops
        if ops is None:
            handle = self._handle = sync_metrics(shadow.sync_units, self._process_group, True, plans=self._plans)
            # Every collective of the window is issued here, on every rank, so that collect_results() is local.
            handle.launch_remaining()
            if shadow.own_sync and jit_distributed_available():
                # Members that sync inside their own compute() (wrappers) communicate there: compute now.
                handle.wait()
                self._outcome = self._compute(None)
            return
        ready = ops.record_event(ops.current_stream())  # after the snapshot's copies
        ops.wait_event(self._side, ready)
        with ops.use(self._side):
            handle = self._handle = sync_metrics(shadow.sync_units, self._process_group, True, plans=self._plans)
            # NCCL's wait() orders the current (side) stream after the collectives; the host does not wait.
            handle.wait()
            self._outcome = self._compute(ops)
            self._done = ops.record_event(self._side)

    def _compute(self, ops: StreamOps | None) -> tuple[Any, _Transfer]:
        """Compute the window; pack its results, deferred flags and unread plan checks for one host read."""
        tree = self._shadow.compute()
        checks = [check.rows() for check in self._plans.unread]
        return tree, _Transfer([*_tensor_leaves(tree, []), *self._shadow.read_flags(), *checks], ops)

    def _drain(self) -> None:
        """After a failed launch: stop whatever started from reading the buffers (the launch error is reported)."""
        if self._ops is not None:
            self._ops.wait_event(self._ops.current_stream(), self._ops.record_event(self._side))
            return
        handle = self._handle
        for work in [] if handle is None else handle._works:
            with contextlib.suppress(Exception):  # the launch error is the one to report
                work.wait()

    def _release(self) -> None:
        """Return the shadow to its buffers (unsynced, list states empty) and drop the window and all it held."""
        if self._shadow is not None:
            self._shadow.release()
        self._scheduled = False
        _IN_FLIGHT.discard(self)
        self._handle = None
        self._outcome = None
        self._done = None

    def state_dict(self) -> dict[str, Any]:
        """This rank's live states, update counts and window in flight (the defaults if none), per rank; tensors copied.

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
            window = _empty_window(self._live)
        elif self._pending is not None:
            window = _copied_window(self._pending)
        else:
            window = self._shadow.local_states()
        return per_rank({"metrics": live, "window": window, "in_flight": self._scheduled})

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore live states, update counts and a window in flight; its sync starts here or at ``bind()``: every rank.

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
        mine = this_rank(state_dict, _WHAT)
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


def drain_in_flight() -> int:
    """Wait for the collectives of every scheduled, uncollected window and drop it; return how many (teardown)."""
    drained = 0
    for collector in list(_IN_FLIGHT):
        if not collector._scheduled:
            continue
        if collector._ops is not None and collector._done is not None:
            collector._ops.synchronize(collector._done)  # the host waits: the process group goes next
        collector._drop()
        drained += 1
    return drained


def _tensor_leaves(tree: Any, into: list[Tensor]) -> list[Tensor]:
    if isinstance(tree, Tensor):
        into.append(tree)
    elif isinstance(tree, (Mapping, list, tuple)):
        for value in tree.values() if isinstance(tree, Mapping) else tree:
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
        return type(tree)(*items) if hasattr(tree, "_fields") else type(tree)(items)  # a named tuple takes fields
    return tree


def _numpy_dtype(dtype: torch.dtype) -> np.dtype | None:
    with warnings.catch_warnings(), contextlib.suppress(TypeError, RuntimeError):
        warnings.simplefilter("ignore")  # complex32 is "experimental"
        return torch.empty(0, dtype=dtype).numpy().dtype
    return None


# Computed once at import, outside any host-sync detector.
_NUMPY_DTYPES = {dtype: numpy for dtype in _DTYPES if (numpy := _numpy_dtype(dtype)) is not None}


def _wire_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a result travels in: its own if numpy has it, else a wider one that holds it exactly."""
    if dtype in _NUMPY_DTYPES:
        return dtype
    if dtype.is_complex:
        return torch.complex64  # complex32
    return torch.float32  # bfloat16, the float8 types: exact in float32 (Python floats from either are equal)


class _Transfer:
    """Every tensor of a window byte-packed into one buffer per device, copied to the host once, read once."""

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
