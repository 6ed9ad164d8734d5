"""Host-sync detection for tests, benchmarks and the demo.

A *host sync* is any point where the CPU has to wait for the accelerator: reading a device value on the host
(``.item()``, ``if t:``, ``.tolist()``, ``print(t)``), ops whose output shape depends on data (``nonzero``,
``x[mask]``, ``unique``), blocking copies between host and device, ``torch.distributed.barrier()`` and explicit
``synchronize()`` calls.

:func:`no_host_sync` raises :class:`HostSyncError` at the first one; :func:`count_host_syncs` counts them instead.
On CUDA both also drive ``torch.cuda.set_sync_debug_mode``; on a CPU-only machine they rely on a
``TorchDispatchMode`` plus a few patched Python entry points, so the same tests catch the same mistakes without a
GPU. "Host" is the CPU and "device" is any other device (``meta`` stands in for an accelerator in tests):

- host reads and data-dependent shapes are flagged whatever the device, so ``if t.any():`` fails on CPU too;
- host-to-device transfers are flagged only when the target is not the CPU, device-to-host ones only when the
  source is not the CPU, and neither when ``non_blocking=True`` (except ``copy_`` into pageable host memory,
  which CUDA makes synchronous); reading pinned host memory (where asynchronous copies land) is not a sync;
- metadata (``.shape``, ``.dtype``, ``.device``), device math, ``torch.where``, integer indexing, ``nonzero_static``
  and Python numbers or 0-dim CPU tensors as operands of device ops are not syncs.

Contexts nest. Every active :func:`count_host_syncs` counts every sync, and the innermost context decides whether it
raises, which mirrors how ``torch.cuda.set_sync_debug_mode`` is saved and restored: a counting region inside
:func:`no_host_sync` therefore allows (and counts) syncs.

Example:
    >>> import torch
    >>> from torchmetrics_async.testing import HostSyncError, count_host_syncs, no_host_sync
    >>> x = torch.tensor([1.0, float("nan"), 3.0])
    >>> with no_host_sync():
    ...     total = torch.where(x.isnan(), 0.0, x).sum()  # stays on the device
    >>> with count_host_syncs() as syncs:
    ...     clean = x[~x.isnan()]  # boolean mask: output shape depends on the data
    ...     n = int(clean.numel())  # metadata, not a sync
    >>> syncs.by_op
    Counter({'aten.index': 1})

"""

from __future__ import annotations

import collections
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

__all__ = [
    "COLLECTIVES",
    "CollectiveCounter",
    "HostSyncCounter",
    "HostSyncError",
    "HostSyncEvent",
    "count_collectives",
    "count_host_syncs",
    "no_host_sync",
]

HOST_READ = "host read"
DATA_DEPENDENT_SHAPE = "data-dependent shape"
HOST_TO_DEVICE = "host-to-device copy"
DEVICE_TO_HOST = "device-to-host copy"
BARRIER = "barrier"
EXPLICIT_SYNCHRONIZE = "explicit synchronize"
CUDA_SYNC = "synchronizing CUDA operation"
PAGEABLE_COPY = "non_blocking device-to-host copy into pageable memory (synchronous)"

_HINTS = {
    HOST_READ: "keep the value on the device (torch.where, masked ops) and read it in compute()",
    DATA_DEPENDENT_SHAPE: "use a fixed-shape form: masked_fill/torch.where, nonzero_static, output_size=",
    HOST_TO_DEVICE: "build it on the device (torch.full/zeros with device=) or copy pinned memory non_blocking=True",
    DEVICE_TO_HOST: "defer the read to compute(), or copy with non_blocking=True into pinned memory",
    BARRIER: "avoid barriers in update(); synchronize once in compute()",
    EXPLICIT_SYNCHRONIZE: "remove the synchronize() call from the hot path",
    CUDA_SYNC: "reported by torch.cuda.set_sync_debug_mode; see the CUDA warning for the operation",
    PAGEABLE_COPY: "copy into pinned memory (torch.empty(..., pin_memory=True)), or .to('cpu', non_blocking=True)",
}

