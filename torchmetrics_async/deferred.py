"""Deferred checks: value errors recorded on the device in ``update``, raised later, never dropped.

torchmetrics validates values inside ``update`` (``if nans.any()``, ``torch.unique`` of the labels), which makes the
host wait for the device at every step. A sync-free metric records the violation instead, in a bool metric state
(reduced with ``max``, so it is synced, merged and checkpointed with the metric), and reports it later:

- ``compute()`` raises (or warns) with torchmetrics' message: one host read for all of a metric's flags, which also
  carries the flags of its unread siblings (other live metrics on that device, updated since their last read, that do
  not sync in ``compute()``): their next ``compute()`` reports from it unless their flags were written since;
- ``forward()`` returns NaN as the batch value of a batch that violated a check (no host read);
- ``reset()`` raises what ``compute()`` has not reported since the flags were last written (one host read per reset),
  so a window that is only logged per step (``forward`` then ``reset``) cannot lose an error. The flags are written by
  an update, and by every door through which states arrive (``merge_state``, ``load_state_dict``): a door counts as an
  update here (see :func:`mark_unreported`), so what arrives is raised like what was recorded locally;
- the message names the first offending update of the window: its index is recorded on the device, beside the flag,
  as a plain attribute (not a metric state: it is this process's own count and is neither synced nor saved).

Example:
    >>> import torch
    >>> from torchmetrics import Metric
    >>> class PositiveSum(DeferredChecks, Metric):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.add_state("total", torch.tensor(0.0), dist_reduce_fx="sum")
    ...         self._add_deferred_check("invalid_value", "Expected only positive values.")
    ...     def update(self, x):
    ...         self._record_violation("invalid_value", x <= 0)  # no host sync: recorded on the device
    ...         self.total += x.sum()
    ...     def compute(self):
    ...         self._raise_deferred_checks()
    ...         return self.total
    >>> metric = PositiveSum()
    >>> metric.update(torch.tensor([1.0]))
    >>> metric.update(torch.tensor([1.0, -1.0]))
    >>> metric.compute()
    Traceback (most recent call last):
    ...
    RuntimeError: Expected only positive values. (torchmetrics-async: first recorded in update 2 of this window)
"""

import weakref
from typing import Any

import torch
from torch import Tensor

from torchmetrics_async._torchmetrics import rank_zero_warn

__all__ = [
    "COMPILED_UPDATES",
    "DEFERRED_RAISE_OWNED",
    "FORWARD_INDEX",
    "UNREPORTED",
    "DeferredChecks",
    "decode_violation",
    "deferred_message",
    "first_violations",
    "forget_preread",
    "mark_static_address",
    "mark_unreported",
    "nan_where",
    "read_deferred_together",
    "report_deferred",
    "violation_code",
]

#: Instance attribute (in the metric's ``__dict__``): when true, ``compute()`` leaves the deferred flags unread and
#: whoever set it reads the flag states and raises or warns itself. ``AsyncMetricCollector`` sets it on the copy it
#: computes off the critical path; the generic ``forward`` sets it while it computes the batch value.
DEFERRED_RAISE_OWNED = "_deferred_raise_owned"

# Instance attributes (in ``__dict__``).
_CHECKS = "_check_messages"  # check state name -> (message, "error" | "warn"), in registration order
_FIRST = "_first_violation"  # check state name -> 0-dim int64: _INDEX_BASE - index of its first offending update
#: Instance attribute: the flags may have been written (an update, a merge, a load) since they were last read or handed
#: over: ``reset()`` reads them then. A constant store (also in compiled code: no guard, no host read).
UNREPORTED = "_deferred_unreported"
_WARNED = "_nan_warned"  # a "warn" check has warned in this window
#: While ``forward`` computes a batch value the torchmetrics way (reset, update, compute, merge), the index the
#: batch's update has in the window (``None`` otherwise).
FORWARD_INDEX = "_forward_index"

