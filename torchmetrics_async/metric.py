"""The sync-free metric base: a lean update wrapper, in-place reset, a one-pass ``forward`` and one setup."""

import functools
import inspect
from collections.abc import Callable
from typing import Any, ClassVar

import torch
from torch import Tensor

from torchmetrics_async import counting, deferred
from torchmetrics_async._torchmetrics import (
    DEVICE_MISMATCH_MARKER,
    FORWARD_WHILE_SYNCED_MESSAGE,
    Metric,
    TorchMetricsUserError,
    WrapperMetric,
    _squeeze_if_scalar,
    device_mismatch_message,
    gather_all_tensors,
    rank_zero_warn,
)
from torchmetrics_async.copies import FRESH_DEFAULTS, OWNED_STATES, fused_copy_, fused_reset, reset_device, same_layout
from torchmetrics_async.counting import (
    COMPILED_SEEN,
    COMPILED_UPDATES,
    COUNTS_ON_HOST,
    clear_compiled_count,
    copy_update_count,
    set_update_count,
)
from torchmetrics_async.deferred import (
    DEFERRED_RAISE_OWNED,
    FORWARD_BATCH,
    UNREPORTED,
    mark_static_address,
    mark_unreported,
    nan_where,
    recorded_checks,
    report_deferred,
)
from torchmetrics_async.nan import NAN_FLAG_STATE, NAN_KEPT_STATE
from torchmetrics_async.registry import (
    note_one_pass_methods,
    register_on_definition,
    torchmetrics_base,
    uses_one_pass_forward,
)
from torchmetrics_async.sync.metrics import sync_states
from torchmetrics_async.sync.states import fused_sync_dist

__all__ = [
    "CHECKPOINT_METADATA",
    "COMPILED_UPDATES",
    "OWNED_STATES",
    "SyncFreeMixin",
    "clear_compiled_count",
    "copy_update_count",
    "fused_copy_",
    "fused_reset",
    "has_stock_compute",
    "is_same_torchmetrics_class",
    "set_update_count",
    "uses_one_pass_forward",
]


# torchmetrics options that sync by definition: (option, "list" if it only matters for list states, what it does).
_SYNCING_OPTIONS = (
    ("dist_sync_on_step", "any", "syncs states across processes in every forward()"),
    ("compute_on_cpu", "list", "copies list states to the CPU after every update, a blocking device-to-host copy"),
)
_ANNOUNCED: set[tuple[str, str]] = set()
# What a checkpoint carries beside torchmetrics' keys: the update count ("mean" merges and compute's warning depend
# on it) and the recorded checks, in the module's state dict metadata under this key.
CHECKPOINT_METADATA = "torchmetrics_async"
_UPDATE_COUNT_KEY = "_update_count"
# What torchmetrics' forward switches for the batch and puts back only when the batch's update succeeds.
_FORWARD_SWITCHES = (
    "_to_sync",
    "_should_unsync",
    "compute_on_cpu",
    "_enable_grad",
    "_is_synced",
    "_computed",
    "_forward_cache",
)


def _init_then_setup(cls: type) -> Callable:
    """``cls``'s own (or inherited) ``__init__``, then, for an instance of ``cls`` itself, the one setup."""
    own = cls.__dict__.get("__init__")

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if own is None:
            super(cls, self).__init__(*args, **kwargs)
        else:
            own(self, *args, **kwargs)
        if type(self) is cls:  # the outermost __init__ has returned: a subclass's own states exist too
            self._setup_sync_free()

    functools.update_wrapper(__init__, own or _next_own_init(cls))  # inspect.signature: the real arguments
    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    __init__._own_init = own  # type: ignore[attr-defined]
    return __init__


def _next_own_init(cls: type) -> Callable:
    """The ``__init__`` a class without its own runs: the next real one in its MRO."""
    for base in cls.__mro__[1:]:
        init = base.__dict__.get("__init__")
        if init is not None and getattr(init, "_own_init", init) is not None:
            return getattr(init, "_own_init", init)
    return object.__init__


