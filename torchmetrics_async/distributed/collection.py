"""The fused ``MetricCollection`` (``compute()`` syncs every member in one round), and :func:`sync_context`."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from copy import deepcopy
from typing import Any

import torch

from torchmetrics_async._torchmetrics import Metric
from torchmetrics_async._torchmetrics import MetricCollection as _TorchMetricsCollection
from torchmetrics_async.compute_groups import equal_metric_states
from torchmetrics_async.deferred import UNREPORTED, forget_preread, read_deferred_together
from torchmetrics_async.metric import SyncFreeMixin, copy_update_count, fused_reset, has_stock_compute
from torchmetrics_async.sync.metrics import _start_metric_sync
from torchmetrics_async.sync.states import _collect_metrics, _distributed, _fusable_metric

__all__ = ["MetricCollection", "fused_collection_class", "sync_context"]


def _syncs_in_compute(metric: Metric) -> bool:
    """Whether ``metric.compute()`` would sync now through the stock ``_sync_dist`` (then it can be pre-synced)."""
    return (
        has_stock_compute(metric)  # wrappers and compositions sync inside, or not at all
        # A member with a cached value takes part too (whether this rank updated is local data): every rank plans alike.
        and metric._to_sync
        and not metric._is_synced  # compute() raises "already synced": let it
        and _fusable_metric(metric)
        and _distributed(metric)
    )


@contextlib.contextmanager
def sync_context(metrics: Any, process_group: Any = None) -> Iterator[None]:
    """Compute many metrics on states synced in one fused round: ``compute()`` inside the block does not sync again.

    On entry every metric whose ``compute()`` would sync is synced (cached value or not: the plan must not depend on
    data); on exit every metric still synced is restored.

    Example:
        >>> import torch
        >>> from torchmetrics_async import MeanMetric, MaxMetric
        >>> metrics = {"loss": MeanMetric(), "peak": MaxMetric()}
        >>> for metric in metrics.values():
        ...     metric.update(torch.tensor([1.0, 3.0]))
        >>> with sync_context(metrics):
        ...     values = {name: metric.compute() for name, metric in metrics.items()}
        >>> values
        {'loss': tensor(2.), 'peak': tensor(3.)}
    """
    labels: dict[int, str] = {}
    members = [metric for metric in _collect_metrics(metrics, labels).values() if _syncs_in_compute(metric)]
    previous = [(metric, metric._to_sync) for metric in members]
    try:
        if members:
            _start_metric_sync(members, process_group, False, labels).wait()
        for metric in members:
            metric._to_sync = False  # compute() finds them synced and only unsyncs afterwards
        yield
    finally:
        for metric, to_sync in previous:
            metric._to_sync = to_sync
            if metric._is_synced and metric._should_unsync:  # not computed, or its compute raised before unsync
                metric.unsync()


def _computes_as_is(metric: Metric) -> bool:
    """Whether ``metric.compute()`` would compute (no cached value) from the states it holds now (no sync inside)."""
    return metric._computed is None and has_stock_compute(metric) and not (metric._to_sync and _distributed(metric))


class _FusedSyncCollection:
    """``compute()`` syncs every member that would sync in one fused round, then computes each on synced states."""

    # Compute groups form as torchmetrics forms them, accelerated and torchmetrics members mixed.
    _equal_metric_states = staticmethod(equal_metric_states)

    def update(self, *args: Any, **kwargs: Any) -> None:
        """Torchmetrics' collection update; inside ``torch.compile`` compute groups are not formed (a host read)."""
        if torch.compiler.is_compiling() and not self._groups_checked:
            for metric in self._modules.values():
                metric.update(*args, **metric._filter_kwargs(**kwargs))
            return
        super().update(*args, **kwargs)

    def _compute_groups_create_state_ref(self, copy: bool = False) -> None:
        """Torchmetrics' compute-group state sharing; update counts copied without a host read.

        Without a group of two or more, ``_state_is_copy`` is left alone: Dynamo guards on it (a second compile).
        """
        groups = [group for group in self._groups.values() if len(group) > 1]
        if not groups:
            return
        if not self._state_is_copy:
            for group in groups:
                first = getattr(self, group[0])
                for name in group[1:]:
                    member = getattr(self, name)
                    for state in first._defaults:
                        value = getattr(first, state)
                        setattr(member, state, deepcopy(value) if copy else value)
                    copy_update_count(first, member)
                    if isinstance(member, SyncFreeMixin):  # a door: its forward adds into its own states
                        member._own_states(in_place=True)
        self._state_is_copy = copy

    def compute(self) -> dict[str, Any]:
        """Sync all members together, compute each, restore their local states."""
        with sync_context(self):
            # Linking the groups again would hand the leader's *synced* states to members grouped on this rank's data.
            groups, self._groups = self._groups, {}
            # Every member's deferred flags in one host read, not one per member.
            read = read_deferred_together([member for member in self._modules.values() if _computes_as_is(member)])
            try:
                return super().compute()
            finally:
                self._groups = groups
                forget_preread(read)

    def reset(self) -> None:
        """Reset every member (one fused copy of their defaults), then raise the first deferred error a member reported.

        torchmetrics' loop would stop at the first member that raises, leaving the others holding the old window.

        Example:
            >>> import torch
            >>> from torchmetrics_async import MeanMetric, SumMetric
            >>> collection = MetricCollection({"mean": MeanMetric(nan_strategy="error"), "sum": SumMetric()})
            >>> collection.update(torch.tensor([1.0, float("nan")]))
            >>> try:
            ...     collection.reset()
            ... except RuntimeError as err:
            ...     print(err)
            Encountered `nan` values in tensor
            >>> collection["sum"].update_count
            0
        """
        first: RuntimeError | None = None
        members = list(self.values(copy_state=False))
        # Every member's unreported checks in one host read: each member's reset() reports from it.
        read = read_deferred_together([member for member in members if member.__dict__.get(UNREPORTED, False)])
        try:
            with fused_reset(members):
                for metric in members:
                    try:
                        metric.reset()
                    except RuntimeError as err:
                        first = first or err
        finally:
            forget_preread(read)
        if self._enable_compute_groups and self._groups_checked:
            self._compute_groups_create_state_ref()  # as torchmetrics' reset: re-link the groups' states
        if first is not None:
            raise first