#: Instance attribute: a 0-dim int64 device tensor counting the updates made inside ``torch.compile``d code since
#: the window's count was last read (see :class:`~torchmetrics_async.metric.SyncFreeMixin`). Compiled code counts
#: there, in place, instead of in the Python int ``_update_count``, which Dynamo would guard on (a recompile per step).
COMPILED_UPDATES = "_compiled_updates"
# Instance attribute beside it: compiled code stores True in it (a constant store: no guard, no host read).
_COMPILED_DIRTY = "_compiled_dirty"  # COMPILED_UPDATES changed since it was last read on the host
_COMPILED_SEEN = "_compiled_seen"  # COMPILED_UPDATES as last read on the host (an int)
# Instance attribute: this metric's flag codes, read already by read_deferred_together(), with the stamp of the
# states they were read from (see _stamp); the next read takes them if the stamp still holds.
_PREREAD = "_deferred_preread"

# Every live metric with deferred checks: a metric reading its flags reads those of its unread siblings on the same
# device in the same host read (see DeferredChecks._read_deferred).
_LIVE: "weakref.WeakSet[DeferredChecks]" = weakref.WeakSet()

# The first offending update is kept as _INDEX_BASE - index, so ``maximum`` keeps the earliest and 0 means none.
_INDEX_BASE = 1 << 62


