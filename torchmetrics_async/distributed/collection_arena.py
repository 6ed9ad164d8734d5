"""The state arena of an accelerated ``MetricCollection``: its members' states planned once, synced and reset by group.

The members whose ``compute()`` the fused sync takes over (this package's metrics with a stock ``compute()``,
``sync_on_compute``, torchmetrics' default gather, every state an all-reduced tensor) keep their states as views into
one flat buffer per (device, dtype, reduction) (:class:`~torchmetrics_async.state_arena.StateArena`). The layout is
planned at the first ``reset()`` or distributed ``compute()``, and again only when a state was replaced, a member was
added or removed, or compute groups formed. Members that a bound :class:`~torchmetrics_async.AsyncMetricCollector`
holds in its own arena stay there (until it is unbound). ``compute()`` then all-reduces the arena through a plan made
once (:class:`~torchmetrics_async.distributed.arena_sync.ArenaAllReduce`: no bucket planning or packing per call; a
collection the arena does not cover whole, such as one with a list state, syncs as before), and ``reset()`` is one
copy per group plus the members' own reset for everything else (counters, flags, list states, other members).

Example:
    >>> import torch
    >>> from torchmetrics_async import MeanMetric, MetricCollection, SumMetric
    >>> collection = MetricCollection({"mean": MeanMetric(), "sum": SumMetric()})
    >>> collection.reset()
    >>> arena = collection_arena(collection)
    >>> arena.plans, len(arena.arena.metrics)
    (1, 2)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torchmetrics_async._torchmetrics import Metric
from torchmetrics_async.distributed.arena_sync import ArenaAllReduce, arena_sync
from torchmetrics_async.metric import has_stock_compute
from torchmetrics_async.state_arena import ARENA, StateArena, arena_op
from torchmetrics_async.sync.collectives import SyncHandle
from torchmetrics_async.sync.states import _fusable_metric

__all__ = ["CollectionArena", "collection_arena", "drop_collection_arena"]

#: Instance attribute of an accelerated collection holding its :class:`CollectionArena` (not pickled or copied).
COLLECTION_ARENA = "_collection_arena"


def _arena_member(metric: Metric) -> bool:
    """Whether every state of ``metric`` joins the arena and the fused sync takes over its ``compute()``'s sync."""
    return (
        ARENA not in metric.__dict__  # another arena's (a bound collector's): it keeps them
        and has_stock_compute(metric)
        and bool(metric.sync_on_compute)
        and _fusable_metric(metric)
        and bool(metric._defaults)
        and all(arena_op(metric, attr) is not None for attr in metric._defaults)
    )


def _arena_members(collection: Any) -> list[Metric]:
    """The members that join, in the collection's order; a compute group joins whole or not at all.

    A follower holds its leader's state tensors: planning a follower whose leader stays out (a torchmetrics metric)
    would give it a view of its own and cut the link.
    """
    members = dict(collection._modules)
    joins = {name for name, metric in members.items() if _arena_member(metric)}
    for group in collection._groups.values():
        if not all(name in joins for name in group):
            joins.difference_update(group)
    return [metric for name, metric in members.items() if name in joins]


class CollectionArena:
    """One collection's :class:`~torchmetrics_async.state_arena.StateArena`, its members and its sync plan.

    Example:
        >>> CollectionArena().plans
        0
    """

    def __init__(self) -> None:
        #: the arena (``None``: not planned yet, or no member joins)
        self.arena: StateArena | None = None
        #: how many layouts were planned (a new arena or a re-plan of the current one)
        self.plans = 0
        self._members: tuple[Any, ...] = ()
        self._groups: tuple[tuple[str, ...], ...] = ()
        self._sync: list[ArenaAllReduce] = []
        self._elsewhere: list[Metric] = []  # members in another arena when this one was planned

    def current(self, collection: Any) -> StateArena | None:
        """The arena for the collection's members and compute groups now, planned again if anything changed.

        Args:
            collection: the collection (its compute-group states linked, as ``values(copy_state=False)`` links them).

        Returns:
            The arena, or ``None`` if no member joins.
        """
        members = tuple(collection._modules.values())
        groups = tuple(tuple(group) for group in collection._groups.values())
        arena = self.arena
        same = (
            len(members) == len(self._members)
            and all(a is b for a, b in zip(members, self._members, strict=True))
            and groups == self._groups
            and all(ARENA in metric.__dict__ for metric in self._elsewhere)
            and (arena is None or all(metric.__dict__.get(ARENA) is arena for metric in arena.metrics))
        )
        if same:
            if arena is not None and arena.ensure():
                self.plans += 1
            return arena
        self.release()
        self._members, self._groups = members, groups
        self._elsewhere = [metric for metric in members if ARENA in metric.__dict__]
        chosen = _arena_members(collection)
        if chosen:
            self.arena = StateArena(chosen)
            self.plans += 1
        return self.arena

    def start_sync(
        self,
        collection: Any,
        metrics: Sequence[Metric],
        labels: dict[int, str],
    ) -> SyncHandle | None:
        """``sync()`` of ``metrics`` (those of the collection that sync in ``compute()``) through the arena's plan.

        Args:
            collection: the collection.
            metrics: the members to sync, in order.
            labels: their names, for the plan check's message.

        Returns:
            The handle, or ``None`` if the arena does not cover exactly these metrics (then sync as before).
        """
        arena = self.current(collection)
        if arena is None:
            return None
        return arena_sync(metrics, arena, None, self._sync, keep_local=True, labels=labels)

    def release(self) -> None:
        """Forget the arena (the members keep their states as they are); the next use plans again."""
        if self.arena is not None:
            self.arena.release()
        self.arena = None
        self._members = self._groups = ()
        self._sync = []
        self._elsewhere = []


def collection_arena(collection: Any) -> CollectionArena:
    """The :class:`CollectionArena` of an accelerated collection (created empty at first use).

    Args:
        collection: the collection.

    Returns:
        Its arena holder.

    Example:
        >>> from torchmetrics_async import MetricCollection, SumMetric
        >>> collection_arena(MetricCollection([SumMetric()])).arena is None  # planned at the first reset()/compute()
        True
    """
    state = collection.__dict__
    holder = state.get(COLLECTION_ARENA)
    if holder is None:
        holder = state[COLLECTION_ARENA] = CollectionArena()
    return holder


def drop_collection_arena(state: dict[str, Any], release: bool = False) -> dict[str, Any]:
    """``state`` (a collection's ``__dict__`` or a copy of it) without its arena holder.

    Args:
        state: the attribute dict.
        release: also release the arena (the members stop being managed: ``.to()``, a load).

    Returns:
        ``state``, the holder removed.

    Example:
        >>> drop_collection_arena({"a": 1, COLLECTION_ARENA: CollectionArena()})
        {'a': 1}
    """
    holder = state.pop(COLLECTION_ARENA, None)
    if release and holder is not None:
        holder.release()
    return state
