"""The host-sync detector behind :func:`no_host_sync` and :func:`count_host_syncs`.

One ``TorchDispatchMode`` judges the ops the dispatcher sees (:data:`_DISPATCH_RULES`), and a few patched Python entry
points the rest (``Tensor.item``/``tolist``/``__bool__``, ``torch.tensor`` & co, barriers, ``synchronize()``); on
CUDA ``torch.cuda.set_sync_debug_mode`` backs both. One mode and one set of patches serve however deeply the contexts
nest.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import linecache
import os
import sys
import threading
import typing
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from torchmetrics_async.testing.events import (
    _HINTS,
    BARRIER,
    CUDA_SYNC,
    DATA_DEPENDENT_SHAPE,
    DEVICE_TO_HOST,
    EXPLICIT_SYNCHRONIZE,
    HOST_READ,
    HOST_TO_DEVICE,
    PAGEABLE_COPY,
    HostSyncCounter,
    HostSyncError,
    HostSyncEvent,
)

__all__ = ["count_host_syncs", "no_host_sync"]

# The message torch.cuda.set_sync_debug_mode uses for both its warning and its error.
_CUDA_SYNC_TEXT = "called a synchronizing CUDA operation"
_CUDA_SYNC_OP = "cuda (sync debug mode)"


_TORCH_DIR = os.path.normcase(os.path.dirname(os.path.abspath(torch.__file__))) + os.sep
# This package's own frames (the detector, the counters) are never the user's line.
_TESTING_DIR = os.path.normcase(os.path.dirname(os.path.abspath(__file__))) + os.sep
_SKIPPED_FILES = frozenset(
    os.path.normcase(os.path.abspath(module.__file__ or "")) for module in (contextlib, functools, typing, warnings)
)
# Most events come from a handful of files; normalising paths once per file keeps the walk cheap.
_SKIP_CACHE: dict[str, bool] = {}


def _is_internal(filename: str) -> bool:
    skip = _SKIP_CACHE.get(filename)
    if skip is None:
        path = os.path.normcase(os.path.abspath(filename)) if not filename.startswith("<") else filename
        skip = path.startswith((_TORCH_DIR, _TESTING_DIR)) or path in _SKIPPED_FILES
        _SKIP_CACHE[filename] = skip
    return skip


def _user_frame() -> tuple[str, int, str, str]:
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if not _is_internal(code.co_filename):
            line = linecache.getline(code.co_filename, frame.f_lineno, frame.f_globals).strip()
            return code.co_filename, frame.f_lineno, code.co_name, line
        frame = frame.f_back
    return "<unknown>", 0, "<unknown>", ""


@dataclasses.dataclass(eq=False)  # frames are removed by identity
class _Frame:
    strict: bool
    counter: HostSyncCounter | None


class _State:
    def __init__(self) -> None:
        self.frames: list[_Frame] = []
        self.mode: _HostSyncMode | None = None
        self.patches: list[tuple[Any, str, bool, Any]] = []
        self.thread: int | None = None
        # >0 while an already-reported sync runs, so its inner ops and CUDA warnings are not reported again.
        self.suppress = 0
        self.warning_hook_users = 0
        self.warning_hook: contextlib.AbstractContextManager[Any] | None = None


_state = _State()


def _report(op: str, reason: str, *, may_raise: bool = True) -> None:
    frames = _state.frames
    strict = may_raise and frames[-1].strict
    record = strict or any(f.counter is not None and f.counter.record_events for f in frames)
    event = HostSyncEvent(op, reason, *(_user_frame() if record else ()))
    for frame in frames:
        if frame.counter is not None:
            frame.counter._add(event)
    if strict:
        message = f"host sync inside no_host_sync(): {event.op} ({event.reason})\n  at {event.location}"
        raise HostSyncError(f"{message}\n  hint: {_HINTS.get(event.reason, '')}", event)


def _active() -> bool:
    return bool(_state.frames) and not _state.suppress and threading.get_ident() == _state.thread


def _suppressed(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` unreported: the inner ops of a sync reported already, or of classifying one."""
    _state.suppress += 1
    try:
        return fn(*args, **kwargs)
    finally:
        _state.suppress -= 1


# Dispatcher rules: func -> (reported name, check(args, kwargs) -> reason or None)
_Check = Callable[[tuple[Any, ...], dict[str, Any]], str | None]
_MASK_DTYPES = (torch.bool, torch.uint8)


def _always(reason: str) -> _Check:
    return lambda args, kwargs: reason