# The message torch.cuda.set_sync_debug_mode uses for both its warning and its error.
_CUDA_SYNC_TEXT = "called a synchronizing CUDA operation"
_CUDA_SYNC_OP = "cuda (sync debug mode)"


@dataclasses.dataclass(frozen=True)
class HostSyncEvent:
    """One host sync: the op that caused it, why it syncs, and the user source line that triggered it.

    Attributes:
        op: Name of the op, e.g. ``"aten.nonzero"``, ``"Tensor.tolist"`` or ``"torch.as_tensor -> meta"``.
        reason: One of ``"host read"``, ``"data-dependent shape"``, ``"host-to-device copy"``,
            ``"device-to-host copy"``, ``"barrier"``, ``"explicit synchronize"``,
            ``"synchronizing CUDA operation"``.
        filename: File of the innermost frame outside torch and this module (``"<unknown>"`` if not recorded).
        lineno: Line number in ``filename``.
        function: Function name of that frame.
        source: The stripped source line.

    Example:
        >>> import torch
        >>> from torchmetrics_async.testing import count_host_syncs
        >>> with count_host_syncs() as syncs:
        ...     values = torch.arange(3).tolist()
        >>> event = syncs.events[0]
        >>> event.op, event.reason
        ('Tensor.tolist', 'host read')
        >>> "torch.arange(3).tolist()" in event.location
        True

    """

    op: str
    reason: str
    filename: str = "<unknown>"
    lineno: int = 0
    function: str = "<unknown>"
    source: str = ""

    @property
    def location(self) -> str:
        """``file:line in func: <source line>`` of the code that triggered the sync."""
        return f"{self.filename}:{self.lineno} in {self.function}: {self.source}"

    def __str__(self) -> str:
        return f"{self.op} ({self.reason}) at {self.location}"


class HostSyncError(RuntimeError):
    """Raised by :func:`no_host_sync` at a host sync; ``event`` says which op, why, and where.

    Example:
        >>> import torch
        >>> from torchmetrics_async.testing import HostSyncError, no_host_sync
        >>> t = torch.tensor([0.0, 1.0])
        >>> try:
        ...     with no_host_sync():
        ...         if t.any():
        ...             pass
        ... except HostSyncError as err:
        ...     print(err.event.op, "|", err.event.reason, "|", err.event.source)
        Tensor.__bool__ | host read | if t.any():

    """

    def __init__(self, message: str, event: HostSyncEvent | None = None) -> None:
        super().__init__(message)
        self.event = event