class DeferredChecks:
    """Mixin for a ``Metric``: value checks recorded on the device and reported by ``compute``/``reset``.

    Example:
        >>> from torchmetrics_async import MeanMetric
        >>> isinstance(MeanMetric(), DeferredChecks)
        True
    """

    #: The instance attribute counting this window's updates (a wrapper may count them under another name).
    _window_counter = "_update_count"

    def _add_deferred_check(self, name: str, message: str, action: str = "error") -> None:
        """Register a check (idempotent): a bool state ``name`` and what reporting it does (raise or warn)."""
        state = self.__dict__
        state.setdefault(_CHECKS, {})[name] = (message, action)
        state.setdefault(_FIRST, {})[name] = mark_static_address(torch.zeros((), dtype=torch.int64, device=self.device))
        state.setdefault(UNREPORTED, False)
        state.setdefault(_WARNED, False)
        state.setdefault(FORWARD_INDEX, None)
        _LIVE.add(self)
        if name not in self._defaults:
            self.add_state(name, default=torch.zeros((), dtype=torch.bool, device=self.device), dist_reduce_fx="max")

    def _deferred_checks_registered(self) -> dict[str, tuple[str, str]]:
        """Check state name -> ``(message, action)``, in the order ``compute()`` reports them."""
        return self.__dict__.get(_CHECKS, {})

    def _record_violation(self, name: str, violated: Tensor | bool) -> None:
        """OR a violation (a mask of any shape, or a host-known bool) into check ``name`` without reading it.

        The window's first offending update is written beside the flag, before the flag (it reads the flag as it was).
        """
        state = self.__dict__
        index = state[FORWARD_INDEX]
        if index is None:  # (not ``or``: inside compiled code the forward's index is a device tensor)
            index = self._update_index()
        if isinstance(violated, bool):
            if violated:
                getattr(self, name).fill_(True)
                first = state[_FIRST][name]
                if isinstance(index, Tensor):
                    torch.maximum(first, _INDEX_BASE - index, out=first)
                else:
                    first.clamp_(min=_INDEX_BASE - index)
            return
        if not violated.numel():
            return
        if violated.dim():
            violated = violated.any()
        flag, first = getattr(self, name), state[_FIRST][name]
        if state[FORWARD_INDEX] is None:
            # The index is written only while the flag is still clean: it stays the window's first (two ops).
            first.masked_fill_(torch.gt(violated, flag), _INDEX_BASE - index)
        else:
            # forward() computes a batch the torchmetrics way, on reset states: keep the earliest of both.
            torch.maximum(first, violated * (_INDEX_BASE - index), out=first)
        flag.logical_or_(violated)

    def _add_with_violations(self, states: list[Tensor], values: list[Tensor], violations: dict[str, Tensor]) -> None:
        """``state.add_(value)`` for every pair, in one ``torch._foreach_add_``, then the violations recorded.

        On CUDA a ``_foreach_add_`` whose tensors share dtype, device and shapes (the stat-score states and their
        batch counts) is one fused multi-tensor kernel instead of one launch per state. The flags are ORed in
        separately: bool flags in the same list would send CUDA's ``_foreach_add_`` down its per-tensor fallback
        (as many launches as tensors), saving a dispatcher call on the host but no launch on the GPU.

        Args:
            states: tensor states, written in place (owned by this metric).
            values: tensors to add (same devices; dtypes and shapes as ``add_`` accepts them); a Python number is
                added by the caller (``add_`` takes it as a kernel argument; ``_foreach_add_`` takes no mixed list).
            violations: check name -> violation mask (any shape) or host-known bool.
        """
        if len(states) == 1:  # one pair: a plain add_ costs less host time than the list op
            states[0].add_(values[0])
        elif states:
            torch._foreach_add_(states, values)
        for name, violated in violations.items():
            self._record_violation(name, violated)

    def _update_index(self) -> "int | Tensor":
        """The index of the current update in the window: a Python int, or a device tensor once compiled code counted.

        Compiled updates are counted on the device (:data:`COMPILED_UPDATES`): the index is then ``host count +
        compiled count`` as a 0-dim tensor, without a host read (and without Dynamo guarding on a changing int).
        """
        state = self.__dict__
        count = state[self._window_counter]
        counter = state.get(COMPILED_UPDATES)
        if counter is None:
            return count
        if torch.compiler.is_compiling() or state.get(_COMPILED_DIRTY) or state.get(_COMPILED_SEEN):
            return counter + count
        return count

    def _known_window_count(self) -> int:
        """The window's update count as far as the host knows it without a read: host count + last read compiled."""
        state = self.__dict__
        return state[self._window_counter] + state.get(_COMPILED_SEEN, 0)

    def _fold_compiled_count(self, seen: int) -> None:
        """Record ``seen``, a host read of :data:`COMPILED_UPDATES`."""
        state = self.__dict__
        state[_COMPILED_SEEN] = seen
        state[_COMPILED_DIRTY] = False

    def _deferred_violated(self) -> Tensor | None:
        """Whether any check is set, as a 0-dim bool tensor on the device (no host read); ``None`` without checks."""
        names = list(self._deferred_checks_registered())
        if not names:
            return None
        flags = [getattr(self, name) for name in names]
        return flags[0] if len(flags) == 1 else torch.stack(flags).any()

    def _raise_deferred_checks(self) -> None:
        """Report the violated checks with their messages: one host read for all flags.

        An ``"error"`` check raises ``RuntimeError`` (the first in registration order); a ``"warn"`` check warns once
        per window. Skipped when ``DEFERRED_RAISE_OWNED`` is set.
        """
        state = self.__dict__
        if not self._deferred_checks_registered() or state.get(DEFERRED_RAISE_OWNED, False):
            return
        report_deferred(self, self._read_deferred())

    def _report_unreported_checks(self) -> Any:
        """Read the flags if written since they were last reported; return the report to make after a reset.

        Called by ``reset()`` before the states are cleared (the flags die with them).
        """
        state = self.__dict__
        checks = self._deferred_checks_registered()
        if (
            not checks
            or state.get(DEFERRED_RAISE_OWNED, False)
            or not state.get(UNREPORTED, False)
            or getattr(self, next(iter(checks))).is_meta  # meta states hold no values to report
        ):
            return None
        return self._read_deferred()

    def _read_deferred(self) -> list[tuple[str, str, str, bool, int]]:
        """Every check as ``(name, message, action, violated, first_code)``: one host read; marks them reported."""
        state = self.__dict__
        checks = self._deferred_checks_registered()
        dirty = state.get(_COMPILED_DIRTY, False)
        codes = _take_preread(self)
        if codes is None and not dirty:  # one read for this metric's flags and its unread siblings'
            read_deferred_together([self, *_unread_siblings(self)])
            codes = state.pop(_PREREAD, (None, None))[1]  # just read: no stamp to check
        if codes is None:
            codes = torch.stack(self._deferred_codes()).tolist()
            if dirty:
                self._fold_compiled_count(codes.pop())
        elif dirty:  # that read carried the checks only: after compiled updates the count takes a read of its own
            self._fold_compiled_count(int(state[COMPILED_UPDATES]))
        state[UNREPORTED] = False
        return [
            (name, message, action, *decode_violation(code))
            for (name, (message, action)), code in zip(checks.items(), codes, strict=True)
        ]

    def _deferred_codes(self) -> list[Tensor]:
        """The 0-dim int64 codes one flag read reads: one per check, then the compiled count when it changed."""
        state = self.__dict__
        firsts = state[_FIRST]
        codes = [violation_code(getattr(self, name), firsts[name]) for name in self._deferred_checks_registered()]
        if state.get(_COMPILED_DIRTY, False):  # the compiled updates' count travels in the same read
            codes.append(state[COMPILED_UPDATES].to(torch.int64))
        return codes

    def _reset_deferred(self, in_place: bool = False) -> None:
        """Clear the per-window bookkeeping beside the flag states (which ``reset`` restores from their defaults).

        The first-violation indices are replaced (a collector may hold the old ones), or zeroed ``in_place`` where
        nobody else can.
        """
        state = self.__dict__
        firsts = state.get(_FIRST)
        if firsts:
            for name, first in firsts.items():
                if in_place:
                    first.zero_()
                else:
                    firsts[name] = mark_static_address(torch.zeros_like(first))
        state[UNREPORTED] = False
        state[_WARNED] = False

    def _hand_over_deferred(self, taker: "DeferredChecks") -> None:
        """Give this window's first-violation indices to ``taker`` (a collector's copy, which reports the flags).

        ``reset`` then does not report them: the taker does.
        """
        state = self.__dict__
        taker.__dict__[_FIRST] = dict(state.get(_FIRST, {}))
        state[UNREPORTED] = False

    def _move_deferred(self, device: torch.device) -> None:
        firsts = self.__dict__.get(_FIRST)
        if firsts:
            for name, first in firsts.items():
                firsts[name] = mark_static_address(first.to(device))