class SyncFreeMixin:
    """Lean update wrapper, owned storage, deferred checks, one setup; first in a ``Metric``'s bases."""

    __jit_unused_properties__: ClassVar[list[str]] = [*Metric.__jit_unused_properties__, "_update_count"]

    #: The attribute counting this window's updates (a wrapper may count them under another name).
    _window_counter = "_update_count"

    _add_deferred_check = deferred.add_deferred_check
    _deferred_checks_registered = deferred.deferred_checks_registered
    _record_violation = deferred.record_violation
    _add_with_violations = deferred.add_with_violations
    _deferred_violated = deferred.deferred_violated
    _raise_deferred_checks = deferred.raise_deferred_checks
    _report_unreported_checks = deferred.report_unreported_checks
    _reset_deferred = deferred.reset_deferred

    _read_window_count = counting.read_window_count
    _unread_window_count = counting.unread_window_count
    _compiled_count_codes = counting.compiled_count_codes
    _fold_compiled_count = counting.fold_compiled_count
    _count_traced_update = counting.count_traced_update
    _count_compiled_update = counting.count_compiled_update

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Register; note one-pass methods; end construction in the one setup."""
        super().__init_subclass__(**kwargs)
        register_on_definition(cls)
        if hasattr(cls, "_batch_value"):
            note_one_pass_methods(cls)
        cls.__init__ = _init_then_setup(cls)

    def _wrap_update(self, update: Callable) -> Callable:
        """Same contract as ``Metric._wrap_update`` for a fraction of its host time (no ``Module.__setattr__``)."""
        state = self.__dict__
        # Looked up once: every update pays for these calls, not for finding them.
        is_compiling, grad_enabled = torch.compiler.is_compiling, torch.is_grad_enabled
        set_grad = torch._C._set_grad_enabled

        @functools.wraps(update)
        def wrapped_func(*args: Any, **kwargs: Any) -> None:
            state["_computed"] = None
            state[UNREPORTED] = True
            if is_compiling():
                self._count_traced_update()
            else:
                state["_update_count"] += 1
            grad = state["_enable_grad"]
            previous = grad_enabled()
            if previous != grad:
                set_grad(grad)
            try:
                update(*args, **kwargs)
            except RuntimeError as err:
                _reword_device_mismatch(self, err)
                raise
            finally:
                if previous != grad:
                    set_grad(previous)
            if state["compute_on_cpu"]:
                self._move_list_states_to_cpu()

        return wrapped_func

    @property
    def _update_count(self) -> int:
        """The window's update count (torchmetrics' int), compiled updates included."""
        return self._read_window_count()

    @_update_count.setter
    def _update_count(self, value: int) -> None:
        set_update_count(self, value)
        # A door: torchmetrics links a compute-group follower by assigning it the leader's states, then this count.
        if OWNED_STATES in self.__dict__ and self.__dict__[FORWARD_BATCH] is None:
            self._own_states(in_place=True)

    def _filter_kwargs(self, **kwargs: Any) -> dict[str, Any]:
        """Torchmetrics' keyword filtering for ``MetricCollection.update``, from a cached reading of the signature."""
        if not kwargs:
            return {}
        accepted, var_keyword = self._update_parameters()
        return kwargs if var_keyword else {key: value for key, value in kwargs.items() if key in accepted}

    def _update_parameters(self) -> tuple[frozenset, bool]:
        """``update``'s keyword-passable parameter names and whether it takes ``**kwargs``, cached per signature."""
        state = self.__dict__
        signature = state["_update_signature"]
        cached = state.get("_update_parameters_cache")
        if cached is None or cached[0] is not signature:
            params = signature.parameters
            variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
            accepted = frozenset(name for name, p in params.items() if p.kind not in variadic)
            var_keyword = any(p.kind == inspect.Parameter.VAR_KEYWORD for p in params.values())
            cached = state["_update_parameters_cache"] = (signature, accepted, var_keyword)
        return cached[1], cached[2]

    @fused_sync_dist
    def _sync_dist(self, dist_sync_fn: Callable = gather_all_tensors, process_group: Any = None) -> None:
        """Sync all states in one fused round of collectives."""
        if dist_sync_fn is not gather_all_tensors:
            super()._sync_dist(dist_sync_fn, process_group=process_group)
            return
        sync_states(self, process_group=process_group or self.process_group)

    def reset(self) -> None:
        """Reset states to fresh copies of their defaults, then raise a deferred error ``compute()`` did not raise.

        Whatever held an old state keeps its value.
        """
        report = self._report_unreported_checks()
        try:
            if report:
                report_deferred(self, report)
        finally:
            self._reset_states()

    def _reset_states(self, in_place: bool = False) -> None:
        """``reset()`` without reporting the deferred checks."""
        state = self.__dict__
        set_update_count(self, 0)
        state["_forward_cache"] = None
        state["_computed"] = None
        state["_cache"] = None
        state["_is_synced"] = False
        if state.get(FORWARD_BATCH) is None:  # forward() resets for the batch alone: the window goes on
            self._reset_deferred()
        owned = state[OWNED_STATES]
        prepared = state.pop(FRESH_DEFAULTS, {})  # copied by fused_reset()
        for attr, default in self._defaults.items():
            current = state.get(attr)
            if isinstance(default, Tensor):
                if in_place and owned.get(attr) is current and same_layout(current, default):
                    current.copy_(default)
                    continue
                fresh = prepared.get(attr)
                if fresh is None:
                    fresh = mark_static_address(default.detach().clone().to(reset_device(current, default)))
                if attr in state:  # a plain attribute (add_state): Module.__setattr__'s registry checks find nothing
                    state[attr] = fresh
                else:
                    setattr(self, attr, fresh)
                owned[attr] = fresh
            else:
                current.clear()  # as torchmetrics: whoever shares the list sees it emptied

    def _own_states(self, in_place: bool = False) -> None:
        """A door: copy the states this metric does not own (``in_place``: into its own, fused, where layouts agree)."""
        state = self.__dict__
        owned = state[OWNED_STATES]
        targets, sources = [], []
        for attr in self._defaults:
            current, mine = state[attr], owned.get(attr)
            if mine is current:
                continue
            if in_place and isinstance(mine, Tensor) and isinstance(current, Tensor) and same_layout(mine, current):
                targets.append(mine)
                sources.append(current)
            else:
                mine = mark_static_address(current.detach().clone()) if isinstance(current, Tensor) else list(current)
            setattr(self, attr, mine)
            owned[attr] = mine
        fused_copy_(targets, sources)

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Torchmetrics' unpickling, then the one setup."""
        super().__setstate__(state)
        self._setup_sync_free()

    def _wrap_compute(self, compute: Callable) -> Callable:
        """Torchmetrics' compute wrapper; in a batch ``forward()``: NaN where the batch violated a check."""
        wrapped = super()._wrap_compute(compute)
        state = self.__dict__

        @functools.wraps(compute)
        def compute_value(*args: Any, **kwargs: Any) -> Any:
            if state.get(FORWARD_BATCH) is None:
                return wrapped(*args, **kwargs)
            return nan_where(self._deferred_violated(), wrapped(*args, **kwargs))

        return compute_value

    def _update_from_stats(self, *args: Any, **kwargs: Any) -> None:
        stats = self._batch_stats(*args, **kwargs)
        if stats is not None:
            self._merge_stats(stats)

    def _batch_violation(self, stats: Any) -> Tensor | None:
        """Whether the batch violated a deferred check (0-dim bool on the device), or ``None`` if it cannot."""
        return None

    @torch.jit.unused
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Accumulate the batch and return the metric on it alone, without a host sync (NaN for a violating batch)."""
        if self._is_synced:
            raise TorchMetricsUserError(FORWARD_WHILE_SYNCED_MESSAGE)
        if not self.dist_sync_on_step and uses_one_pass_forward(type(self)):
            return self._forward_one_pass(args, kwargs)
        if torch.compiler.is_compiling():
            return self._forward_compiled(args, kwargs)
        return self._forward_keeping_states_on_error(args, kwargs)

    def _forward_one_pass(self, args: tuple, kwargs: dict) -> Any:
        """``forward`` with one reduction of the batch; the batch value carries autograd history as torchmetrics'."""
        state = self.__dict__
        state["_computed"] = None
        state[UNREPORTED] = True
        if torch.compiler.is_compiling():
            self._count_compiled_update()
        else:
            state["_update_count"] += 1
        try:
            # torchmetrics' batch value has history exactly when the caller has grad enabled: the caller's mode.
            stats = self._batch_stats(*args, **kwargs)
            value = _squeeze_if_scalar(self._batch_value(stats))
            if stats is not None:
                value = nan_where(self._batch_violation(stats), value)
                with torch.no_grad():
                    self._merge_stats(_detach(stats))
        except RuntimeError as err:
            _reword_device_mismatch(self, err)
            raise
        state["_forward_cache"] = value
        return value

    def _forward_keeping_states_on_error(self, args: tuple, kwargs: dict) -> Any:
        """Torchmetrics' ``forward``; on an error the metric is put back as it was, and it raises."""
        state = self.__dict__
        previous = state.get(DEFERRED_RAISE_OWNED, False)
        # compute() must not read the flags (a host sync): its wrapper turns a violating batch's value into NaN.
        state[FORWARD_BATCH] = True
        state[DEFERRED_RAISE_OWNED] = True
        held = {attr: state[attr] for attr in self._defaults}
        items = {attr: list(value) for attr, value in held.items() if isinstance(value, list)}
        options = {key: state[key] for key in _FORWARD_SWITCHES}
        owned = dict(state[OWNED_STATES])
        count = self._update_count
        try:
            return super().forward(*args, **kwargs)
        except BaseException:
            for attr, value in held.items():
                if attr in items:
                    value[:] = items[attr]
                setattr(self, attr, value)
            state[OWNED_STATES] = owned
            state.update(options)
            set_update_count(self, count)
            raise
        finally:
            state[FORWARD_BATCH] = None
            state[DEFERRED_RAISE_OWNED] = previous

    def _forward_compiled(self, args: tuple, kwargs: dict) -> Any:
        """Torchmetrics' forward inside traced code, the update count kept on the device."""
        state = self.__dict__
        self._count_compiled_update()
        host, previous = state["_update_count"], state[DEFERRED_RAISE_OWNED]
        state[COMPILED_SEEN] = 0  # read as the host count alone until restored
        state[COUNTS_ON_HOST], state[FORWARD_BATCH], state[DEFERRED_RAISE_OWNED] = True, True, True
        # torchmetrics' forward ends with new state tensors: their values are copied back into these, which stay the
        # states (the addresses compiled code was traced with).
        owned = state[OWNED_STATES]
        accumulated = {attr: state[attr] for attr in self._defaults if isinstance(state[attr], Tensor)}
        try:
            return super().forward(*args, **kwargs)
        finally:
            state["_update_count"], state[COMPILED_SEEN] = host, None
            state[COUNTS_ON_HOST], state[FORWARD_BATCH], state[DEFERRED_RAISE_OWNED] = False, None, previous
            for attr, tensor in accumulated.items():
                final = state[attr]
                if final is not tensor and isinstance(final, Tensor) and same_layout(tensor, final):
                    tensor.copy_(final)
                    state[attr] = owned[attr] = tensor

    def merge_state(self, incoming_state: dict[str, Any] | Metric) -> None:
        """Torchmetrics' ``merge_state``; also merges a plain instance of this metric's torchmetrics class.

        Example:
            >>> import torch, torchmetrics
            >>> from torchmetrics_async import MeanMetric
            >>> driver, worker = MeanMetric(), torchmetrics.MeanMetric()
            >>> driver.update(torch.tensor(1.0))
            >>> worker.update(torch.tensor(3.0))
            >>> driver.merge_state(worker)
            >>> driver.compute()
            tensor(2.)
        """
        if (
            isinstance(incoming_state, Metric)
            and not isinstance(incoming_state, type(self))
            and is_same_torchmetrics_class(self, incoming_state)
        ):
            incoming_state = incoming_state.metric_state
        Metric.merge_state(self, incoming_state)

    def _extra_states(self) -> tuple[str, ...]:
        """The states this package adds to torchmetrics' own."""
        checks = self.__dict__.get("_check_messages", {})
        return tuple(key for key in self._defaults if key in (NAN_FLAG_STATE, NAN_KEPT_STATE) or key in checks)

    def _missing_extra_state(self, attr: str, incoming_state: dict[str, Any]) -> Any:
        """What an incoming torchmetrics-shaped state stands for in extra state ``attr``."""
        return self._defaults[attr]

    def _reduce_states(self, incoming_state: dict[str, Any]) -> None:
        """``merge_state``/``forward`` merge: a torchmetrics-shaped state (no extra states) merges as clean."""
        incoming_state = dict(incoming_state)
        for attr in self._extra_states():
            if attr not in incoming_state:
                incoming_state[attr] = self._missing_extra_state(attr, incoming_state)
        state = self.__dict__
        before = {attr: state[attr] for attr in self._defaults}
        super()._reduce_states(incoming_state)
        mark_unreported(self)  # merged states count as an update: recomputed, and their flags raised
        # A reduction made a new tensor: this metric's own (a list result may hold the incoming tensors: not owned).
        owned = state[OWNED_STATES]
        for attr, previous in before.items():
            current = state[attr]
            if isinstance(current, Tensor) and current is not previous and current is not incoming_state[attr]:
                owned[attr] = mark_static_address(current)

    def state_dict(self, destination: Any = None, prefix: str = "", keep_vars: bool = False) -> dict[str, Any]:
        """Torchmetrics' ``state_dict`` with torchmetrics' keys only: a plain metric loads it with ``strict=True``.

        Whenever a state is persistent, what torchmetrics has no key for (the update count, the deferred checks
        recorded in the window) rides in the module's entry of the state dict's ``_metadata``, which ``torch.save``,
        ``torch.load`` and ``copy.deepcopy`` keep and loading ignores. A recorded error (one host read of the checks)
        also keeps its check state's key, so a plain metric refuses it (``Unexpected key(s)``) instead of losing it.
        """
        destination = super().state_dict(destination=destination, prefix=prefix, keep_vars=keep_vars)
        extras = self._extra_states()
        for attr in extras:  # read by _as_torchmetrics_holds (the keep-masks), whatever their persistent
            destination.setdefault(prefix + attr, getattr(self, attr))
        self._as_torchmetrics_holds(destination, prefix)
        for attr in extras:
            del destination[prefix + attr]
        if not any(persistent for attr, persistent in self._persistent.items() if attr not in extras):
            return destination
        checks = self._deferred_checks_registered()
        recorded = recorded_checks(self)
        for name in recorded:
            if checks[name][1] == "error":
                destination[prefix + name] = getattr(self, name).detach().clone()
        carried: dict[str, Any] = {"checks": recorded}
        if self._window_counter == _UPDATE_COUNT_KEY:
            carried[_UPDATE_COUNT_KEY] = self._update_count
        metadata = getattr(destination, "_metadata", None)
        if metadata is not None:
            metadata.setdefault(prefix[:-1], {})[CHECKPOINT_METADATA] = carried
        return destination

    @property
    def metric_state(self) -> dict[str, Any]:
        """The states as torchmetrics would hold them, as ``merge_state`` reads them."""
        state = {attr: getattr(self, attr) for attr in self._defaults}
        self._as_torchmetrics_holds(state)
        return state

    def _as_torchmetrics_holds(self, states: dict[str, Any], prefix: str = "") -> None:
        """Rewrite, in place, states that a plain torchmetrics consumer reads (``metric_state``, ``state_dict``)."""

    def _load_from_state_dict(
        self, state_dict: dict, prefix: str, local_metadata: dict, *args: Any, **kwargs: Any
    ) -> None:
        carried = local_metadata.get(CHECKPOINT_METADATA, {})
        # Checkpoints of earlier versions hold the count under its own key.
        count = carried.get(_UPDATE_COUNT_KEY, state_dict.pop(prefix + _UPDATE_COUNT_KEY, None))
        super()._load_from_state_dict(state_dict, prefix, local_metadata, *args, **kwargs)
        self._own_states()  # a door: torchmetrics holds the caller's tensors as the states
        if count is not None:
            set_update_count(self, int(count))
        for name in carried.get("checks", ()):
            if name in self._deferred_checks_registered():
                getattr(self, name).fill_(True)
        mark_unreported(self)  # loaded states count as an update: recomputed, and their flags raised

    def _apply(self, fn: Callable, exclude_state: Any = "") -> Any:
        fixed = self._extra_states()
        this = super()._apply(fn, tuple(exclude_state) + fixed)
        for key in fixed:
            this._defaults[key] = _to_device(this._defaults[key], this.device)
            setattr(this, key, _to_device(getattr(this, key), this.device))
        counter = this.__dict__.get(COMPILED_UPDATES)
        if counter is not None:
            this.__dict__[COMPILED_UPDATES] = mark_static_address(counter.to(this.device))
        this._set_constants()
        this._own_states()  # before any update: compiled code then finds its states owned (no recompile)
        return this

    def _set_constants(self) -> None:
        # Device-resident 1 used as `state.add_(one, alpha=x)`: a Python number enters as a kernel argument.
        self.__dict__["_one"] = torch.ones((), dtype=self.dtype, device=self.device)

    def _add_extra_states(self) -> None:
        """Add the states this class keeps beyond torchmetrics' that are not there yet."""
        parent = getattr(super(), "_add_extra_states", None)  # a mixin later in the MRO (see decorators)
        if parent is not None:
            parent()

    def _setup_sync_free(self) -> None:
        """The one setup (construction, ``accelerate()``'s class swap, unpickling): idempotent."""
        state = self.__dict__
        cls = type(self)
        state["_update_signature"] = inspect.signature(cls.update.__get__(self))
        state["update"] = self._wrap_update(cls.update.__get__(self))
        state["compute"] = self._wrap_compute(cls.compute.__get__(self))
        self._add_extra_states()
        state[OWNED_STATES] = {}
        state.setdefault(FORWARD_BATCH, None)
        counter = state.get(COMPILED_UPDATES)
        counter = torch.zeros((), dtype=torch.int64, device=self.device) if counter is None else counter.clone()
        state[COMPILED_UPDATES] = mark_static_address(counter)
        state.setdefault(COMPILED_SEEN, 0)
        state.setdefault(UNREPORTED, False)
        # Present from the start: a key added later (by a compiled forward) changes the dict Dynamo guards on.
        state[COUNTS_ON_HOST] = False
        state.setdefault(DEFERRED_RAISE_OWNED, False)
        self._set_constants()
        # A door: updates never check, and a compiled forward finds its states owned (one graph, no recompile).
        self._own_states()
        self._update_parameters()
        self._announce_fallbacks()

    def _announce_fallbacks(self) -> None:
        """Say once per class and option when an option makes this metric take torchmetrics' syncing path."""
        has_list_state = any(isinstance(default, list) for default in self._defaults.values())
        for option, applies, what in _SYNCING_OPTIONS:
            key = (type(self).__qualname__, option)
            if getattr(self, option, False) and (applies != "list" or has_list_state) and key not in _ANNOUNCED:
                _ANNOUNCED.add(key)
                rank_zero_warn(
                    f"{type(self).__name__}({option}=True) {what}; torchmetrics-async keeps torchmetrics' behaviour"
                    " for it, host syncs included.",
                    UserWarning,
                )

    def _number_tensor(self, x: float) -> Tensor:
        """A 0-dim tensor holding ``x`` on the metric's device (a fill kernel: no host-to-device copy)."""
        return torch.full((), x, dtype=self.dtype, device=self.device)


