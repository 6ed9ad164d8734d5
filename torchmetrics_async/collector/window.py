"""The collector's shadow: a deep copy of the metrics whose states hold each window, in buffers the collector owns."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor

from torchmetrics_async._torchmetrics import Metric, MetricCollection, rank_zero_warn
from torchmetrics_async.checkpoint import _COUNTERS, counters, entry, make_entry, named_metrics, state
from torchmetrics_async.copies import same_layout
from torchmetrics_async.deferred import DEFERRED_RAISE_OWNED, UNREPORTED, deferred_checks_registered, report_deferred
from torchmetrics_async.metric import SyncFreeMixin, copy_update_count, fused_copy_, has_stock_compute, set_update_count

_WHAT = "AsyncMetricCollector"
_ANNOUNCED: set[str] = set()


def _roots(tree: Any) -> list[Any]:
    """The structure's metrics and collections: itself, or the values of its dict (see ``check_structure``)."""
    return [tree] if isinstance(tree, (Metric, MetricCollection)) else list(tree.values())


def _units(tree: Any) -> list[Metric]:
    """The metrics whose ``compute()`` the structure's compute calls, in that order."""
    return [
        unit
        for root in _roots(tree)
        for unit in (root._modules.values() if isinstance(root, MetricCollection) else [root])
    ]


def _announce_own_sync(metric: Metric) -> None:
    name = type(metric).__qualname__
    if name not in _ANNOUNCED:
        _ANNOUNCED.add(name)
        rank_zero_warn(
            f"AsyncMetricCollector: {type(metric).__name__} has its own compute() wrapper; it runs as is (its own"
            " sync, if any, is not fused or overlapped, and its errors are not deferred).",
            UserWarning,
        )


def _owned(pieces: list[Tensor]) -> list[Tensor]:
    """Copies of a list state's elements (views of one concatenation where they agree)."""
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
        self.flags: list[tuple] = []  # (message, action, violated): the check state until read, then its value


def _capturing(metric: Metric, inner: Callable, log: list[_Record]) -> Callable:
    """``compute`` that records an exception for ``collect_results`` to raise in order."""

    def compute(*args: Any, **kwargs: Any) -> Any:
        record = _Record(metric)
        log.append(record)
        try:
            return inner(*args, **kwargs)
        except Exception as err:  # re-raised at collect time, after the deferred flags of the members before it
            record.error = err
            return None

    return compute