def read_deferred_together(metrics: Any) -> list[Any]:
    """Read the deferred flags of many metrics in one host read (per device); each metric's next flag read uses it.

    A collection's ``compute()`` calls this once, after its sync and before its members compute: each member's
    ``compute()`` then reports from the values read here instead of reading its own flags. Nothing is marked
    reported here, so a member whose ``compute()`` does not run keeps its flags for ``reset()``; call
    :func:`forget_preread` on the returned metrics afterwards.

    Args:
        metrics: the metrics (any; those without deferred checks, with the collector's ownership flag, or on the
            ``meta`` device are skipped).

    Returns:
        The metrics that received read values.

    Example:
        >>> import torch
        >>> from torchmetrics_async import MeanMetric
        >>> metrics = [MeanMetric(nan_strategy="error"), MeanMetric(nan_strategy="error")]
        >>> metrics[1].update(torch.tensor(float("nan")))
        >>> read = read_deferred_together(metrics)  # one read for both
        >>> metrics[0].compute()
        tensor(nan)
        >>> try:
        ...     metrics[1].compute()
        ... except RuntimeError as err:
        ...     print(str(err)[:34])
        Encountered `nan` values in tensor
    """
    taken: dict[torch.device, list[tuple[Any, list[Tensor]]]] = {}
    for metric in metrics:
        if not isinstance(metric, DeferredChecks) or not metric._deferred_checks_registered():
            continue
        state = metric.__dict__
        if state.get(DEFERRED_RAISE_OWNED, False):
            continue
        # The checks' codes only: whether compiled updates still need counting can change before the member reads.
        codes = metric._deferred_codes()[: len(metric._deferred_checks_registered())]
        if codes[0].is_meta:  # no values to read
            continue
        taken.setdefault(codes[0].device, []).append((metric, codes))
    out = []
    for members in taken.values():
        flat = torch.stack([code for _, codes in members for code in codes]).tolist()  # the one read
        offset = 0
        for metric, codes in members:
            read = flat[offset : offset + len(codes)]
            offset += len(codes)
            metric.__dict__[_PREREAD] = (_stamp(metric), read)
            out.append(metric)
    return out