def has_stock_compute(metric: Any) -> bool:
    """Whether ``metric.compute`` is torchmetrics' sync-compute-unsync wrapper (or ours, which only adds to it)."""
    wrap = type(metric)._wrap_compute
    return wrap is Metric._wrap_compute or (
        wrap is SyncFreeMixin._wrap_compute and not isinstance(metric, WrapperMetric)
    )


def is_same_torchmetrics_class(metric: Any, incoming: Any) -> bool:
    """Whether ``metric`` is an instance of ``incoming``'s class and both stand for the same torchmetrics class."""
    cls = type(incoming)
    tm_class = torchmetrics_base(cls)
    return isinstance(metric, cls) and tm_class is not None and tm_class is torchmetrics_base(type(metric))


def _reword_device_mismatch(metric: Any, err: RuntimeError) -> None:
    """Raise torchmetrics' device-mismatch message for ``err`` if it is one (a ``RuntimeError`` naming devices)."""
    if DEVICE_MISMATCH_MARKER in str(err):
        raise RuntimeError(device_mismatch_message(metric.__class__.__name__)) from err


def _detach(stats: Any) -> Any:
    if isinstance(stats, Tensor):
        return stats.detach()
    if isinstance(stats, tuple):
        detached = (_detach(s) for s in stats)
        return type(stats)(*detached) if hasattr(stats, "_fields") else tuple(detached)  # keep NamedTuples' types
    return stats


def _to_device(value: Any, device: torch.device) -> Any:
    return value.to(device) if isinstance(value, Tensor) else [v.to(device) for v in value]