def _mask_index(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    indices = args[1] if len(args) > 1 else kwargs.get("indices", ())
    for index in indices:
        if isinstance(index, torch.Tensor) and index.dtype in _MASK_DTYPES:
            return DATA_DEPENDENT_SHAPE
    return None


def _repeat_interleave(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    return DATA_DEPENDENT_SHAPE if kwargs.get("output_size") is None else None


def _transfer(source: torch.device, target: torch.device | str) -> str | None:
    source_is_host, target_is_host = source.type == "cpu", torch.device(target).type == "cpu"
    if source_is_host == target_is_host:
        return None
    return HOST_TO_DEVICE if source_is_host else DEVICE_TO_HOST


def _to_copy(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    target = kwargs.get("device")
    if target is None or kwargs.get("non_blocking", False):
        return None
    return _transfer(args[0].device, target)


def _copy(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    non_blocking = args[2] if len(args) > 2 else kwargs.get("non_blocking", False)
    target, source = args[0], args[1]
    if not non_blocking:
        return _transfer(source.device, target.device)
    # non_blocking=True into pageable host memory is synchronous (not the other way: CUDA stages the source at once).
    if _transfer(source.device, target.device) == DEVICE_TO_HOST and not target.is_pinned():
        return PAGEABLE_COPY
    return None


def _c10d_barrier(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    async_op = args[3] if len(args) > 3 else kwargs.get("async_op", True)
    return None if async_op else BARRIER


def _build_rules() -> dict[Any, tuple[str, _Check]]:
    host_reads = ("_local_scalar_dense", "item", "equal", "allclose", "is_nonzero")
    shaped = ("nonzero", "nonzero_numpy", "masked_select", "_unique", "_unique2", "unique_dim", "unique_consecutive")
    shaped += ("unique_dim_consecutive", "bincount", "histc")
    table: list[tuple[str, str, _Check, tuple[str, ...] | None]] = [
        *(("aten", name, _always(HOST_READ), None) for name in host_reads),
        *(("aten", name, _always(DATA_DEPENDENT_SHAPE), None) for name in shaped),
        ("aten", "repeat_interleave", _repeat_interleave, ("Tensor", "self_Tensor")),
        ("aten", "index", _mask_index, ("Tensor", "Tensor_out", "Tensor_hacked_twin")),
        ("aten", "index_put_", _mask_index, None),
        ("aten", "index_put", _mask_index, None),
        ("aten", "_index_put_impl_", _mask_index, None),
        ("aten", "_to_copy", _to_copy, ("default",)),
        ("aten", "copy_", _copy, ("default",)),
        ("c10d", "barrier", _c10d_barrier, None),
        ("c10d", "monitored_barrier_", _always(BARRIER), None),
    ]
    rules: dict[Any, tuple[str, _Check]] = {}
    for namespace, name, check, overloads in table:
        try:
            packet = getattr(getattr(torch.ops, namespace), name)
        except (AttributeError, RuntimeError):  # op absent from this build (e.g. c10d without distributed)
            continue
        for overload in overloads or packet.overloads():
            if overload in packet.overloads():
                rules[getattr(packet, overload)] = (f"{namespace}.{name}", check)
    return rules


_DISPATCH_RULES = _build_rules()


class _HostSyncMode(TorchDispatchMode):
    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        if kwargs is None:
            kwargs = {}
        rule = _DISPATCH_RULES.get(func)
        reason = rule[1](args, kwargs) if rule is not None and not _state.suppress and _state.frames else None
        if reason is None:
            try:
                return func(*args, **kwargs)
            except RuntimeError as err:
                # Syncs we have no rule for still surface, via CUDA's own "error" mode, with a user location.
                if isinstance(err, HostSyncError) or _CUDA_SYNC_TEXT not in str(err) or not _state.frames:
                    raise
                try:
                    _report(str(func.overloadpacket), CUDA_SYNC)
                except HostSyncError as sync_error:
                    raise sync_error from err
                raise
        _report(rule[0], reason)  # type: ignore[index]
        return _suppressed(func, *args, **kwargs)


# Entry points the dispatcher never sees.
_Classify = Callable[..., tuple[str, str] | None]


def _guarded(original: Callable[..., Any], classify: _Classify) -> Callable[..., Any]:
    # One user-level event: report once, then hide the dispatcher ops the call makes (e.g. _local_scalar_dense).
    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not _active():
            return original(*args, **kwargs)
        # Classifying may itself call patched functions (torch.get_default_device() builds a tensor).
        event = _suppressed(classify, *args, **kwargs)
        if event is None:
            return original(*args, **kwargs)
        _report(*event)
        return _suppressed(original, *args, **kwargs)

    return wrapper


def _always_classify(op: str, reason: str) -> _Classify:
    return lambda *args, **kwargs: (op, reason)


def _host_read(op: str) -> _Classify:
    # Reading pinned memory (where async copies land) does not wait: the synchronize before it is what is counted.
    def classify(self: torch.Tensor, *args: Any, **kwargs: Any) -> tuple[str, str] | None:
        if self.device.type == "cpu" and self.is_pinned():
            return None
        return (op, HOST_READ)

    return classify


def _host_data(data: Any) -> bool:
    return not isinstance(data, torch.Tensor) and not hasattr(data, "__cuda_array_interface__")


def _creation(name: str, data_pos: int, data_kw: str, on_self: bool = False) -> _Classify:
    # Tensor data goes through aten._to_copy, which the dispatch rules already judge.
    def classify(*args: Any, **kwargs: Any) -> tuple[str, str] | None:
        data = args[data_pos] if len(args) > data_pos else kwargs.get(data_kw)
        if not _host_data(data):
            return None
        device = kwargs.get("device")  # keyword-only in all four signatures
        if device is None:
            device = args[0].device if on_self else torch.get_default_device()
        device = torch.device(device)
        return (f"{name} -> {device}", HOST_TO_DEVICE) if device.type != "cpu" else None

    return classify


def _repr(self: torch.Tensor, *args: Any, **kwargs: Any) -> tuple[str, str] | None:
    # Printing copies the values to the host (and is invisible to the dispatcher); meta tensors have none to copy.
    return None if self.is_meta else ("Tensor.__repr__", HOST_READ)


def _barrier(*args: Any, **kwargs: Any) -> tuple[str, str] | None:
    async_op = args[1] if len(args) > 1 else kwargs.get("async_op", False)
    return None if async_op else ("torch.distributed.barrier", BARRIER)


def _patch_plan() -> list[tuple[Any, str, _Classify]]:
    plan: list[tuple[Any, str, _Classify]] = [
        (torch.Tensor, attr, _host_read(f"Tensor.{attr}"))
        for attr in ("item", "tolist", "numpy", "__bool__", "__float__", "__int__", "__index__", "__complex__")
    ]
    plan += [
        (torch.Tensor, "__repr__", _repr),
        (torch, "tensor", _creation("torch.tensor", 0, "data")),
        (torch, "as_tensor", _creation("torch.as_tensor", 0, "data")),
        (torch, "asarray", _creation("torch.asarray", 0, "obj")),
        (torch.Tensor, "new_tensor", _creation("Tensor.new_tensor", 1, "data", on_self=True)),
    ]
    if torch.distributed.is_available():
        plan.append((torch.distributed, "barrier", _barrier))
        plan.append(
            (torch.distributed, "monitored_barrier", _always_classify("torch.distributed.monitored_barrier", BARRIER))
        )
    synchronizers = [(torch.cuda, "torch.cuda"), (torch.cuda.Stream, "Stream"), (torch.cuda.Event, "Event")]
    synchronizers.append((torch.accelerator, "torch.accelerator"))
    plan += [
        (owner, "synchronize", _always_classify(f"{name}.synchronize", EXPLICIT_SYNCHRONIZE))
        for owner, name in synchronizers
    ]
    return plan


def _warm_identity_caches() -> None:
    # These lru_caches hold torch.tensor & co by identity: filled while patched, they would keep our wrappers forever.
    with contextlib.suppress(Exception):
        from torch.utils._device import _device_constructors

        _device_constructors()
    with contextlib.suppress(Exception):
        torch.overrides.get_ignored_functions()


def _install_patches() -> None:
    _warm_identity_caches()
    try:
        for owner, attr, classify in _patch_plan():
            had = attr in vars(owner)
            original = vars(owner).get(attr)
            wrapper = _guarded(getattr(owner, attr), classify)
            # Record before setattr so a failure half-way still restores everything already replaced.
            _state.patches.append((owner, attr, had, original))
            setattr(owner, attr, wrapper)
    except BaseException:
        _restore_patches()
        raise


def _restore_patches() -> None:
    # Reverse order, so an attribute patched twice ends with its first-seen original.
    while _state.patches:
        owner, attr, had, original = _state.patches.pop()
        if had:
            setattr(owner, attr, original)
        else:
            delattr(owner, attr)


def _use_cuda_sync_debug_mode() -> bool:
    """Whether torch.cuda's own sync debug mode backs the detector (CUDA build with a visible device)."""
    return torch.cuda.is_available()


def _show_cuda_warning(previous: Callable[..., Any]) -> Callable[..., Any]:
    def showwarning(message: Any, category: Any, *rest: Any) -> None:
        if _CUDA_SYNC_TEXT not in str(message):
            previous(message, category, *rest)
        elif _state.frames and not _state.suppress:  # suppressed: already reported by the dispatch rules
            _report(_CUDA_SYNC_OP, CUDA_SYNC, may_raise=False)

    return showwarning


def _acquire_warning_hook() -> None:
    if _state.warning_hook_users == 0:
        hook = warnings.catch_warnings()
        hook.__enter__()
        # "always": the default action would show (and so count) a warning only once per call site.
        warnings.filterwarnings("always", message=f".*{_CUDA_SYNC_TEXT}")
        warnings.showwarning = _show_cuda_warning(warnings.showwarning)
        _state.warning_hook = hook
    _state.warning_hook_users += 1


def _release_warning_hook() -> None:
    _state.warning_hook_users -= 1
    if _state.warning_hook_users == 0 and _state.warning_hook is not None:
        hook, _state.warning_hook = _state.warning_hook, None
        hook.__exit__(None, None, None)


def _push(frame: _Frame) -> None:
    if not _state.frames:
        _state.thread = threading.get_ident()
        _install_patches()
        mode = _HostSyncMode()
        try:
            mode.__enter__()
        except BaseException:
            _restore_patches()
            raise
        _state.mode = mode
    _state.frames.append(frame)


def _pop(frame: _Frame) -> None:
    in_order = bool(_state.frames) and _state.frames[-1] is frame
    # Drop the frame even when exited out of order, so the last exit still tears everything down.
    if frame in _state.frames:
        _state.frames.remove(frame)
    if not _state.frames:
        mode, _state.mode = _state.mode, None
        try:
            if mode is not None:
                mode.__exit__(None, None, None)
        finally:
            _restore_patches()
            _state.thread = None
    if not in_order:
        raise RuntimeError("no_host_sync()/count_host_syncs() contexts must exit in the order they were entered")


@contextlib.contextmanager
def _detect(frame: _Frame) -> Iterator[None]:
    with contextlib.ExitStack() as undo:  # runs its callbacks in reverse, each even if a later one raised
        # Before the patches go in, so CUDA's lazy init is not itself inspected.
        if _use_cuda_sync_debug_mode():
            undo.callback(torch.cuda.set_sync_debug_mode, torch.cuda.get_sync_debug_mode())
            torch.cuda.set_sync_debug_mode("error" if frame.strict else "warn")
            if not frame.strict:
                _acquire_warning_hook()
                undo.callback(_release_warning_hook)
        _push(frame)
        undo.callback(_pop, frame)
        yield


@contextlib.contextmanager
def no_host_sync() -> Iterator[None]:
    """Raise :class:`HostSyncError` (naming the op, the reason and the user's line) at the first host sync inside.

    On CUDA this also sets ``torch.cuda.set_sync_debug_mode("error")`` for the block, so syncs without a rule here still
    fail. Everything patched is restored on exit.

    Example:
        >>> import torch
        >>> try:
        ...     with no_host_sync():
        ...         torch.tensor([1.0, 2.0]).nonzero()
        ... except HostSyncError as err:
        ...     print(err.event.op, "|", err.event.reason)
        aten.nonzero | data-dependent shape
    """
    with _detect(_Frame(strict=True, counter=None)):
        yield


@contextlib.contextmanager
def count_host_syncs(*, record_events: bool = True) -> Iterator[HostSyncCounter]:
    """Count host syncs inside the block instead of raising; the same detector as :func:`no_host_sync`.

    On CUDA it counts ``set_sync_debug_mode("warn")``'s warnings too, each sync once. ``record_events=False`` keeps only
    the counts and skips the stack walk, for benchmarks that sync a lot.

    Example:
        >>> import torch
        >>> with count_host_syncs() as syncs:
        ...     values = torch.tensor([3.0, 1.0, 3.0]).unique()
        >>> syncs.total, dict(syncs.by_reason)
        (1, {'data-dependent shape': 1})
    """
    counter = HostSyncCounter(record_events=record_events)
    with _detect(_Frame(strict=False, counter=counter)):
        yield counter
