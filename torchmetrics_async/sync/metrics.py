"""Fused state syncs of many metrics: :func:`sync_states` (``_sync_dist``) and :func:`sync_metrics` (``sync()``)."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

import torch
import torch.distributed as dist
from torch import Tensor

from torchmetrics_async._torchmetrics import (
    ALREADY_SYNCED_MESSAGE,
    Metric,
    TorchMetricsUserError,
    dim_zero_cat,
    gather_all_tensors,
    jit_distributed_available,
)
from torchmetrics_async.reductions import STATE_OPS, fusable
from torchmetrics_async.sync.buckets import _Bucket, _plan_buckets, _Segment, bucket_layout
from torchmetrics_async.sync.collectives import SyncHandle, _member, _to, collective_device
from torchmetrics_async.sync.gather import _ROW, _CatPieces, _Gather, _gather_device
from torchmetrics_async.sync.plan import (
    AgreedPlans,
    PlanMismatchError,
    _check_row,
    _fingerprint,
    _label,
    _plan_entry,
    _PlanCheck,
    carrier_index,
    decode_check,
    encode_check,
)
from torchmetrics_async.sync.states import _announce_fallback, _collect_metrics, _distributed, _Entry, _fusable_metric

__all__ = ["agree_plans", "sync_metrics", "sync_states"]


def _plan_states(
    metrics: list[Metric],
) -> tuple[list[tuple[int, Tensor, str]], list[_Entry], list[_Entry], dict[int, tuple[Metric, list[str]]], list[tuple]]:
    """Every state as an all_reduce item (token: its entry's index), a gathered entry or a fallback; each layout."""
    reduces: list[tuple[int, Tensor, str]] = []
    gathers: list[_Entry] = []
    entries: list[_Entry] = []
    fallbacks: dict[int, tuple[Metric, list[str]]] = {}
    layout: list[tuple] = []
    for metric in metrics:
        member: list[tuple] = [type(metric).__module__, type(metric).__qualname__]
        for attr, fn in metric._reductions.items():
            value = getattr(metric, attr)
            entry = _Entry(metric, attr, value, fn)
            op = STATE_OPS.get(fn)
            if isinstance(value, Tensor):
                # Autograd (a definition: torchmetrics' _enable_grad) keeps its history only through the stack.
                if op is not None and not getattr(metric, "_enable_grad", False) and fusable(op, value.dtype):
                    reduces.append((len(entries), value, op))
                    kind = "reduce"
                else:  # None, custom, "cat" of a tensor, autograd, int mean: torchmetrics' stack of gathered states
                    gathers.append(entry)
                    kind = "stack"
            elif isinstance(value, list) and fn is dim_zero_cat and all(isinstance(v, Tensor) for v in value):
                gathers.append(entry)
                kind = "cat"
            else:
                _announce_fallback(metric, attr, fn)
                fallbacks.setdefault(id(metric), (metric, []))[1].append(attr)
                member.append(_plan_entry(entry, f"torchmetrics:{type(value).__name__}"))
                continue
            member.append(_plan_entry(entry, kind))
            entries.append(entry)
        layout.append(tuple(member))
    return reduces, gathers, entries, fallbacks, layout


class _Plan:
    """A bucket plan without tensors or process group (a plan that held the group made gloo abort at exit)."""

    __slots__ = ("buckets", "carrier", "fingerprint", "leftovers", "member_hashes")

    def __init__(
        self, layout: list[tuple], items: list[tuple[int, Tensor, str]], gathered: int, group: Any, spare: Any
    ) -> None:
        buckets, leftovers = _plan_buckets(items, group, spare=spare)
        position = {token: index for index, (token, _, _) in enumerate(items)}
        #: per bucket: (device, dtype, op, ((item position, ride), ...)), in launch order
        self.buckets = [
            (b.device, b.dtype, b.op, tuple((position[seg.token], seg.ride) for seg in b.segments)) for b in buckets
        ]
        self.leftovers = [position[segment.token] for segment in leftovers]
        #: the index of the bucket the plan check rides in, if any
        self.carrier = carrier_index(buckets)
        self.member_hashes = [_fingerprint(member) for member in layout]
        flags = sum(segment.numel for segment in leftovers)
        # The whole plan: its members, and the sizes of its collectives.
        self.fingerprint = _fingerprint((tuple(self.member_hashes), bucket_layout(buckets), gathered, flags))

    def place(self, items: list[tuple[int, Tensor, str]]) -> tuple[list[_Bucket], list[_Segment]]:
        """The buckets (and leftover bool flags) of ``items``, which have the layout this plan was made for."""
        buckets = []
        for device, dtype, op, placed in self.buckets:
            bucket = _Bucket(device, dtype, op)
            for index, ride in placed:
                bucket.segments.append(_Segment(*items[index], ride))
            buckets.append(bucket)
        return buckets, [_Segment(*items[index]) for index in self.leftovers]


class _Prepared:
    """A recurring sync's buckets, kept with the state tensors they were packed from (see :class:`AgreedPlans`).

    While the metrics hold the very same tensors, the next sync packs them with one fused copy per (dtype, device)
    into the same buffers, and plans nothing. Only syncs without gathers or torchmetrics fallbacks are kept.
    """

    __slots__ = ("copies", "group", "metrics", "negated", "packed", "reductions")

    def __init__(self, metrics: list[Metric], group: Any, packed: _Packed) -> None:
        self.metrics = list(metrics)
        # Weakly: a group held here would outlive destroy_process_group(), and gloo's threads with it (exit aborts).
        self.group = weakref.ref(group)
        self.packed = packed
        self.reductions = [dict(metric._reductions) for metric in metrics]
        groups: dict[tuple, tuple[list[Tensor], list[Tensor]]] = {}
        self.negated: list[Tensor] = []
        for bucket in packed.buckets:
            for segment in bucket.segments:
                view = bucket.buffer[segment.offset : segment.offset + segment.numel].view(segment.shape)
                pair = groups.setdefault((bucket.dtype, segment.tensor.dtype, segment.device), ([], []))
                pair[0].append(view)
                pair[1].append(segment.tensor)
                if segment.ride == "negated":
                    self.negated.append(view)
            if bucket.tail is not None:
                pair = groups.setdefault((bucket.dtype, bucket.dtype, bucket.device), ([], []))
                pair[0].append(bucket.tail_view())
                pair[1].append(bucket.tail)
        self.copies = list(groups.values())

    def fits(self, metrics: list[Metric], group: Any, fingerprint: int) -> bool:
        """Whether ``metrics`` are the prepared ones, holding the very same state tensors, under the agreed plan."""
        if group is not self.group() or fingerprint != self.packed.plan.fingerprint:
            return False
        if len(metrics) != len(self.metrics):
            return False
        if any(a is not b for a, b in zip(metrics, self.metrics, strict=True)):
            return False
        if any(m._reductions != r for m, r in zip(metrics, self.reductions, strict=True)):
            return False
        return all(entry.metric.__dict__.get(entry.attr) is entry.value for entry in self.packed.entries)

    def repack(self) -> _Packed:
        """Copy the states into the buckets' buffers, as :meth:`_Bucket.pack` does (one copy per dtype pair)."""
        for targets, sources in self.copies:
            torch._foreach_copy_(targets, sources)
        if self.negated:
            torch._foreach_neg_(self.negated)
        for bucket in self.packed.buckets:
            if bucket.masks_nan:
                bucket.mask_nan()
        return self.packed


def _on_bucket_devices(buckets: list[_Bucket]) -> bool:
    """Whether every state lives on its bucket's device (a fused copy does not cross devices)."""
    return all(segment.device == bucket.device for bucket in buckets for segment in bucket.segments)


#: Bucket plans by layout and collective devices: a sync of the same metrics plans nothing again (oldest dropped first).
_PLANS: dict[tuple, _Plan] = {}
_MAX_PLANS = 64


def _cached_plan(
    layout: list[tuple], items: list[tuple[int, Tensor, str]], gathered: int, group: Any, spare: Any
) -> _Plan:
    """The plan of a sync whose members have ``layout`` (made once per layout and collective devices)."""
    devices: dict[torch.device, torch.device] = {}
    for _, tensor, _ in items:
        if tensor.device not in devices:
            devices[tensor.device] = collective_device(group, tensor.device)
    key = (tuple(layout), tuple(devices[tensor.device] for _, tensor, _ in items), spare)
    plan = _PLANS.get(key)
    if plan is None:
        if len(_PLANS) >= _MAX_PLANS:
            del _PLANS[next(iter(_PLANS))]
        plan = _PLANS[key] = _Plan(layout, items, gathered, group, spare)
    return plan


class _Packed(NamedTuple):
    """A sync's states, planned and packed into its buckets (and gather), ready to launch."""

    gathers: list[_Entry]
    entries: list[_Entry]
    fallbacks: dict[int, tuple[Metric, list[str]]]
    items: list[Tensor | _CatPieces]
    gather: _Gather | None
    gather_device: Any
    plan: _Plan
    buckets: list[_Bucket]
    labels: list[str]


def _pack(metrics: list[Metric], group: Any, labels: Mapping[int, str], carry: bool) -> _Packed:
    """Plan the fused sync of ``metrics`` (cached by layout) and pack their states as they are now.

    ``carry``: a sync that recurs (see AgreedPlans): the plan check's rows ride in the plan's carrier bucket, if any.
    """
    reduces, gathers, entries, fallbacks, layout = _plan_states(metrics)
    items = [_CatPieces(entry.value) if isinstance(entry.value, list) else entry.value for entry in gathers]
    gather_device = None
    if gathers:
        tensors = [t for item in items for t in (item.pieces if isinstance(item, _CatPieces) else [item])]
        gather_device = _gather_device(group, tensors, gathers[0].metric.device)
    plan = _cached_plan(layout, reduces, len(items), group, gather_device)
    buckets, flags = plan.place(reduces)
    if carry and plan.carrier is not None:  # the check's rows ride along (read only where the plan was agreed before)
        carrier = buckets[plan.carrier]
        row = _check_row(plan.fingerprint, plan.member_hashes)
        rank, world_size = dist.get_rank(group), dist.get_world_size(group)
        carrier.tail = encode_check(row, rank, world_size, carrier.dtype, carrier.device)
    for bucket in buckets:
        bucket.pack()  # the states as they are when the sync starts
    gather = _Gather(items, group, gather_device, flags) if gathers else None
    member_labels = [_label(metric, labels) for metric in metrics]
    return _Packed(gathers, entries, fallbacks, items, gather, gather_device, plan, buckets, member_labels)


def _start_state_sync(
    metrics: list[Metric],
    group: Any,
    async_op: bool,
    labels: Mapping[int, str],
    plans: AgreedPlans | None = None,
    position: int = 0,
    check_only: bool = False,
) -> SyncHandle:
    """Plan and pack a fused ``_sync_dist`` of ``metrics`` over ``group``, and launch its plan check.

    The plan follows only what every rank shares (never local data). The second phase verifies a new plan on the host,
    then launches (nothing, ``check_only``); the agreed plan of ``plans`` launches at once and is verified with the
    results (see AgreedPlans).
    """
    agreed = None if plans is None else plans.agreed.get(position)
    prepared = None if agreed is None or check_only else plans.prepared.get(position)
    if prepared is not None and prepared.fits(metrics, group, agreed[0]):
        packed = prepared.repack()  # the agreed plan again, over the same state tensors: nothing to plan
    else:
        packed = _pack(metrics, group, labels, plans is not None)
        if plans is not None and not packed.gathers and not packed.fallbacks and _on_bucket_devices(packed.buckets):
            plans.prepared[position] = _Prepared(metrics, group, packed)
    gathers, entries, fallbacks, items, gather, gather_device, plan, buckets, member_labels = packed
    read = check_only or agreed is None or agreed[0] != plan.fingerprint
    # A new plan next to an agreed one whose check rides in its buckets: read in those buckets (see AgreedPlans).
    mirror = read and agreed is not None and agreed[3] is not None
    tail = None if read or plan.carrier is None else buckets[plan.carrier].tail_view
    # where its own all_gather runs (a check that rides in buckets has none)
    device = None if mirror or tail is not None else collective_device(group, metrics[0].device)
    check = _PlanCheck(
        plan.fingerprint, plan.member_hashes, member_labels, group, device, read, tail, gather=not mirror
    )
    if not read:
        plans.unread.append(check)
    rank, world_size = dist.get_rank(group), dist.get_world_size(group)

    def launch() -> list[Any]:
        """The second phase: every collective whose size depends on the plan, once every rank's plan is known."""
        if read:
            _verify(check, agreed, group, mirror)
            if plans is not None and not fallbacks:  # torchmetrics' own gathers have no sizes to mirror
                sizes = [(b.device, b.dtype, b.op, b.numel) for b in buckets]
                words = None if gather is None else (gather_device, len(items), gather.meta_local.numel())
                plans.agreed[position] = (plan.fingerprint, sizes, words, plan.carrier)
        if check_only:
            return []
        works = [bucket.launch(group, async_op) for bucket in buckets]
        if gather is not None:
            works.append(gather.start(async_op))
            described = gather.shapes()  # a host read, with list states only
            works.append(gather.launch_data(described, async_op))
        for metric, attrs in fallbacks.values():  # blocking: torchmetrics' gathers, done by the time this returns
            _torchmetrics_sync_dist(metric, attrs, group)
        return works

    def finish() -> None:
        """Local: wait for the collectives issued, unpack, set the states."""
        check.wait()
        results: dict[int, Any] = {}
        if gather is not None:
            gathered = gather.data()
            for entry, per_rank, own in zip(gathers, gathered, gather.own, strict=True):
                results[id(entry)] = _combine_gathered(entry, per_rank, own, rank)
            for token, value in gather.reduced_flags().items():
                results[id(entries[token])] = value
        for bucket in buckets:
            for token, value in bucket.finish(world_size).items():
                results[id(entries[token])] = value
        for entry in entries:
            # A state is a plain attribute (torchmetrics' add_state): skip Module.__setattr__'s registry checks.
            entry.metric.__dict__[entry.attr] = results[id(entry)]

    return SyncHandle(finish, [check.work], launch)


def _verify(check: _PlanCheck, agreed: tuple | None, group: Any, mirror: bool) -> None:
    """Read a new plan's check (one host read); every rank raises :class:`PlanMismatchError` if the plans differ."""
    try:
        if mirror:  # what the ranks that kept the agreed plan launched, without data, and every rank's row
            check.check(decode_check(_run_without_data(agreed, group, check.row).tolist(), check.world_size))
        else:
            check.verify()
    except PlanMismatchError:
        if agreed is not None and not mirror:  # the other ranks may have launched the agreed plan at once
            _run_without_data(agreed, group, check.row)
        raise


def _run_without_data(
    agreed: tuple[int, list[tuple], tuple | None, int | None], group: Any, row: list[int]
) -> Tensor | None:
    """The agreed plan's collectives with zeros and no list elements: what the ranks that kept it launched.

    Returns the reduced tail (every rank's check row) where the check rides in those collectives, else None.
    """
    _, sizes, words, carrier = agreed
    works = []
    carried = None
    for index, (device, dtype, op, numel) in enumerate(sizes):
        bucket = _Bucket(device, dtype, op)
        bucket.segments.append(_Segment(None, torch.zeros(numel, dtype=dtype, device=device), op))
        if index == carrier:
            carried = bucket
            bucket.tail = encode_check(row, dist.get_rank(group), dist.get_world_size(group), dtype, device)
        works.append(bucket.launch(group, True))
    if words is not None:
        device, count, total = words
        # The flag words after the shape rows: a zero segment of their length (every rank's flags are read as unset).
        spare = [_Segment(None, torch.zeros(total - count * _ROW, dtype=torch.bool), "max")]
        gather = _Gather([_CatPieces([]) for _ in range(count)], group, device, spare)
        gather.start(False)
        works.append(gather.launch_data(gather.shapes(), True))
    for work in works:
        if work is not None:
            work.wait()
    return None if carried is None else carried.tail_view()


def _combine_gathered(entry: _Entry, per_rank: list[Tensor | None], own: Tensor | None, rank: int) -> Tensor:
    """What torchmetrics' ``_sync_dist`` makes of the gathered values of one state."""
    if isinstance(entry.value, list):  # "cat": every rank's elements in rank order; torchmetrics' dim_zero_cat
        device = entry.value[0].device if entry.value else entry.metric.device
        pieces = [_to(piece, device) for piece in per_rank if piece is not None]
        if own is not None:
            pieces[sum(piece is not None for piece in per_rank[:rank])] = own
        if not pieces:  # no rank had an element: torchmetrics concatenates its empty placeholders
            return torch.empty(0, dtype=entry.metric.dtype, device=device)
        return torch.cat(pieces)
    # A tensor state: torchmetrics stacks the gathered states (this rank's own tensor in its slot) and reduces.
    pieces = [_to(piece, entry.value.device) if piece is not None else piece for piece in per_rank]
    pieces[rank] = entry.value
    stacked = torch.stack(pieces)
    return entry.fn(stacked) if entry.fn is not None else stacked


def _torchmetrics_sync_dist(metric: Metric, attrs: list[str], group: Any) -> None:
    """Run torchmetrics' own ``_sync_dist`` on some states only (the rest are synced already)."""
    reductions = metric._reductions
    metric._reductions = {attr: reductions[attr] for attr in attrs}
    try:
        Metric._sync_dist(metric, gather_all_tensors, process_group=group)
    finally:
        metric._reductions = reductions


def _start_state_syncs(
    metrics: Iterable[Metric],
    process_group: Any,
    async_op: bool,
    labels: Mapping[int, str],
    plans: AgreedPlans | None = None,
    check_only: bool = False,
) -> list[SyncHandle]:
    """One fused sync per process group, in first-appearance order (the same on every rank)."""
    groups: dict[int, tuple[Any, list[Metric]]] = {}
    for metric in metrics:
        group = process_group or metric.process_group
        group = dist.group.WORLD if group is None else group
        groups.setdefault(id(group), (group, []))[1].append(metric)
    return [
        _start_state_sync(members, group, async_op, labels, plans, position, check_only)
        for position, (group, members) in enumerate(groups.values())
        if _member(group)  # outside the group there is nothing to exchange: the local states stand
    ]


def sync_states(metrics: Any, process_group: Any = None, async_op: bool = False) -> SyncHandle | None:
    """``Metric._sync_dist`` for one or many metrics, all states fused; ``async_op=True`` returns a :class:`SyncHandle`.

    Example:
        >>> from torchmetrics_async import SumMetric
        >>> metric = SumMetric()
        >>> metric.update(2.0)
        >>> sync_states(metric)  # not distributed: one rank, nothing to exchange
        >>> metric.sum_value
        tensor(2.)
    """
    labels: dict[int, str] = {}
    collected = list(_collect_metrics(metrics, labels).values())
    if not jit_distributed_available():
        return SyncHandle.completed(None) if async_op else None
    handle = _joined(_start_state_syncs(collected, process_group, async_op, labels))
    return handle if async_op else handle.wait()


def _joined(
    handles: list[SyncHandle], then: Callable[[], None] | None = None, communicate: Callable[[], None] | None = None
) -> SyncHandle:
    """One handle for several, in order; ``communicate()`` after every launch, ``then()`` after every finish."""

    def launch() -> list[Any]:
        issued = [len(handle._works) for handle in handles]
        for handle in handles:
            handle.launch_remaining()
        if communicate is not None:
            communicate()
        return [work for handle, count in zip(handles, issued, strict=True) for work in handle._works[count:]]

    def finish() -> None:
        for handle in handles:
            handle.wait()
        if then is not None:
            then()

    remaining = communicate is not None or any(handle._launch is not None for handle in handles)
    return SyncHandle(finish, [w for h in handles for w in h._works], launch if remaining else None)


def _start_metric_sync(
    metrics: list[Metric],
    process_group: Any,
    async_op: bool,
    labels: Mapping[int, str],
    plans: AgreedPlans | None = None,
) -> SyncHandle:
    """``Metric.sync()`` of every metric, fused: cache the local states, sync, mark synced."""
    for metric in metrics:
        if metric._is_synced:
            raise TorchMetricsUserError(ALREADY_SYNCED_MESSAGE)
    fused = [metric for metric in metrics if _fusable_metric(metric)]
    others = [metric for metric in metrics if not _fusable_metric(metric)]
    for metric in fused:
        # The local states themselves, not copies (a list state's list is copied): the sync writes into none of them.
        cached = {attr: metric.__dict__[attr] for attr in metric._defaults}
        # A plain attribute (torchmetrics' __init__ sets it): skip Module.__setattr__'s registry checks.
        metric.__dict__["_cache"] = {attr: list(v) if isinstance(v, list) else v for attr, v in cached.items()}
    handles = _start_state_syncs(fused, process_group, async_op, labels, plans)

    def sync_others() -> None:
        for metric in others:  # a user's dist_sync_fn or a custom _sync_dist: torchmetrics' own (blocking) sync
            metric.sync(process_group=process_group)

    def mark_synced() -> None:
        for metric in fused:
            metric._is_synced = True

    return _joined(handles, mark_synced, sync_others if others else None)


def sync_metrics(
    metrics: Any, process_group: Any = None, async_op: bool = False, *, plans: AgreedPlans | None = None
) -> SyncHandle | None:
    """``Metric.sync()`` for one or many metrics, with all their states in one fused round of collectives.

    A metric with its own ``dist_sync_fn`` or ``_sync_dist`` is synced by torchmetrics' ``sync()`` after the fused
    round. ``async_op=True`` returns a :class:`SyncHandle`: do not update the metrics before ``wait()``. ``plans``: for
    a sync that recurs with the same metrics, the plans agreed before; the agreed plan's check is not read, but left in
    ``plans.unread`` for the caller to read with the results and check (see :class:`AgreedPlans`).

    Example:
        >>> import torch
        >>> from torchmetrics_async import MeanMetric
        >>> metric = MeanMetric()
        >>> metric.update(torch.tensor([1.0, 3.0]))
        >>> sync_metrics([metric])  # not distributed: nothing to do, as for metric.sync()
        >>> metric._is_synced, metric.compute()
        (False, tensor(2.))
    """
    labels: dict[int, str] = {}
    collected = [metric for metric in _collect_metrics(metrics, labels).values() if _distributed(metric)]
    if not collected:
        return SyncHandle.completed(None) if async_op else None
    handle = _start_metric_sync(collected, process_group, async_op, labels, plans)
    return handle if async_op else handle.wait()


def agree_plans(metrics: Any, plans: AgreedPlans, process_group: Any = None) -> None:
    """Verify on every rank now (one host read) the plans of the fused syncs of ``metrics``, and keep them in ``plans``.

    Collective. Later ``sync_metrics(metrics, ..., plans=plans)`` with these plans launch without reading their check.

    Example:
        >>> from torchmetrics_async import SumMetric
        >>> plans = AgreedPlans()
        >>> agree_plans([SumMetric()], plans)  # not distributed: nothing to agree on
        >>> plans.agreed
        {}
    """
    labels: dict[int, str] = {}
    collected = [metric for metric in _collect_metrics(metrics, labels).values() if _distributed(metric)]
    fused = [metric for metric in collected if _fusable_metric(metric)]  # the members sync_metrics fuses
    for handle in _start_state_syncs(fused, process_group, True, labels, plans, check_only=True):
        handle.launch_remaining()