class MetricCollection(_FusedSyncCollection, _TorchMetricsCollection):
    """torchmetrics' ``MetricCollection`` whose ``compute()`` syncs all members in one fused round of collectives.

    Example:
        >>> import torch, torchmetrics
        >>> collection = MetricCollection([torchmetrics.MaxMetric(), torchmetrics.MinMetric()])
        >>> collection.update(torch.tensor([1.0, 5.0]))
        >>> collection.compute()
        {'MaxMetric': tensor(5.), 'MinMetric': tensor(1.)}
    """

    # Its public home: pickles (and reprs) name the package, as before the package was split by concern.
    __module__ = "torchmetrics_async.distributed"


_FUSED_COLLECTIONS: dict[type, type] = {_TorchMetricsCollection: MetricCollection}


def _rebuild_collection(base: type, state: dict) -> Any:
    cls = fused_collection_class(base)
    obj = cls.__new__(cls)
    obj.__setstate__(state)
    return obj


def _reduce_collection(self: Any, protocol: int) -> tuple:
    # A derived class shares its base's name, so pickle could not find it by name: rebuild it from the base.
    return _rebuild_collection, (type(self).__bases__[1], self.__dict__.copy())


def fused_collection_class(cls: type) -> type:
    """The fused-sync class for a ``MetricCollection`` class: a subclass of ``cls`` (made once, picklable) or itself.

    Example:
        >>> import torchmetrics
        >>> fused_collection_class(torchmetrics.MetricCollection) is MetricCollection
        True
    """
    if issubclass(cls, _FusedSyncCollection):
        return cls
    if cls not in _FUSED_COLLECTIONS:
        _FUSED_COLLECTIONS[cls] = type(
            cls.__name__,
            (_FusedSyncCollection, cls),
            {"__module__": cls.__module__, "__qualname__": cls.__qualname__, "__reduce_ex__": _reduce_collection},
        )
    return _FUSED_COLLECTIONS[cls]
