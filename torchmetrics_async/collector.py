"""Sync and compute metrics off the critical path: snapshot a window, keep training, collect Python scalars later.

:class:`AsyncMetricCollector` runs steps 2 and 3 of the metric lifecycle (sync, compute; see ``design.md``) while the
training loop goes on with step 1 (update). At the logging interval ``schedule_collection()`` copies the window's
states into a collector-owned *shadow* of the metrics and resets the live metrics in place, so updates made from then
on belong to the next window; it then launches one fused round of collectives on the shadow
(:func:`~torchmetrics_async.distributed.sync_metrics` with ``async_op=True``). ``collect_results()``, some steps
later, finishes the sync, computes, and returns Python scalars.

Where the work runs:

- **CUDA**: the sync and the compute are enqueued on a side stream that waits for an event recorded on the current
  stream after the snapshot; every result and every deferred error flag is then concatenated per dtype on the side
  stream and copied to pinned host memory with ``non_blocking=True``, and one event closes the window.
  ``collect_results()`` synchronizes on that event once and reads host memory.
- **CPU** (gloo): collectives run in gloo's threads; ``collect_results()`` waits for them, computes, and reads the
  results where they are (no copy).

Host syncs: ``schedule_collection()`` has none on either path (on CUDA with NCCL, whose ``wait()`` only orders
streams), with one documented exception: list (``"cat"``) states in a distributed run need their shapes exchanged
before their data, and reading those shapes is a host read. On CPU that read happens in ``collect_results()``
(inside ``SyncHandle.wait()``); on CUDA the whole sync is enqueued at schedule time, so it happens there.
``collect_results()`` reads the device exactly once on CUDA (one ``synchronize()``).

Deferred errors: the shadow's ``compute()`` does not read the deferred NaN and value-check flags (the
:data:`~torchmetrics_async.deferred.DEFERRED_RAISE_OWNED` hook); the collector transfers them with the results and
raises (``RuntimeError``) or warns at collect time with torchmetrics' messages, member by member in ``compute()`` order,
as ``compute()`` would. An exception raised by a member's ``compute()`` itself is also held and raised at collect time,
after the deferred errors of the members before it. Other warnings of ``compute()`` are emitted where it runs (at
collect time on CPU, at schedule time on CUDA).

Metrics with their own ``compute()`` wrapper (torchmetrics' ``Running``, wrappers, compositions) are computed as they
are: they sync inside their ``compute()`` (not fused, not overlapped) and raise their own errors; ``bind()`` says so
once per class.

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

import torch
from torch import Tensor
from torch.distributed.checkpoint.stateful import Stateful

from torchmetrics_async._torchmetrics import Metric, MetricCollection, rank_zero_warn
from torchmetrics_async.deferred import (
    DEFERRED_RAISE_OWNED,
    DeferredChecks,
    decode_violation,
    first_violations,
    report_deferred,
    violation_code,
)
from torchmetrics_async.distributed import SyncHandle, sync_metrics
from torchmetrics_async.metric import OWNED_STATES, _same_layout, copy_update_count, has_stock_compute, set_update_count

__all__ = ["AsyncMetricCollector", "CudaStreamOps", "StreamOps"]

_ANNOUNCED: set[str] = set()
# Collectors whose window's collectives may still be running (launched, not collected): ``drain_in_flight()`` (called
# by ``torchmetrics_async.shutdown()``) waits for them so no collective is left running when the process group goes.
_IN_FLIGHT: weakref.WeakSet[AsyncMetricCollector] = weakref.WeakSet()
# Window counters besides ``_update_count`` that compute() or the next update reads: torchmetrics' ``Running``
# wrapper picks its window slot and its base metric's update count from ``_num_vals_seen``.
_COUNTERS = ("_num_vals_seen",)


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
        return tensor.to("cpu", non_blocking=True)

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


def _check_structure(obj: Any, where: str = "metric") -> None:
    if isinstance(obj, (Metric, MetricCollection)):
        return
    if isinstance(obj, Mapping) and obj:
        for key, value in obj.items():
            if not isinstance(value, (Metric, MetricCollection)):
                raise TypeError(
                    f"{where}[{key!r}] is a {type(value).__name__}; expected a torchmetrics Metric or MetricCollection."
                )
        return
    raise TypeError(
        f"AsyncMetricCollector expects a torchmetrics Metric, a MetricCollection or a non-empty dict of them; got"
        f" {type(obj).__name__}."
    )


def _named_metrics(tree: Any) -> list[tuple[str, Metric]]:
    """Every ``Metric`` module of the structure (wrappers' inner metrics too), named, each once, in a fixed order."""
    out: list[tuple[str, Metric]] = []
    seen: set[int] = set()

    def visit(obj: Any, name: str) -> None:
        if isinstance(obj, torch.nn.Module):
            for sub_name, module in obj.named_modules(prefix=name):
                if isinstance(module, Metric) and id(module) not in seen:
                    seen.add(id(module))
                    out.append((sub_name, module))
        else:
            for key, value in obj.items():
                visit(value, str(key))

    visit(tree, "metric" if isinstance(tree, torch.nn.Module) else "")
    return out


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


def _deferred_flags(metric: Metric) -> list[tuple[str, str, str]]:
    """``(state, message, action)`` for the deferred flags ``metric.compute()`` reads, in the order it reads them."""
    if not isinstance(metric, DeferredChecks):
        return []
    return [(name, message, action) for name, (message, action) in metric._deferred_checks_registered().items()]


def _counters(metric: Metric) -> dict[str, int]:
    return {name: int(metric.__dict__[name]) for name in _COUNTERS if name in metric.__dict__}


def _clone_state(value: Any) -> Any:
    if isinstance(value, Tensor):
        return value.detach().clone()
    return [piece.detach().clone() for piece in value]


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


class _Transfer:
    """Tensors concatenated per (device, dtype) and copied to the host once per group."""

    def __init__(self, tensors: list[Tensor], ops: StreamOps) -> None:
        self.layout = [(tensor.shape, tensor.numel()) for tensor in tensors]
        groups: dict[tuple[torch.device, torch.dtype], list[int]] = {}
        for index, tensor in enumerate(tensors):
            groups.setdefault((tensor.device, tensor.dtype), []).append(index)
        self.groups: list[tuple[list[int], Tensor]] = []
        self.device_buffers: list[Tensor] = []  # alive until the host has synchronized on the copies
        for indices in groups.values():
            flat = [tensors[index].detach().reshape(-1) for index in indices]
            buffer = flat[0] if len(flat) == 1 else torch.cat(flat)
            self.device_buffers.append(buffer)
            self.groups.append((indices, ops.to_host(buffer)))

    def values(self) -> list[Any]:
        """Host values in the original order; call after synchronizing."""
        out: list[Any] = [None] * len(self.layout)
        for indices, host in self.groups:
            offset = 0
            for index in indices:
                shape, numel = self.layout[index]
                out[index] = host[offset : offset + numel].reshape(shape).tolist()
                offset += numel
        return out


class _Slot:
    """One metric of the structure: the live metric, its shadow, and the shadow's snapshot buffers."""

    __slots__ = ("buffers", "lists", "live", "name", "shadow")

    def __init__(self, name: str, live: Metric, shadow: Metric) -> None:
        self.name = name
        self.live = live
        self.shadow = shadow
        self.buffers: dict[str, Tensor] = {}  # tensor state -> buffer: the window's local values, stable storage
        self.lists: dict[str, list[Tensor]] = {}  # list state -> the window's elements (by reference)


class _Record:
    """What one shadow member's ``compute()`` did: its exception, its deferred flags."""

    __slots__ = ("error", "flags", "metric")

    def __init__(self, metric: Metric) -> None:
        self.metric = metric
        self.error: BaseException | None = None
        # (state, message, action, violation code): a tensor until read, then (violated, first code) as Python values
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


class AsyncMetricCollector(Stateful):
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
        _check_structure(metric)
        self._metric = metric
        self._stream_ops = stream_ops
        self._live = _named_metrics(metric)
        self._bound = False
        self._ops: StreamOps | None = None
        self._side: Any = None
        self._shadow: Any = None
        self._slots: list[_Slot] = []  # per metric: the live one, its shadow and the shadow's buffers
        self._sync_units: list[Metric] = []
        self._checked_units: list[Metric] = []
        self._log: list[_Record] = []
        # The window in flight: scheduled (a snapshot exists), launched (its sync has started), what it produced.
        self._scheduled = False
        self._launched = False
        self._process_group: Any = None
        self._handle: SyncHandle | None = None
        self._outcome: tuple[Any, _Transfer] | None = None
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
        named = _named_metrics(shadow)
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

        Raises:
            RuntimeError: if a collection is in flight (collect it first).

        Example:
            >>> from torchmetrics_async import SumMetric
            >>> collector = AsyncMetricCollector(SumMetric())
            >>> collector.bind()
            >>> collector.unbind()
            >>> collector.is_bound
            False
        """
        if self._scheduled and self._launched:
            raise RuntimeError("AsyncMetricCollector: a collection is in flight: call collect_results() first.")
        if self._scheduled and self._bound:  # loaded, not launched: keep the window for the next bind()
            self._pending = self._window_state()
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

        No host sync and no barrier: the states are copied in place into buffers allocated at ``bind()`` (list
        states hand over their elements by reference), the reset copies device-resident defaults, and the
        collectives are launched asynchronously. On CUDA the sync and the compute are enqueued on the side stream
        after an event recorded once the snapshot is enqueued. Exception: list states in a distributed run on CUDA
        read their exchanged shapes on the host here (see the module docstring).

        Args:
            process_group: the group to sync over (``None``: each metric's ``process_group``, else the world).

        Raises:
            RuntimeError: if not bound, or if a window is scheduled already and not collected.

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
        if self._scheduled:
            raise RuntimeError("AsyncMetricCollector: already scheduled: call collect_results() first.")
        self._snapshot()
        self._process_group = process_group
        # The sync reads only the buffers, so it can start before the reset; if it fails to start, the live metrics
        # still hold the window and nothing is lost.
        try:
            self._launch()
        except BaseException:
            self._release()
            raise
        self._scheduled = True
        _IN_FLIGHT.add(self)
        _reset_tree(self._metric)

    def collect_results(self) -> Any:
        """Wait for the scheduled window, compute it, and return its values as Python scalars.

        Deferred errors are raised (``RuntimeError``) and deferred warnings emitted with torchmetrics' messages, as
        ``compute()`` would; either way the window is over afterwards.

        Returns:
            A PyTree mirroring ``compute()``'s output: ``float``/``int``/``bool`` for scalars, nested lists for other
            tensors; a collection gives its ``compute()`` dict, a dict of metrics a dict with the same keys.

        Raises:
            RuntimeError: if not bound, if nothing was scheduled, or a deferred error (torchmetrics' message).

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
        if not self._scheduled:
            raise RuntimeError("AsyncMetricCollector: nothing scheduled: call schedule_collection() first.")
        try:
            if not self._launched:  # a window restored from a checkpoint: its sync starts now
                self._launch()
            if self._ops is None:
                self._handle.wait()
                tree = _compute_tree(self._shadow)
                records = self._log
                flags = self._read_flags(records)
                values = [tensor.detach().tolist() for tensor in [*_tensor_leaves(tree, []), *flags]]
            else:
                tree, transfer = self._outcome
                records = self._log
                self._ops.synchronize(self._done)  # the one host wait: sync, compute and copies are done
                values = transfer.values()
            leaves = len(values) - sum(len(record.flags) for record in records)
            flag_values = iter(values[leaves:])
            for record in records:
                record.flags = [
                    (attr, message, action, *decode_violation(next(flag_values)))
                    for attr, message, action, _ in record.flags
                ]
            self._report(records)
            return _to_python(tree, iter(values[:leaves]))
        finally:
            self._release()
            self._scheduled = False

    def _require_bound(self, what: str) -> None:
        if not self._bound:
            raise RuntimeError(f"AsyncMetricCollector is not bound: call bind() before {what}().")

    def _snapshot(self) -> None:
        """Copy the live states into the buffers (in place), take list elements by reference, copy update counts."""
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
                        buffer.copy_(value)
                    target[attr] = buffer
                else:
                    # A new list of the same elements: reset() clears the live list in place.
                    slot.lists[attr] = target[attr] = list(value)
            copy_update_count(slot.live, slot.shadow)
            if isinstance(slot.live, DeferredChecks):
                # The window's flags travel in the buffers; the collector reports them, the live reset must not.
                slot.live._hand_over_deferred(slot.shadow)
            for name in _COUNTERS:
                if name in source:
                    target[name] = source[name]
            target["_computed"] = None

    def _install(self, window: Mapping[str, Mapping[str, Any]]) -> None:
        """Put a saved window (``state_dict()["window"]``) into the buffers: it is scheduled, not launched."""
        for slot in self._slots:
            states, count, counters = _entry(window, slot.name)
            target = slot.shadow.__dict__
            for attr, default in slot.shadow._defaults.items():
                value = _state(states, attr, slot.name)
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
                slot.shadow._reset_deferred()  # a saved window carries its flags, not where they were first set
            target.update({name: int(value) for name, value in counters.items()})
            target["_computed"] = None
        self._scheduled = True
        self._launched = False

    def _launch(self) -> None:
        """Start the sync of the buffers (and on the accelerator path, the compute and the host copies)."""
        self._log.clear()
        ops = self._ops
        if ops is None:
            self._handle = sync_metrics(self._sync_units, self._process_group, async_op=True)
            self._launched = True
            return
        ready = ops.record_event(ops.current_stream())  # after the snapshot's copies
        ops.wait_event(self._side, ready)
        with ops.use(self._side):
            handle = sync_metrics(self._sync_units, self._process_group, async_op=True)
            # NCCL's wait() orders the current (side) stream after the collectives; the host does not wait.
            handle.wait()
            tree = _compute_tree(self._shadow)
            flags = self._read_flags(self._log)
            transfer = _Transfer([*_tensor_leaves(tree, []), *flags], ops)
            self._done = ops.record_event(self._side)
        self._handle = handle
        self._outcome = (tree, transfer)
        self._launched = True

    def _read_flags(self, records: list[_Record]) -> list[Tensor]:
        """Attach each computed member's deferred flag tensors to its record; return them all, in order."""
        checked = {id(unit) for unit in self._checked_units}
        out: list[Tensor] = []
        for record in records:
            if id(record.metric) in checked:
                metric = record.metric
                firsts = first_violations(metric)
                record.flags = [
                    (attr, message, action, violation_code(getattr(metric, attr), firsts[attr]))
                    for attr, message, action in _deferred_flags(metric)
                ]
                out.extend(code for *_, code in record.flags)
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
        """Everything needed to resume: live states and update counts, and the window in flight (local states).

        Every state is included whatever its ``persistent`` setting. ``"window"`` holds the scheduled window's local
        (pre-sync) states when one is in flight, else the defaults, so the layout is the same at every point of the
        lifecycle (``torch.distributed.checkpoint`` loads into the layout of a fresh collector). Tensors are copies.

        Returns:
            ``{"metrics": {name: {"states": ..., "update_count": int, "counters": ...}}, "window": {same},
            "in_flight": bool}``; ``counters`` holds other window counters (a ``Running`` wrapper's position).

        Example:
            >>> import torch
            >>> from torchmetrics_async import SumMetric
            >>> metric = SumMetric()
            >>> metric.update(torch.tensor(3.0))
            >>> state = AsyncMetricCollector(metric).state_dict()
            >>> state["metrics"]["metric"]["states"], state["in_flight"]
            ({'sum_value': tensor(3.), 'nan_seen': tensor(False)}, False)
        """
        live = {
            name: {
                "states": {attr: _clone_state(getattr(metric, attr)) for attr in metric._defaults},
                "update_count": int(metric._update_count),
                "counters": _counters(metric),
            }
            for name, metric in self._live
        }
        if not self._scheduled:
            window = {
                name: {
                    "states": {attr: _clone_state(default) for attr, default in metric._defaults.items()},
                    "update_count": 0,
                    "counters": dict.fromkeys(_counters(metric), 0),
                }
                for name, metric in self._live
            }
        elif self._pending is not None:
            window = {
                name: {
                    "states": {attr: _clone_state(value) for attr, value in entry["states"].items()},
                    "update_count": int(entry["update_count"]),
                    "counters": dict(entry.get("counters", {})),
                }
                for name, entry in self._pending.items()
            }
        else:
            window = self._window_state()
        return {"metrics": live, "window": window, "in_flight": self._scheduled}

    def _window_state(self) -> dict[str, dict[str, Any]]:
        """The scheduled window's local states, from the buffers (the sync replaces the shadow's states, not them)."""
        out = {}
        for slot in self._slots:
            states = {}
            for attr, default in slot.shadow._defaults.items():
                local = slot.buffers[attr] if isinstance(default, Tensor) else slot.lists.get(attr, [])
                states[attr] = _clone_state(local)
            out[slot.name] = {
                "states": states,
                "update_count": int(slot.shadow._update_count),
                "counters": _counters(slot.shadow),
            }
        return out

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore live states, update counts and a window in flight, at any point of the lifecycle.

        A restored window in flight is synced (over each metric's own ``process_group``, else the world) and computed
        by the next ``collect_results()``, after ``bind()`` if not bound yet. A window this collector had in flight is
        finished (its collectives complete) and dropped.

        Args:
            state_dict: from :meth:`state_dict` of a collector over the same metric structure.

        Raises:
            KeyError: if a metric or a state of this collector is missing from ``state_dict``.

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
        live = state_dict["metrics"]
        for name, metric in self._live:
            states, count, counters = _entry(live, name)
            for attr in metric._defaults:
                _load_live_state(metric, attr, _state(states, attr, name))
            set_update_count(metric, int(count))
            metric.__dict__.update({counter: int(value) for counter, value in counters.items()})
            metric.__dict__["_computed"] = None
        if self._scheduled and self._launched:
            self._drain()
        if self._bound:
            self._release()
        self._scheduled = False
        self._pending = None
        if not state_dict["in_flight"]:
            return
        window = state_dict["window"]
        for name, _ in self._live:
            _entry(window, name)  # fail now, not at bind()
        if self._bound:
            self._install(window)
        else:
            self._pending = {name: dict(entry) for name, entry in window.items()}
            self._scheduled = True
            self._launched = False

    def _drain(self) -> None:
        """Let an in-flight window's work finish (other ranks take part in its collectives) and forget it."""
        if self._ops is None:
            self._handle.wait()
        else:
            self._ops.synchronize(self._done)


def drain_in_flight() -> int:
    """Wait for the collectives of every launched, uncollected window and drop those windows (teardown only).

    Returns:
        How many windows were drained.
    """
    drained = 0
    for collector in list(_IN_FLIGHT):
        try:
            if collector._launched:
                collector._drain()
                drained += 1
        finally:
            collector._release()
            collector._scheduled = False
    return drained


def _collections(tree: Any) -> list[MetricCollection]:
    if isinstance(tree, MetricCollection):
        return [tree]
    if isinstance(tree, Metric):
        return []
    return [collection for value in tree.values() for collection in _collections(value)]


def _entry(section: Mapping[str, Any], name: str) -> tuple[Mapping[str, Any], int, Mapping[str, int]]:
    if name not in section:
        raise KeyError(f"AsyncMetricCollector state_dict has no entry for metric {name!r}; it has {sorted(section)}.")
    entry = section[name]
    return entry["states"], entry["update_count"], entry.get("counters", {})


def _state(states: Mapping[str, Any], attr: str, name: str) -> Any:
    if attr not in states:
        raise KeyError(f"AsyncMetricCollector state_dict has no state {attr!r} for metric {name!r}.")
    return states[attr]


def _load_live_state(metric: Metric, attr: str, value: Any) -> None:
    """Give the live metric a copy of a saved state (its own: it may be written in place from then on)."""
    current = getattr(metric, attr)
    device = current.device if isinstance(current, Tensor) else metric.device
    if isinstance(value, Tensor):
        loaded: Any = value.detach().clone().to(device)
    else:
        loaded = [piece.detach().clone().to(device) for piece in value]
    setattr(metric, attr, loaded)
    owned = metric.__dict__.get(OWNED_STATES)
    if owned is not None:
        owned[attr] = loaded


def _announce_own_sync(metric: Metric) -> None:
    name = type(metric).__qualname__
    if name not in _ANNOUNCED:
        _ANNOUNCED.add(name)
        rank_zero_warn(
            f"AsyncMetricCollector: {type(metric).__name__} has its own compute() wrapper; it runs as is (its own"
            " sync, if any, is not fused or overlapped, and its errors are not deferred).",
            UserWarning,
        )