def _stamp(metric: Any) -> tuple:
    """What a flag read depends on: the flag and first-index tensors (identity and in-place version), the count.

    Any later write into them (an update, a merge, a sync, a load), a replacement or a reset changes it.
    """
    state = metric.__dict__
    firsts = state[_FIRST]
    tensors = [t for name in metric._deferred_checks_registered() for t in (getattr(metric, name), firsts[name])]
    return (
        tuple(tensors),
        tuple(None if t.is_inference() else t._version for t in tensors),  # inference tensors keep no version
        metric._known_window_count(),
        state.get(UNREPORTED, False),
        state.get(_COMPILED_DIRTY, False),
    )


def _take_preread(metric: Any) -> list[int] | None:
    """The flag codes read together with other metrics', if nothing they were read from has changed since."""
    preread = metric.__dict__.pop(_PREREAD, None)
    if preread is None:
        return None
    stamp, codes = preread
    current = _stamp(metric)
    same = len(stamp[0]) == len(current[0]) and all(a is b for a, b in zip(stamp[0], current[0], strict=True))
    return list(codes) if same and None not in current[1] and stamp[1:] == current[1:] else None


def _unread_siblings(metric: Any) -> list[Any]:
    """Live metrics whose flags the same host read can carry: updated since last read, same device, not synced.

    A metric that may sync in ``compute()`` (``distributed_available_fn()``) is left out, and so is every sibling of
    such a metric: its flags must be read after its sync. So are a collector's copies (they report themselves).
    """
    if _may_sync(metric):
        return []
    device = getattr(metric, next(iter(metric._deferred_checks_registered()))).device
    siblings = []
    for other in tuple(_LIVE):
        state = other.__dict__
        checks = other._deferred_checks_registered()
        if other is metric or not checks or state.get(DEFERRED_RAISE_OWNED, False):
            continue
        flag = getattr(other, next(iter(checks)), None)
        if not isinstance(flag, Tensor) or flag.device != device or flag.is_inference() or _may_sync(other):
            continue
        if state.get(UNREPORTED, False):
            siblings.append(other)
    return siblings


def _may_sync(metric: Any) -> bool:
    available = getattr(metric, "distributed_available_fn", None)
    return not callable(available) or bool(available())


def mark_unreported(metric: Any) -> None:
    """Record that ``metric``'s states changed as an update changes them: cached result dropped, flags to report.

    Every door through which states arrive (``merge_state``, ``load_state_dict``, a checkpoint) calls it, so a flag
    that arrives is raised by the next ``compute()`` (which computes again instead of returning a cached value) or, if
    none runs, by ``reset()``, exactly like a flag recorded by a local update. The update count is left alone:
    torchmetrics' "compute called before update" warning depends on it, and a door does not count as an update there.

    Args:
        metric: any ``Metric`` (the flag attribute only matters for one with deferred checks).

    Example:
        >>> import torch
        >>> from torchmetrics_async import MeanMetric
        >>> metric = MeanMetric(nan_strategy="error")
        >>> metric.nan_seen = torch.tensor(True)  # a flag set from outside: nothing says it is there
        >>> mark_unreported(metric)
        >>> try:
        ...     metric.reset()
        ... except RuntimeError as err:
        ...     print(str(err)[:34])
        Encountered `nan` values in tensor
    """
    state = metric.__dict__
    state["_computed"] = None
    state[UNREPORTED] = True


def forget_preread(metrics: Any) -> None:
    """Drop flag values read by :func:`read_deferred_together` that no ``compute()`` used (they may go stale).

    Args:
        metrics: the metrics.

    Example:
        >>> from torchmetrics_async import MeanMetric
        >>> forget_preread([MeanMetric()])
    """
    for metric in metrics:
        metric.__dict__.pop(_PREREAD, None)


def mark_static_address(tensor: Tensor) -> Tensor:
    """Mark a state tensor as ``torch._dynamo.mark_static_address(tensor, guard=False)`` does, without importing Dynamo.

    Compiled code then treats its address as stable (no guard on it): ``mode="reduce-overhead"`` captures in-place
    updates of it in a CUDA graph instead of skipping the graph for a mutated input. A tensor replaced later (a reset)
    makes the CUDA graph re-record, never recompile.

    Args:
        tensor: a state tensor this metric owns and updates in place.

    Returns:
        The tensor.

    Example:
        >>> import torch
        >>> mark_static_address(torch.zeros(2))._dynamo_static_input_type
        'unguarded'
    """
    tensor._dynamo_static_input_type = "unguarded"  # type: ignore[attr-defined]
    return tensor


