"""The state arena: the all-reduced tensor states of many metrics as views into one flat buffer per group.

A group is every state of one (device, dtype, reduction): DDP's gradient buckets and FSDP's flat parameters do the
same for parameters. Copying a window out of the metrics is then one copy per group, resetting it one copy per group
(from a buffer of the defaults), and a fused sync reads each group as one contiguous piece instead of packing
states one by one. The layout is planned once and planned again only when a state was replaced (by ``.to()``, a
``load_state_dict``, ``unsync()``, a copy on write, a state whose shape changed): :meth:`StateArena.is_current`
checks every state's identity against its view, no other work.

Only states this package updates in place join (a :class:`~torchmetrics_async.metric.SyncFreeMixin` metric's tensor
states reduced by sum, mean, max or min, as the fused sync all-reduces them); list states, gathered states and
torchmetrics' own metrics keep their own path. Compute-group members may share a state tensor: a member whose state
is another member's view is an *alias*, copied on its own after the group copies (the sync plans one piece per
member: groups form from data, so they differ between ranks).

Example:
    >>> import torch
    >>> from torchmetrics_async import MeanMetric
    >>> metric = MeanMetric()
    >>> arena = StateArena([metric])
    >>> metric.update(torch.tensor([1.0, 3.0]))
    >>> metric.mean_value.untyped_storage().data_ptr() == metric.weight.untyped_storage().data_ptr()
    True
    >>> arena.is_current(), arena.plans
    (True, 1)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from torchmetrics_async.deferred import mark_static_address

__all__ = ["ARENA", "StateArena", "compact_state"]

#: Instance attribute of a metric whose states are arena views: the arena (dropped when pickled or deep-copied).
ARENA = "_state_arena"
#: Instance attribute set by :meth:`StateArena.reset`: the states it reset in place, which ``reset()`` then skips.
ARENA_RESET = "_state_arena_reset"
_OWNED_STATES = "_owned_states"  # torchmetrics_async.metric.OWNED_STATES (metric.py imports this package: no import)


def compact_state(value: Any) -> Any:
    """``value``, or a copy of it if it is a view into a larger storage (an arena view): what pickling should see.

    Args:
        value: a state (a tensor, or anything else, returned as is).

    Returns:
        A tensor that owns exactly its elements, or ``value``.

    Example:
        >>> import torch
        >>> flat = torch.zeros(100)
        >>> compact_state(flat[:2]).untyped_storage().nbytes(), compact_state(flat) is flat
        (8, True)
    """
    if isinstance(value, Tensor) and value.untyped_storage().nbytes() > value.numel() * value.element_size():
        return value.detach().clone()
    return value


def arena_op(metric: Any, attr: str) -> str | None:
    """The reduction under which ``metric``'s state ``attr`` joins an arena, or ``None`` if it keeps its own path.

    Args:
        metric: a metric.
        attr: one of its states.

    Returns:
        ``"sum"``, ``"mean"``, ``"max"``, ``"min"`` or ``None``.

    Example:
        >>> from torchmetrics_async import CatMetric, SumMetric
        >>> arena_op(SumMetric(), "sum_value"), arena_op(CatMetric(), "value")
        ('sum', None)
    """
    # metric.py imports this module and distributed/ imports metric.py: look the reductions up at call time
    from torchmetrics_async.reductions import STATE_OPS as _STATE_OPS
    from torchmetrics_async.reductions import fusable as _fusable

    state = metric.__dict__
    value = state.get(attr)
    op = _STATE_OPS.get(metric._reductions.get(attr))
    if (
        _OWNED_STATES not in state  # a torchmetrics metric may replace its states in any update: not in place
        or not isinstance(value, Tensor)
        or op is None
        or state.get("_enable_grad", False)
        or value.is_meta
        or not _fusable(op, value.dtype)
    ):
        return None
    return op


class _Slot:
    """One (metric, state): its place in a group buffer, its view, and the slot it aliases (a compute group)."""

    __slots__ = ("alias", "attr", "group", "metric", "numel", "op", "shape", "start", "view")

    def __init__(self, metric: Any, attr: str, op: str, value: Tensor) -> None:
        self.metric = metric
        self.attr = attr
        self.op = op
        self.shape = value.shape
        self.numel = value.numel()
        self.group: _Group | None = None
        self.start = 0
        self.view: Tensor | None = None
        self.alias: _Slot | None = None  # the slot whose view this member holds now (a compute-group follower)


class _Group:
    """One flat buffer: every state of one (device, dtype, reduction), in plan order, and their defaults."""

    __slots__ = ("buffer", "defaults", "device", "dtype", "op", "slots")

    def __init__(self, device: torch.device, dtype: torch.dtype, op: str) -> None:
        self.device, self.dtype, self.op = device, dtype, op  # the key
        self.slots: list[_Slot] = []
        self.buffer: Tensor | None = None
        self.defaults: Tensor | None = None  # None: some default does not fit its slot (reset() replaces it)


class StateArena:
    """The arena states of ``metrics`` as views into one flat buffer per (device, dtype, reduction).

    Planning copies each state's current value into its group buffer and gives the metric the view instead (owned,
    so its updates write into the buffer in place). Everything else about the metric is unchanged.

    Args:
        metrics: the metrics (those without arena states are ignored).
        like: another arena whose layout to take (same classes and states, e.g. a deep copy of its metrics): this
            one then has its own buffers of the same shape, so :meth:`copy_from` is one copy per group.

    Example:
        >>> import torch
        >>> from torchmetrics_async import SumMetric
        >>> metrics = [SumMetric(), SumMetric()]
        >>> arena = StateArena(metrics)
        >>> [(str(g.dtype), g.op, g.buffer.numel()) for g in arena.groups]
        [('torch.float32', 'sum', 2), ('torch.bool', 'max', 2)]
    """

    def __init__(self, metrics: Sequence[Any], like: StateArena | None = None) -> None:
        self.metrics = list(metrics)
        #: how many times the layout was planned (1 after construction)
        self.plans = 0
        self.groups: list[_Group] = []
        self.slots: list[_Slot] = []
        self._by_view: dict[int, _Slot] = {}
        self._aliased: list[_Slot] = []
        self.plan(like)

    # --------------------------------------------------------------------------------------------------------------

    @property
    def signature(self) -> tuple:
        """What two arenas must share for a group-by-group copy: every group's key and slots' shapes, in order."""
        return tuple((g.device, g.dtype, g.op, tuple((s.attr, tuple(s.shape)) for s in g.slots)) for g in self.groups)

    def plan(self, like: StateArena | None = None) -> None:
        """(Re)build the layout from the states the metrics hold now and make those states views."""
        self.plans += 1
        groups: dict[tuple, _Group] = {}
        self.slots = []
        self._aliased = []
        first_holder: dict[int, _Slot] = {}
        for metric in self.metrics:
            metric.__dict__.pop(ARENA, None)
        if like is not None:
            for source in like.groups:
                group = groups[(source.device, source.dtype, source.op)] = _Group(
                    source.device, source.dtype, source.op
                )
                index = {id(m): i for i, m in enumerate(like.metrics)}
                for slot in source.slots:
                    mine = self.metrics[index[id(slot.metric)]]
                    value = mine.__dict__[slot.attr]
                    if not isinstance(value, Tensor) or value.shape != slot.shape:
                        value = torch.zeros(slot.shape, dtype=source.dtype, device=source.device)
                    new = _Slot(mine, slot.attr, slot.op, value)
                    new.group = group
                    group.slots.append(new)
                    self.slots.append(new)
        else:
            for metric in self.metrics:
                for attr in metric._defaults:
                    op = arena_op(metric, attr)
                    if op is None:
                        continue
                    value = metric.__dict__[attr]
                    slot = _Slot(metric, attr, op, value)
                    holder = first_holder.get(id(value))
                    if holder is not None:  # a compute-group follower holding another member's state
                        slot.alias = holder
                    else:
                        first_holder[id(value)] = slot
                    key = (value.device, value.dtype, op)
                    group = groups.get(key)
                    if group is None:
                        group = groups[key] = _Group(*key)
                    slot.group = group
                    group.slots.append(slot)
                    self.slots.append(slot)
        self.groups = list(groups.values())
        self.slots = [slot for group in self.groups for slot in group.slots]  # group by group: as in a `like` arena
        for group in self.groups:
            self._allocate(group)
        self._by_view = {id(slot.view): slot for slot in self.slots}
        for slot in self.slots:
            state = slot.metric.__dict__
            state[ARENA] = self
            held = slot.alias.view if slot.alias is not None else slot.view
            if slot.alias is not None:
                self._aliased.append(slot)
            else:
                state[_OWNED_STATES][slot.attr] = slot.view
            state[slot.attr] = held

    def _allocate(self, group: _Group) -> None:
        offset = 0
        for slot in group.slots:
            slot.start = offset
            offset += slot.numel
        buffer = torch.empty(offset, dtype=group.dtype, device=group.device)
        defaults = torch.empty_like(buffer)
        fits = True
        for slot in group.slots:
            piece = buffer[slot.start : slot.start + slot.numel]
            value = slot.metric.__dict__[slot.attr]
            if isinstance(value, Tensor) and value.shape == slot.shape:
                piece.copy_(value.detach().reshape(-1))
            else:
                piece.zero_()
            default = slot.metric._defaults.get(slot.attr)
            if isinstance(default, Tensor) and default.shape == slot.shape:
                defaults[slot.start : slot.start + slot.numel].copy_(default.reshape(-1))
            else:
                fits = False
            slot.view = mark_static_address(piece.view(slot.shape))
        group.buffer = buffer
        group.defaults = defaults if fits else None

    # --------------------------------------------------------------------------------------------------------------

    def is_current(self) -> bool:
        """Whether every state is still its view (or another slot's view: a compute-group follower). No device work.

        Returns:
            ``False`` if a state was replaced: :meth:`ensure` plans again.
        """
        by_view = self._by_view
        aliased = []
        for slot in self.slots:
            held = slot.metric.__dict__.get(slot.attr)
            if held is slot.view:
                continue
            other = by_view.get(id(held))
            if (
                other is None
                or other.view is not held
                or other.shape != slot.shape
                or other.group.dtype != slot.group.dtype
            ):
                return False
            aliased.append(slot)
            slot.alias = other
        for slot in self._aliased:
            if slot not in aliased:
                slot.alias = None
        self._aliased = aliased
        return True

    @property
    def aliased(self) -> bool:
        """Whether some state is another slot's view (as of the last :meth:`is_current`): a compute-group follower."""
        return bool(self._aliased)

    def ensure(self) -> bool:
        """Plan again if a state was replaced.

        Returns:
            Whether it planned again.
        """
        if self.is_current():
            return False
        self.plan()
        return True

    def copy_from(self, source: StateArena) -> None:
        """Copy ``source``'s values into this arena: one copy per group, then one per aliased state of ``source``.

        Args:
            source: an arena with the same :attr:`signature`.
        """
        for mine, theirs in zip(self.groups, source.groups, strict=True):
            mine.buffer.copy_(theirs.buffer)
        for slot in source._aliased:  # the member's own slot is stale: it reads (shares) another member's state
            index = source.slots.index(slot)
            self.slots[index].view.copy_(slot.alias.view)

    def reset(self) -> None:
        """Every state back to its default: one copy per group; ``reset()`` of the metrics then skips those states."""
        skipped: dict[int, set[str]] = {}
        for group in self.groups:
            if group.defaults is None:
                continue
            group.buffer.copy_(group.defaults)
            for slot in group.slots:
                skipped.setdefault(id(slot.metric), set()).add(slot.attr)
        for metric in self.metrics:
            done = skipped.get(id(metric))
            if done:
                metric.__dict__[ARENA_RESET] = frozenset(done)

    def clear_reset_marks(self) -> None:
        """Forget what :meth:`reset` marked for metrics whose ``reset()`` did not run (a member before it raised)."""
        for metric in self.metrics:
            metric.__dict__.pop(ARENA_RESET, None)

    def release(self) -> None:
        """Stop managing the metrics: their states stay as they are (views), ``reset()`` replaces them again.

        A metric another arena has planned since (a collector bound to a collection's members) stays with that one.
        """
        for metric in self.metrics:
            state = metric.__dict__
            if state.get(ARENA, self) is self:
                state.pop(ARENA, None)
                state.pop(ARENA_RESET, None)