class _Shadow:
    """A deep copy of the metric structure whose states are the buffers of a window, and what its compute did."""

    def __init__(self, metric: Any, live: list[tuple[str, Metric]]) -> None:
        tree = copy.deepcopy(metric)
        named = named_metrics(tree)
        if [name for name, _ in named] != [name for name, _ in live]:
            raise RuntimeError("AsyncMetricCollector: the deep copy of the metrics has a different structure.")
        for collection in (root for root in _roots(tree) if isinstance(root, MetricCollection)):
            # One group per member: shared compute-group states would make the members' buffers alias each other.
            collection._groups = {index: [name] for index, name in enumerate(collection._modules)}
            collection._enable_compute_groups = False
        self.tree = tree
        self.slots: list[_Slot] = []
        for (name, live_metric), (_, copied) in zip(live, named, strict=True):
            slot = _Slot(name, live_metric, copied)
            states = copied.__dict__
            for attr, default in copied._defaults.items():
                if isinstance(default, Tensor):
                    # its own storage (a compute-group follower shares its leader's tensor in the live collection)
                    slot.buffers[attr] = states[attr] = getattr(copied, attr).detach().clone()
                else:
                    states[attr] = []
            self.slots.append(slot)
        self.log: list[_Record] = []  # one record per member computed in this window
        units = list({id(unit): unit for unit in _units(tree)}.values())  # a metric under two keys: hook it once
        self.checked_units = [unit for unit in units if has_stock_compute(unit)]
        self.sync_units = [unit for unit in self.checked_units if unit.sync_on_compute]
        self.own_sync = len(self.checked_units) < len(units)  # some member syncs inside its own compute()
        for unit in units:
            if has_stock_compute(unit):
                # Synced explicitly (fused, early) and unsynced by the release; the collector reads the deferred flags.
                unit._to_sync = False
                unit._should_unsync = False
                unit.__dict__[DEFERRED_RAISE_OWNED] = True
            else:
                _announce_own_sync(unit)
            unit.__dict__["compute"] = _capturing(unit, unit.compute, self.log)

    def snapshot(self) -> None:
        """Copy the live states into the buffers (one fused copy), list elements into copies, and update counts."""
        buffers: list[Tensor] = []
        values: list[Tensor] = []
        for slot in self.slots:
            source = slot.live.__dict__
            target = slot.shadow.__dict__
            for attr in slot.live._defaults:
                value = source[attr]
                if isinstance(value, Tensor):
                    buffer = slot.buffers.get(attr)
                    if buffer is None or not same_layout(buffer, value):
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

    def install(self, window: Mapping[str, Mapping[str, Any]]) -> None:
        """Put a saved window (``state_dict()["window"]``) into the buffers."""
        for slot in self.slots:
            states, count, saved_counters = entry(window, slot.name, _WHAT)
            target = slot.shadow.__dict__
            for attr, default in slot.shadow._defaults.items():
                value = state(states, attr, slot.name, _WHAT)
                if isinstance(default, Tensor):
                    buffer = slot.buffers[attr]
                    if same_layout(buffer, value):
                        buffer.copy_(value)
                    else:
                        buffer = slot.buffers[attr] = value.detach().clone().to(buffer.device)
                    target[attr] = buffer
                else:
                    slot.lists[attr] = target[attr] = [piece.to(slot.shadow.device) for piece in value]
            set_update_count(slot.shadow, int(count))
            if isinstance(slot.shadow, SyncFreeMixin):
                slot.shadow._reset_deferred()  # a restored window warns afresh
            target.update({name: int(value) for name, value in saved_counters.items()})
            target["_computed"] = None

    def local_states(self) -> dict[str, dict[str, Any]]:
        """The window's local states, from the buffers (the sync replaces the shadow's states, not them)."""
        return {
            slot.name: make_entry(
                {
                    attr: slot.buffers[attr] if isinstance(default, Tensor) else slot.lists.get(attr, [])
                    for attr, default in slot.shadow._defaults.items()
                },
                slot.shadow._update_count,
                counters(slot.shadow),
            )
            for slot in self.slots
        }

    def compute(self) -> Any:
        tree = self.tree
        if isinstance(tree, (Metric, MetricCollection)):
            return tree.compute()
        return {key: value.compute() for key, value in tree.items()}

    def read_flags(self) -> list[Tensor]:
        """Attach each computed member's deferred flag tensors to its record; return them all, in order."""
        checked = {id(unit) for unit in self.checked_units}
        out: list[Tensor] = []
        for record in self.log:
            if id(record.metric) in checked:
                checks = deferred_checks_registered(record.metric).items()  # none on a torchmetrics metric
                record.flags = [(message, action, getattr(record.metric, name)) for name, (message, action) in checks]
                out.extend(first for *_, first in record.flags)
        return out

    def report(self, values: list[Any]) -> None:
        """Given the host values of the flags, warn and raise what each member's ``compute()`` would, in order."""
        flag_values = iter(values)
        for record in self.log:
            record.flags = [(message, action, next(flag_values)) for message, action, _ in record.flags]
        for record in self.log:
            report_deferred(record.metric, record.flags)
            if record.error is not None:
                raise record.error

    def flag_count(self) -> int:
        return sum(len(record.flags) for record in self.log)

    def release(self) -> None:
        """Return the shadow to its buffers (unsynced, list states empty) and forget what its compute did."""
        for slot in self.slots:
            states = slot.shadow.__dict__
            states.update(slot.buffers)
            for attr, default in slot.shadow._defaults.items():
                if not isinstance(default, Tensor):
                    states[attr] = []
            states.update(_is_synced=False, _cache=None, _computed=None)
            slot.lists.clear()
        self.log.clear()


def _empty_window(live: list[tuple[str, Metric]]) -> dict[str, dict[str, Any]]:
    """The checkpoint entry of no window: the defaults (the layout stays the same at every point of the lifecycle)."""
    return {name: make_entry(metric._defaults, 0, dict.fromkeys(counters(metric), 0)) for name, metric in live}


def _copied_window(saved: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Copies of a loaded window's entries (one waiting for ``bind()``)."""
    return {name: make_entry(*entry(saved, name, _WHAT)) for name in saved}