def violation_code(flag: Tensor, first: Tensor) -> Tensor:
    """One int64 for a check: 0 when clean, else its first-violation code (1 when set by another process or merge).

    Args:
        flag: the check's bool state.
        first: its first-violation code (see :func:`first_violations`).

    Returns:
        A 0-dim int64 tensor on the device (no host read); :func:`decode_violation` reads it.

    Example:
        >>> import torch
        >>> violation_code(torch.tensor(True), torch.tensor(0))
        tensor(1)
    """
    return torch.where(flag, first.clamp(min=1), 0)


def decode_violation(code: int) -> tuple[bool, int]:
    """``(violated, first_code)`` from a read :func:`violation_code`.

    Args:
        code: the value read on the host.

    Returns:
        Whether the check was violated, and the first-violation code (0 when not recorded by this process).

    Example:
        >>> decode_violation(0), decode_violation(1)
        ((False, 0), (True, 0))
    """
    return code != 0, (code if code > 1 else 0)


def first_violations(metric: Any) -> dict[str, Tensor]:
    """Check state name -> the device tensor coding its first offending update (see :func:`deferred_message`).

    Args:
        metric: a metric with deferred checks.

    Returns:
        The mapping (empty for a metric without checks).

    Example:
        >>> from torchmetrics_async import MeanMetric
        >>> list(first_violations(MeanMetric(nan_strategy="error")))
        ['nan_seen']
    """
    return metric.__dict__.get(_FIRST, {})


def report_deferred(metric: Any, flags: list[tuple[str, str, str, bool, int]]) -> None:
    """Raise or warn for read flags ``(name, message, action, violated, first_code)``, as ``compute()`` reports them.

    Args:
        metric: the metric the flags belong to (its ``_nan_warned`` attribute makes a warning once per window).
        flags: the flags, read on the host, in reporting order.

    Raises:
        RuntimeError: for the first violated ``"error"`` check.

    Example:
        >>> report_deferred(object(), [("invalid", "Bad.", "error", False, 0)])  # nothing violated: nothing happens
    """
    for _name, message, action, violated, code in flags:
        if not violated:
            continue
        text = deferred_message(message, code)
        if action == "error":
            raise RuntimeError(text)
        state = getattr(metric, "__dict__", {})
        if not state.get(_WARNED, False):
            rank_zero_warn(text, UserWarning)
            state[_WARNED] = True


def deferred_message(message: str, code: int) -> str:
    """Torchmetrics' message, followed by where the first offending update was recorded.

    Args:
        message: torchmetrics' message for the check.
        code: the recorded first-violation code (0: not recorded by this process).

    Returns:
        The message.

    Example:
        >>> deferred_message("Encountered `nan` values in tensor", (1 << 62) - 3)
        'Encountered `nan` values in tensor (torchmetrics-async: first recorded in update 3 of this window)'
    """
    if code:
        where = f"first recorded in update {_INDEX_BASE - code} of this window"
    else:
        where = "recorded in another process's or a merged state of this window"
    return f"{message} (torchmetrics-async: {where})"


def nan_where(violated: Tensor | None, value: Any) -> Any:
    """``value`` with every floating-point tensor in it replaced by NaN where ``violated`` (a 0-dim bool) is set.

    Args:
        violated: whether the batch violated a check (device tensor), or ``None``.
        value: a tensor, or a dict/list/tuple of them (what ``compute()`` returns).

    Returns:
        The value, NaN where violated; integer tensors are returned as they are (they have no NaN).

    Example:
        >>> import torch
        >>> nan_where(torch.tensor(True), {"acc": torch.tensor(0.5), "n": torch.tensor(3)})
        {'acc': tensor(nan), 'n': tensor(3)}
    """
    if violated is None:
        return value
    if isinstance(value, Tensor):
        return value.masked_fill(violated, float("nan")) if value.is_floating_point() else value
    if isinstance(value, dict):
        return {key: nan_where(violated, item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(nan_where(violated, item) for item in value)
    return value