class HostSyncCounter:
    """Host syncs seen by one :func:`count_host_syncs` block.

    Attributes:
        total: Number of syncs.
        by_op: Count per op name.
        by_reason: Count per reason.
        events: Every sync in order (empty when ``record_events=False``).

    Example:
        >>> import torch
        >>> from torchmetrics_async.testing import count_host_syncs
        >>> x = torch.tensor([3.0, 1.0, 3.0])
        >>> with count_host_syncs() as syncs:
        ...     first = x[0].item()
        ...     distinct = x.unique()
        >>> syncs.total, dict(syncs.by_reason)
        (2, {'host read': 1, 'data-dependent shape': 1})
        >>> print(syncs.summary().splitlines()[0])
        2 host syncs

    """

    def __init__(self, record_events: bool = True) -> None:
        self.total = 0
        self.by_op: collections.Counter[str] = collections.Counter()
        self.by_reason: collections.Counter[str] = collections.Counter()
        self.events: list[HostSyncEvent] = []
        self.record_events = record_events

    def _add(self, event: HostSyncEvent) -> None:
        self.total += 1
        self.by_op[event.op] += 1
        self.by_reason[event.reason] += 1
        if self.record_events:
            self.events.append(event)

    def summary(self) -> str:
        """Human-readable table: one line per op with its count, reason and first location."""
        lines = [f"{self.total} host sync{'' if self.total == 1 else 's'}"]
        first: dict[str, HostSyncEvent] = {}
        for event in self.events:
            first.setdefault(event.op, event)
        for op, count in self.by_op.most_common():
            event = first.get(op)
            where = f"  at {event.location}" if event is not None else ""
            reason = event.reason if event is not None else ""
            lines.append(f"{count:6d}  {op} ({reason}){where}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"HostSyncCounter(total={self.total}, by_op={dict(self.by_op)})"


# --------------------------------------------------------------------------------------------------------------------
# Source locations


_TORCH_DIR = os.path.normcase(os.path.dirname(os.path.abspath(torch.__file__))) + os.sep
_SKIPPED_FILES = frozenset(
    os.path.normcase(os.path.abspath(module.__file__ or ""))
    for module in (sys.modules[__name__], contextlib, functools, typing, warnings)
)
# Most events come from a handful of files; normalising paths once per file keeps the walk cheap.
_SKIP_CACHE: dict[str, bool] = {}


def _is_internal(filename: str) -> bool:
    skip = _SKIP_CACHE.get(filename)
    if skip is None:
        path = os.path.normcase(os.path.abspath(filename)) if not filename.startswith("<") else filename
        skip = path.startswith(_TORCH_DIR) or path in _SKIPPED_FILES
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


# --------------------------------------------------------------------------------------------------------------------
# Shared state: one dispatch mode and one set of patches however deeply the contexts nest.


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


def _format(event: HostSyncEvent) -> str:
    return (
        f"host sync inside no_host_sync(): {event.op} ({event.reason})\n"
        f"  at {event.location}\n"
        f"  hint: {_HINTS.get(event.reason, '')}"
    )


def _report(op: str, reason: str, *, may_raise: bool = True) -> None:
    frames = _state.frames
    strict = may_raise and frames[-1].strict
    if strict or any(f.counter is not None and f.counter.record_events for f in frames):
        event = HostSyncEvent(op, reason, *_user_frame())
    else:
        event = HostSyncEvent(op, reason)
    for frame in frames:
        if frame.counter is not None:
            frame.counter._add(event)
    if strict:
        raise HostSyncError(_format(event), event)


def _active() -> bool:
    return bool(_state.frames) and not _state.suppress and threading.get_ident() == _state.thread


# --------------------------------------------------------------------------------------------------------------------
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
    source_is_host = source.type == "cpu"
    target_is_host = torch.device(target).type == "cpu"
    if source_is_host and not target_is_host:
        return HOST_TO_DEVICE
    if target_is_host and not source_is_host:
        return DEVICE_TO_HOST
    return None


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
    # non_blocking=True into pageable host memory is synchronous (CUDA returns once the copy is done). The other
    # direction is not: CUDA stages pageable source memory at once and does not wait for the device. ``.to("cpu",
    # non_blocking=True)`` (aten._to_copy) allocates pinned memory itself.
    if _transfer(source.device, target.device) == DEVICE_TO_HOST and not target.is_pinned():
        return PAGEABLE_COPY
    return None


def _c10d_barrier(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    async_op = args[3] if len(args) > 3 else kwargs.get("async_op", True)
    return None if async_op else BARRIER


def _build_rules() -> dict[Any, tuple[str, _Check]]:
    table: list[tuple[str, str, _Check, tuple[str, ...] | None]] = [
        ("aten", "_local_scalar_dense", _always(HOST_READ), None),
        ("aten", "item", _always(HOST_READ), None),
        ("aten", "equal", _always(HOST_READ), None),
        ("aten", "allclose", _always(HOST_READ), None),
        ("aten", "is_nonzero", _always(HOST_READ), None),
        ("aten", "nonzero", _always(DATA_DEPENDENT_SHAPE), None),
        ("aten", "nonzero_numpy", _always(DATA_DEPENDENT_SHAPE), None),
        ("aten", "masked_select", _always(DATA_DEPENDENT_SHAPE), None),
        ("aten", "_unique", _always(DATA_DEPENDENT_SHAPE), None),
        ("aten", "_unique2", _always(DATA_DEPENDENT_SHAPE), None),
        ("aten", "unique_dim", _always(DATA_DEPENDENT_SHAPE), None),
        ("aten", "unique_consecutive", _always(DATA_DEPENDENT_SHAPE), None),
        ("aten", "unique_dim_consecutive", _always(DATA_DEPENDENT_SHAPE), None),
        ("aten", "bincount", _always(DATA_DEPENDENT_SHAPE), None),
        ("aten", "histc", _always(DATA_DEPENDENT_SHAPE), None),
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
        _state.suppress += 1
        try:
            return func(*args, **kwargs)
        finally:
            _state.suppress -= 1


# --------------------------------------------------------------------------------------------------------------------
# Entry points the dispatcher never sees


_Classify = Callable[..., tuple[str, str] | None]


def _guarded(original: Callable[..., Any], classify: _Classify) -> Callable[..., Any]:
    # One user-level event: report once, then hide the dispatcher ops the call makes (e.g. _local_scalar_dense).
    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not _active():
            return original(*args, **kwargs)
        # Classifying may itself call patched functions (torch.get_default_device() builds a tensor).
        _state.suppress += 1
        try:
            event = classify(*args, **kwargs)
        finally:
            _state.suppress -= 1
        if event is None:
            return original(*args, **kwargs)
        _report(*event)
        _state.suppress += 1
        try:
            return original(*args, **kwargs)
        finally:
            _state.suppress -= 1

    return wrapper


def _always_classify(op: str, reason: str) -> _Classify:
    return lambda *args, **kwargs: (op, reason)


def _host_read(op: str) -> _Classify:
    # Pinned host memory is where asynchronous device-to-host copies land: reading it does not wait for the device
    # (the wait is the event or stream synchronize before it, which is counted). Any other tensor is a device here.
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
    plan.append((torch.cuda, "synchronize", _always_classify("torch.cuda.synchronize", EXPLICIT_SYNCHRONIZE)))
    plan.append((torch.cuda.Stream, "synchronize", _always_classify("Stream.synchronize", EXPLICIT_SYNCHRONIZE)))
    plan.append((torch.cuda.Event, "synchronize", _always_classify("Event.synchronize", EXPLICIT_SYNCHRONIZE)))
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and hasattr(accelerator, "synchronize"):
        plan.append(
            (accelerator, "synchronize", _always_classify("torch.accelerator.synchronize", EXPLICIT_SYNCHRONIZE))
        )
    return plan


def _warm_identity_caches() -> None:
    # These lru_caches hold torch.tensor & co by identity; filled while patched they would keep our wrappers forever
    # (and `with torch.device(...)` would stop applying to torch.tensor), so fill them with the originals first.
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


# --------------------------------------------------------------------------------------------------------------------
# CUDA


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


# --------------------------------------------------------------------------------------------------------------------
# Contexts


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
    previous_cuda_mode: int | None = None
    hooked = False
    try:
        # Before the patches go in, so CUDA's lazy init is not itself inspected.
        if _use_cuda_sync_debug_mode():
            previous_cuda_mode = torch.cuda.get_sync_debug_mode()
            torch.cuda.set_sync_debug_mode("error" if frame.strict else "warn")
            if not frame.strict:
                _acquire_warning_hook()
                hooked = True
        _push(frame)
        try:
            yield
        finally:
            _pop(frame)
    finally:
        try:
            if hooked:
                _release_warning_hook()
        finally:
            if previous_cuda_mode is not None:
                torch.cuda.set_sync_debug_mode(previous_cuda_mode)


@contextlib.contextmanager
def no_host_sync() -> Iterator[None]:
    """Raise :class:`HostSyncError` at the first host sync inside the block.

    On CUDA this also sets ``torch.cuda.set_sync_debug_mode("error")`` (restoring the previous mode on exit), so
    syncs this module has no rule for still fail. Patched entry points (``Tensor.item``/``tolist``/``__bool__``,
    ``torch.tensor``/``as_tensor``/``asarray``, ``torch.distributed.barrier``, ...) are restored exactly on exit,
    also when the block raises.

    Yields:
        None.

    Raises:
        HostSyncError: At the first host sync, naming the op, the reason and the user source line.

    Example:
        >>> import torch
        >>> from torchmetrics_async.testing import HostSyncError, no_host_sync
        >>> state = torch.zeros(())
        >>> with no_host_sync():
        ...     state += torch.tensor([1.0, 2.0]).sum()  # device math only
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

    On CUDA this sets ``torch.cuda.set_sync_debug_mode("warn")`` for the block and counts its warnings too, except
    those raised by an op that was already counted, so each sync is counted once.

    Args:
        record_events: Keep every :class:`HostSyncEvent` with its source line. ``False`` keeps only the counts and
            skips the stack walk, for benchmarks that sync a lot.

    Yields:
        The :class:`HostSyncCounter`, filled in as the block runs.

    Example:
        >>> import torch
        >>> from torchmetrics_async.testing import count_host_syncs
        >>> preds = torch.tensor([0.2, 0.9, 0.7])
        >>> with count_host_syncs() as syncs:
        ...     hits = (preds > 0.5).sum()  # no sync
        ...     if hits > 1:  # host read
        ...         hits = hits.float()
        >>> syncs.total, syncs.by_op["Tensor.__bool__"]
        (1, 1)

    """
    counter = HostSyncCounter(record_events=record_events)
    with _detect(_Frame(strict=False, counter=counter)):
        yield counter


#: Every ``torch.distributed`` collective :func:`count_collectives` watches (torch's deprecated names included: one
#: may call another, and only the outermost call counts).
COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_single",
    "all_gather_object",
    "barrier",
    "monitored_barrier",
    "broadcast",
    "broadcast_object_list",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "gather",
    "scatter",
    "all_to_all",
)


class CollectiveCounter:
    """The ``torch.distributed`` collectives called while :func:`count_collectives` is active (outermost calls only).

    Attributes:
        counts: collective name -> calls.
        groups: ``(name, group)`` of every call, in order (``group`` as passed, ``None`` for the default group).

    Example:
        >>> counter = CollectiveCounter()
        >>> counter.total, counter.as_dict()
        (0, {})
    """

    def __init__(self) -> None:
        self.counts: collections.Counter[str] = collections.Counter()
        self.groups: list[tuple[str, Any]] = []
        self._depth = threading.local()

    @property
    def total(self) -> int:
        """All calls counted."""
        return sum(self.counts.values())

    def as_dict(self) -> dict[str, int]:
        """The counts as a plain dict."""
        return dict(self.counts)

    def _wrap(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            depth = getattr(self._depth, "value", 0)
            if depth == 0:
                self.counts[name] += 1
                self.groups.append((name, kwargs.get("group")))
            self._depth.value = depth + 1
            try:
                return original(*args, **kwargs)
            finally:
                self._depth.value = depth

        return counted


@contextlib.contextmanager
def count_collectives() -> Iterator[CollectiveCounter]:
    """Count the ``torch.distributed`` collectives called inside the block (for tests, benchmarks and the demo).

    The functions of :data:`COLLECTIVES` are wrapped on the ``torch.distributed`` module and restored on exit.
    torchmetrics and this package look them up on the module at call time, so their calls are seen; DDP's gradient
    reductions go to the process group directly and are not.

    Yields:
        The :class:`CollectiveCounter`.

    Example:
        >>> with count_collectives() as counter:
        ...     pass  # no process group needed to count nothing
        >>> counter.total
        0
    """
    import torch.distributed as dist

    counter = CollectiveCounter()
    originals = {name: getattr(dist, name) for name in COLLECTIVES if hasattr(dist, name)}
    for name, original in originals.items():
        setattr(dist, name, counter._wrap(name, original))
    try:
        yield counter
    finally:
        for name, original in originals.items():
            setattr(dist, name, original)
