"""The fused all_reduce of a :class:`~torchmetrics_async.state_arena.StateArena`, planned once.

:func:`~torchmetrics_async.sync.metrics.sync_metrics` plans its buckets from the states at every call and packs
them piece by piece. Over an arena the plan is made once, with buffers that live as long as it: each window copies
each arena group into its place in a bucket (one copy per group, casting where a group travels in a wider dtype),
writes the plan check, and all-reduces the buckets in place; finishing sets the metrics' states to views of the
reduced buffers. Same buckets, order, plan check and results as ``sync_metrics`` (it uses the same bucket planner).
A compute-group follower (a metric holding another member's view) is first copied into its own slot: the plan sends
one piece per member, as ``sync_metrics`` does.

The buckets are reused sync after sync: the collector turns its values into Python scalars before the next window,
and torchmetrics' ``compute()`` returns clones of what it computes from the reduced states.

Example:
    >>> from torchmetrics_async import SumMetric
    >>> from torchmetrics_async.state_arena import StateArena
    >>> metric = SumMetric()
    >>> arena_sync([metric], StateArena([metric]), None) is None  # not distributed: nothing to do
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch.distributed as dist
from torch import Tensor

from torchmetrics_async._torchmetrics import Metric, jit_distributed_available
from torchmetrics_async.reductions import REDUCE_OPS as _REDUCE_OPS
from torchmetrics_async.state_arena import StateArena
from torchmetrics_async.sync.buckets import _Bucket, _plan_buckets, ride_value
from torchmetrics_async.sync.collectives import SyncHandle, _member, _to, collective_device
from torchmetrics_async.sync.metrics import _plan_fingerprint, _plan_states, _resolve_group
from torchmetrics_async.sync.plan import _label, _PlanCheck
from torchmetrics_async.sync.states import _fusable_metric

__all__ = ["ArenaAllReduce", "arena_sync", "group_key"]


class ArenaAllReduce:
    """Every state of an arena's metrics all-reduced in buckets planned once (see the module docstring).

    Args:
        arena: the arena; every state its metrics sync must be in it.
        group: the process group it is planned for (not kept: a plan cached on a live collection must not keep the
            group, and with it gloo's threads, alive past ``destroy_process_group()``; ``start`` takes it again).

    Example:
        >>> ArenaAllReduce.__name__
        'ArenaAllReduce'
    """

    def __init__(self, arena: StateArena, group: Any) -> None:
        self.arena = arena
        self.group_key = group_key(group)
        self.plans = arena.plans
        slots = arena.slots
        index_of = {(id(slot.metric), slot.attr): index for index, slot in enumerate(slots)}
        # In sync_metrics' order (metric by metric, state by state): the same buckets, byte for byte, as a rank that
        # syncs these metrics without the arena.
        order = [index_of[id(metric), attr] for metric in arena.metrics for attr in metric._reductions]
        buckets, _ = _plan_buckets([(index, slots[index].view, slots[index].op) for index in order], group)
        #: what the plan check sends: the same as sync_metrics sends for these metrics
        self.member_hashes = _plan_states(arena.metrics)[4]
        self.fingerprint = _plan_fingerprint(self.member_hashes, buckets)
        self.check_device = collective_device(group, arena.metrics[0].device)
        placed: dict[int, tuple[_Bucket, Any]] = {}
        for bucket in buckets:
            bucket.pack()  # offsets, and the buffer this plan keeps
            for segment in bucket.segments:
                placed[segment.token] = (bucket, segment)
        self.buckets = buckets
        self.world_size = 0
        self.reduced: list[tuple[dict, str, Tensor, Any]] | None = None  # see _views
        self.finishing: list[tuple[_Bucket, int]] = []
        self.totals: dict[int, int] = {}
        #: (destination in a bucket buffer, source in the arena, negate): one per group where its slots are adjacent
        self.copies: list[tuple[Tensor, Tensor, bool]] = []
        for group_ in arena.groups:
            indices = [slots.index(slot) for slot in group_.slots]
            first_bucket, first = placed[indices[0]]
            adjacent = all(
                placed[index][0] is first_bucket
                and placed[index][1].ride == first.ride
                and placed[index][1].offset == first.offset + slot.start
                for index, slot in zip(indices, group_.slots, strict=True)
            )
            if adjacent:
                end = first.offset + group_.buffer.numel()
                self.copies.append((first_bucket.buffer[first.offset : end], group_.buffer, first.ride == "negated"))
            else:  # not expected from the planner's order; correct anyway
                for index, slot in zip(indices, group_.slots, strict=True):
                    bucket, segment = placed[index]
                    target = bucket.buffer[segment.offset : segment.offset + segment.numel]
                    self.copies.append((target, slot.view.reshape(-1), segment.ride == "negated"))

    def _views(self, world_size: int) -> None:
        """The reduced states as views of the buffers, made once (only riders and narrow dtypes convert per window)."""
        self.world_size = world_size
        self.finishing = []
        self.totals = {}
        self.reduced = []
        slots = self.arena.slots
        for bucket in self.buckets:
            self.totals[id(bucket)] = sum(segment.numel for segment in bucket.segments)
            means = sum(segment.numel for segment in bucket.segments if segment.op == "mean")
            self.finishing.append((bucket, means))
            for segment in bucket.segments:
                slot = slots[segment.token]
                view = bucket.buffer[segment.offset : segment.offset + segment.numel].view(segment.shape)
                self.reduced.append((slot.metric.__dict__, slot.attr, view, _conversion(segment, view, world_size)))

    def start(
        self,
        group: Any,
        async_op: bool,
        labels: dict[int, str] | None = None,
    ) -> SyncHandle:
        """Copy the arena into the buckets and launch the plan check; the handle's second phase, the all_reduces.

        As in ``sync_metrics``: the second phase (``launch_remaining()``, or ``wait()``) reads the plan check first
        (one host read) and raises :class:`~torchmetrics_async.distributed.PlanMismatchError` on every rank if the
        plans differ, before any bucket is all-reduced.

        Args:
            group: the process group (the one the plan was made for).
            async_op: launch the all_reduces asynchronously; the handle's ``wait()`` finishes.
            labels: the metrics' names, for the plan check's message.

        Returns:
            The handle: ``wait()`` sets every state to its reduction and marks the metrics synced.
        """
        for slot in self.arena._aliased:  # a follower sends its own piece, holding the leader's values
            slot.view.copy_(slot.alias.view)
        for target, source, negate in self.copies:
            target.copy_(source)
            if negate:
                target.neg_()
        for bucket in self.buckets:
            bucket.refill()
        member_labels = [_label(metric, labels or {}) for metric in self.arena.metrics]
        check = _PlanCheck(self.fingerprint, self.member_hashes, member_labels, group, self.check_device)
        world_size = dist.get_world_size(group)

        def launch() -> list[Any]:
            check.verify()
            for bucket in self.buckets:
                op = _REDUCE_OPS[bucket.op]
                bucket.work = dist.all_reduce(bucket.buffer, op=op, group=group, async_op=async_op)
            return [bucket.work for bucket in self.buckets]

        return SyncHandle(lambda: self._finish(world_size), [check.work], launch)

    def _finish(self, world_size: int) -> None:
        if self.reduced is None or self.world_size != world_size:
            self._views(world_size)
        for bucket, means in self.finishing:
            bucket.work.wait()
            bucket.work = None
            bucket.restore(self.totals[id(bucket)], means, world_size)
        for state, attr, view, convert in self.reduced:
            state[attr] = view if convert is None else convert(view)
        for metric in self.arena.metrics:
            metric.__dict__["_is_synced"] = True


def _conversion(segment: Any, view: Tensor, world_size: int) -> Any:
    """What turns a reduced view into the state (as ``_Bucket.finish`` does), or ``None`` if the view is it."""
    if segment.ride is not None:
        return lambda value: ride_value(segment, value, world_size)
    if view.dtype != segment.out_dtype or view.device != segment.device:
        return lambda value: _to(value, segment.device, segment.out_dtype)
    return None


def group_key(group: Any) -> tuple:
    """What a plan depends on in a process group, without holding it: identity, size and backend.

    Example:
        >>> group_key.__name__
        'group_key'
    """
    return id(group), dist.get_world_size(group), str(dist.get_backend(group))


def _syncs_whole_arena(metrics: Sequence[Metric], arena: StateArena) -> bool:
    """Whether ``metrics`` are the arena's metrics and every state they sync is an arena state, as planned."""
    if len(metrics) != len(arena.metrics) or any(a is not b for a, b in zip(metrics, arena.metrics, strict=True)):
        return False
    per_metric: dict[int, int] = {}
    for slot in arena.slots:
        per_metric[id(slot.metric)] = per_metric.get(id(slot.metric), 0) + 1
    complete = all(per_metric.get(id(metric), 0) == len(metric._reductions) for metric in metrics)
    # A compute-group follower (an aliased state) is copied into its own slot first: see ArenaAllReduce.start.
    return complete and arena.is_current()


def arena_sync(
    metrics: Sequence[Metric],
    arena: StateArena,
    process_group: Any,
    cache: list[ArenaAllReduce] | None = None,
    *,
    keep_local: bool = False,
    labels: dict[int, str] | None = None,
) -> SyncHandle | None:
    """``sync_metrics(metrics, process_group, async_op=True)`` through the arena's planned all_reduce, if it applies.

    It applies when the run is distributed, every metric syncs with torchmetrics' default gather on one process
    group this rank belongs to, and every state of every metric is an arena state (no list state, no gathered
    state), the arena being current.

    Args:
        metrics: the metrics to sync (``sync()`` semantics).
        arena: the arena holding their states.
        process_group: as for ``sync_metrics``.
        cache: a list holding the plan from an earlier call (reused while the arena and group are the same).
        keep_local: keep the local states for ``unsync()`` (``sync()``'s ``_cache``): the arena views themselves,
            which the sync only reads (no copy).
        labels: the metrics' names, for the plan check's message.

    Returns:
        The handle, or ``None`` if it does not apply (then call ``sync_metrics``).
    """
    if not metrics or not jit_distributed_available():
        return None
    groups = set()
    for metric in metrics:
        available = metric.distributed_available_fn
        if not (_fusable_metric(metric) and callable(available) and available()):
            return None
        groups.add(id(group := _resolve_group(metric, process_group)))
    if len(groups) != 1 or not _member(group) or not _syncs_whole_arena(metrics, arena):
        return None
    cache = [] if cache is None else cache
    plan = cache[0] if cache else None
    if plan is None or plan.arena is not arena or plan.plans != arena.plans or plan.group_key != group_key(group):
        plan = ArenaAllReduce(arena, group)
        cache[:] = [plan]
    if keep_local:
        for metric in metrics:
            state = metric.__dict__
            metric._cache = {attr: state[attr] for attr in metric._defaults}
    return plan.start(group, async_op=True, labels=labels)
