"""Fused collectives for metric states: one collective per bucket instead of a barrier and gathers per state.

torchmetrics syncs metric states one at a time: ``gather_all_tensors`` runs a barrier, an ``all_gather`` of the
state's shape and an ``all_gather`` of its data for every state of every metric, and each rank then reduces the
gathered stack. Here all states of many metrics travel together:

- tensor states reduced with ``sum``, ``mean``, ``max`` or ``min`` are flattened into one buffer per
  (device, dtype, reduce op) and reduced with one ``all_reduce``. ``mean`` is a sum divided by the world size, so
  mean and sum states share a buffer; half-precision states are reduced in float32 (as ``torch.sum`` accumulates);
- bool states (the deferred-NaN flags) ride in a buffer that exists anyway: a max/min buffer of any dtype (0 and 1
  are exact), a sum buffer (as the count of ranks where they are true), or the shape exchange of list states;
  only alone do they get a uint8 buffer;
- list (``"cat"``) states, and tensor states whose reduction needs every rank's value (``None``, a custom callable),
  travel byte-packed in one buffer: one small ``all_gather`` of every state's dtype and shape, then one
  ``all_gather`` of all the data, padded to the longest rank. Results are reassembled in rank order, so they equal
  torchmetrics' ``dim_zero_cat`` of the gathered states;
- no barrier, no pickling (``all_gather_object``), no per-state collective.

Reading the gathered shapes is the one host sync, and only list states need it: their output shape depends on the
other ranks' data. Collectives can run with ``async_op=True``; the returned :class:`SyncHandle` finishes on ``wait()``.

The same machinery backs a functional API on dicts (datarax's, in PyTorch): :func:`reduce_mean`, :func:`reduce_sum`,
:func:`reduce_max`, :func:`reduce_min`, :func:`reduce_custom` and :func:`all_gather`. Without an initialised process
group they return their inputs (the reduction over one rank is the value itself).

Example:
    >>> import torch
    >>> reduce_custom({"loss": torch.tensor(0.5), "step": 10, "tag": "train"}, {"step": "max"})
    {'loss': tensor(0.5000), 'step': 10, 'tag': 'train'}
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import math
import numbers
from collections.abc import Callable, Iterable, Iterator, Mapping
from copy import deepcopy
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from torchmetrics_async._torchmetrics import (
    ALREADY_SYNCED_MESSAGE,
    Metric,
    TorchMetricsUserError,
    dim_zero_cat,
    dim_zero_max,
    dim_zero_mean,
    dim_zero_min,
    dim_zero_sum,
    gather_all_tensors,
    jit_distributed_available,
    rank_zero_warn,
)
from torchmetrics_async._torchmetrics import (
    MetricCollection as _TorchMetricsCollection,
)
from torchmetrics_async.compute_groups import equal_metric_states
from torchmetrics_async.metric import copy_update_count, has_stock_compute

__all__ = [
    "MetricCollection",
    "PlanMismatchError",
    "SyncHandle",
    "all_gather",
    "collective_device",
    "fused_collection_class",
    "reduce_custom",
    "reduce_max",
    "reduce_mean",
    "reduce_min",
    "reduce_sum",
    "sync_context",
    "sync_metrics",
    "sync_states",
]

#: The reductions of the functional API and of fusable metric states.
OPS = ("mean", "sum", "max", "min")
_STATE_OPS: dict[Callable, str] = {dim_zero_sum: "sum", dim_zero_mean: "mean", dim_zero_max: "max", dim_zero_min: "min"}
# "mean" is reduced as a sum (then divided by the world size): it shares the sum buffers.
_BUCKET_OP = {"mean": "sum", "sum": "sum", "max": "max", "min": "min"}
# Segments of the gathered byte buffer start at multiples of this, so every slice can be viewed as any dtype.
_ALIGN = 16
# Dimensions a gathered tensor may have: the shape exchange has a fixed row per tensor, the same on every rank.
MAX_GATHER_DIMS = 8
_ROW = 2 + MAX_GATHER_DIMS
_EMPTY = -1  # dtype code and ndim of a list state with no elements on a rank
# dtype codes of the shape exchange (an index into this tuple; the same torch gives the same tuple on every rank).
_DTYPES: tuple[torch.dtype, ...] = tuple(
    dtype
    for dtype in (
        getattr(torch, name, None)
        for name in (
            "float32", "float64", "float16", "bfloat16", "complex64", "complex128", "complex32", "bool", "uint8",
            "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64", "float8_e4m3fn", "float8_e5m2",
            "float8_e4m3fnuz", "float8_e5m2fnuz",
        )
    )
    if isinstance(dtype, torch.dtype)
)  # fmt: skip
_DTYPE_CODE = {dtype: code for code, dtype in enumerate(_DTYPES)}
_ANNOUNCED: set[tuple[str, str]] = set()


# --------------------------------------------------------------------------------------------------------------------
# Where and whether collectives run
# --------------------------------------------------------------------------------------------------------------------


def collective_device(
    group: Any = None, device: torch.device | str | None = None, backend: str | None = None
) -> torch.device:
    """The device a collective on ``group`` runs on for tensors that live on ``device``.

    A backend runs collectives where the tensors are when it supports that device type (gloo: CPU and CUDA).
    NCCL has no CPU support: CPU states are staged to the current CUDA device for the collective and copied back.
    Mixed backends (``"cpu:gloo,cuda:nccl"``) route each device to its own backend, so tensors stay where they are.

    Args:
        group: the process group (``None``: the default group).
        device: where the tensors live (``None``: the CPU).
        backend: the group's backend name; ``None`` asks ``torch.distributed.get_backend(group)``.

    Returns:
        ``device``, or the current device of the backend's accelerator if the backend cannot use ``device``.

    Example:
        >>> collective_device(device="cpu", backend="gloo"), collective_device(device="cuda:1", backend="nccl")
        (device(type='cpu'), device(type='cuda', index=1))
    """
    device = torch.device("cpu") if device is None else torch.device(device)
    backend = str(dist.get_backend(group) if backend is None else backend).lower()
    supported = getattr(dist.Backend, "backend_capability", {}).get(backend)
    if backend == "nccl":
        supported = ["cuda"]
    if not supported or device.type in supported:
        return device
    accelerator = supported[0]
    return torch.device(accelerator, torch.get_device_module(accelerator).current_device())


def _member(group: Any) -> bool:
    """Whether this rank belongs to ``group`` (a non-member neither sends nor receives: it keeps its values)."""
    return dist.get_rank(group) >= 0


def _all_gather_single(output: Tensor, local: Tensor, group: Any, async_op: bool) -> Any:
    """One all_gather into one flat tensor (``all_gather_single`` where torch has it; looked up at call time)."""
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    return gather(output, local, group=group, async_op=async_op)


def _to(tensor: Tensor, device: torch.device, dtype: torch.dtype | None = None) -> Tensor:
    """``tensor.to(device, dtype)`` without the call when it would do nothing.

    Copies onto an accelerator are asynchronous; copies to the CPU block, since the caller may read them at once.
    """
    dtype = tensor.dtype if dtype is None else dtype
    if tensor.device == device and tensor.dtype == dtype:
        return tensor
    return tensor.to(device=device, dtype=dtype, non_blocking=device.type != "cpu")


def _copy_into(out: Tensor, source: Tensor) -> None:
    """``out.copy_(source)``, asynchronous only when ``out`` is on an accelerator (see :func:`_to`)."""
    out.copy_(source, non_blocking=out.device.type != "cpu")


def _host_to_device(values: list[int], device: torch.device) -> Tensor:
    """An int64 tensor of host values on ``device``, copied asynchronously (pinned source) off the CPU."""
    host = torch.tensor(values, dtype=torch.int64)
    if device.type == "cpu":
        return host
    return host.pin_memory().to(device, non_blocking=True)


class SyncHandle:
    """A fused sync or reduction in flight: ``wait()`` finishes it and returns its result.

    A sync with list states needs a second collective whose size depends on the first one's result (every rank's
    shapes). :meth:`launch_remaining` issues it (reading those shapes on the host); ``wait()`` does so first if it
    was not called. After :meth:`launch_remaining` the handle issues no collective: ``wait()`` only waits for the
    collectives already issued and finishes locally, so it may be called on some ranks only, or never.
    ``is_completed()`` stays ``False`` while a second collective remains to be issued.

    Example:
        >>> import torch
        >>> handle = reduce_sum({"n": torch.tensor(3)}, async_op=True)
        >>> handle.launch_remaining()  # nothing left to issue: one all_reduce at most
        >>> handle.is_completed(), handle.wait()
        (True, {'n': tensor(3)})
    """

    def __init__(
        self,
        finish: Callable[[], Any] | None,
        works: Iterable[Any] = (),
        launch: Callable[[], Iterable[Any]] | None = None,
    ) -> None:
        self._finish = finish
        self._works = [work for work in works if work is not None]
        #: issues the second phase (the collectives that depend on the first one's results); returns their works
        self._launch = launch
        self._result: Any = None
        self._error: BaseException | None = None

    @classmethod
    def completed(cls, result: Any) -> SyncHandle:
        """A handle for work that is already done.

        Args:
            result: what ``wait()`` returns.

        Returns:
            The handle.

        Example:
            >>> SyncHandle.completed({"a": 1}).wait()
            {'a': 1}
        """
        handle = cls(None)
        handle._result = result
        return handle

    def is_completed(self) -> bool:
        """Whether ``wait()`` would return without waiting for communication.

        Returns:
            ``True`` once every collective has completed and none remains to be launched.

        Example:
            >>> SyncHandle.completed(None).is_completed()
            True
        """
        if self._finish is None:
            return True
        return self._launch is None and all(work.is_completed() for work in self._works)

    def launch_remaining(self) -> None:
        """Issue every collective still to come, so that ``wait()`` only waits (call it on every rank).

        For a sync with list states this waits for the shape exchange and reads the shapes on the host (one host
        read; it returns once every rank has started the sync), then launches the data exchange. Otherwise it does
        nothing. Calling it again does nothing.

        Raises:
            Exception: whatever launching raised (a :class:`PlanMismatchError` on every rank), again on later calls.

        Example:
            >>> SyncHandle.completed(None).launch_remaining()
        """
        if self._error is not None:
            raise self._error
        launch, self._launch = self._launch, None
        if launch is None:
            return
        try:
            self._works.extend(work for work in launch() if work is not None)
        except BaseException as err:
            self._error = err
            self._finish = None
            raise

    def wait(self) -> Any:
        """Launch the second phase if not launched yet, wait for the collectives, and finish (once).

        Returns:
            The result: the reduced dict for the functional API, ``None`` for metric syncs.

        Raises:
            Exception: whatever launching or finishing raised (again on every later call).

        Example:
            >>> SyncHandle.completed(3).wait()
            3
        """
        self.launch_remaining()
        finish, self._finish = self._finish, None
        if finish is not None:
            try:
                self._result = finish()
            except BaseException as err:
                self._error = err
                raise
        return self._result


# --------------------------------------------------------------------------------------------------------------------
# all_reduce buckets
# --------------------------------------------------------------------------------------------------------------------


def _fusable(op: str, dtype: torch.dtype) -> bool:
    """Whether a reduction of ``dtype`` can run as an all_reduce with torch's result (else it errors in torch too)."""
    if op == "mean":
        return dtype.is_floating_point or dtype.is_complex
    if op in ("max", "min"):
        return not dtype.is_complex
    return True


def _reduced_dtype(op: str, dtype: torch.dtype) -> torch.dtype:
    """The dtype ``torch.<op>(stacked, dim=0)`` returns: ``torch.sum`` promotes integers and bools to int64."""
    if op == "sum" and not (dtype.is_floating_point or dtype.is_complex):
        return torch.int64
    return dtype


def _bucket_dtype(op: str, dtype: torch.dtype) -> torch.dtype:
    """The dtype a reduction travels in.

    Sub-32-bit floats travel in float32 (torch.sum/mean accumulate there, and the cast back is exact for max/min);
    int16 max/min in int32 (gloo has no int16 reductions; widening is exact).
    """
    if dtype.is_floating_point and dtype.itemsize < 4:
        return torch.float32
    if op in ("max", "min") and dtype == torch.int16:
        return torch.int32
    return dtype


class _Segment:
    __slots__ = ("device", "numel", "offset", "op", "out_dtype", "ride", "shape", "tensor", "token")

    def __init__(self, token: Any, tensor: Tensor, op: str) -> None:
        self.token = token
        #: how a bool max/min rides in a buffer of another dtype or op: None (it does not), "same" (0/1 reduced with
        #: its own op), "negated" (0/-1 reduced with the opposite op) or "count" (summed: how many ranks are true)
        self.ride: str | None = None
        self.tensor = tensor
        self.op = op
        self.out_dtype = _reduced_dtype(op, tensor.dtype)
        self.shape = tensor.shape
        self.device = tensor.device
        self.numel = tensor.numel()
        self.offset = 0


class _Bucket:
    """Tensors reduced by one ``all_reduce``: same collective device, same dtype, same reduce op."""

    def __init__(self, device: torch.device, dtype: torch.dtype, op: str) -> None:
        self.device = device
        self.dtype = dtype
        self.op = op
        self.segments: list[_Segment] = []
        self.buffer: Tensor | None = None
        self.work: Any = None
        #: the plan check riding at the end of the values (see :func:`_check_bits`), and its reduced verdict
        self.check: Tensor | None = None
        self.agree: Tensor | None = None

    @property
    def masks_nan(self) -> bool:
        # gloo's max/min drop a NaN or keep it depending on rank order; torch.max over a stack keeps it. The buffer
        # carries a NaN mask (reduced with the same op) so NaNs survive exactly where torchmetrics keeps them.
        return self.op in ("max", "min") and self.dtype.is_floating_point

    def pack(self) -> Tensor:
        """Flatten the segments into one buffer (means first, so one division covers them)."""
        self.segments.sort(key=lambda segment: segment.op != "mean")
        offset = 0
        for segment in self.segments:
            segment.offset = offset
            offset += segment.numel
        parts = [_part(segment, self.device, self.dtype) for segment in self.segments]
        if self.check is not None:
            parts.append(_to(self.check, self.device))
            offset += self.check.numel()
        buffer = torch.empty(offset * (2 if self.masks_nan else 1), dtype=self.dtype, device=self.device)
        values = buffer[:offset]
        if len(parts) == 1:
            values.copy_(parts[0])
        elif parts:
            torch.cat(parts, out=values)  # one kernel; casts into the bucket dtype
        if self.masks_nan:
            mask = buffer[offset:]
            mask.copy_(torch.isnan(values))
            if self.op == "min":
                mask.neg_()  # min over ranks of -isnan is -1 where any rank has a NaN
        self.buffer = buffer
        return buffer

    def launch(self, group: Any, async_op: bool) -> Any:
        self.work = dist.all_reduce(self.pack(), op=_REDUCE_OPS[self.op], group=group, async_op=async_op)
        return self.work

    def plan_agrees(self, world_size: int) -> Tensor:
        """Wait for the all_reduce; whether the plan check riding in it agrees on every rank (a 0-dim bool)."""
        if self.work is not None:
            self.work.wait()
            self.work = None
        total = sum(segment.numel for segment in self.segments)
        return _check_agrees(self.buffer[total : total + self.check.numel()], self.op, world_size)

    def finish(self, world_size: int) -> dict[Any, Tensor]:
        if self.work is not None:
            self.work.wait()
            self.work = None
        buffer = self.buffer
        total = sum(segment.numel for segment in self.segments)
        checked = total + (0 if self.check is None else self.check.numel())
        values = buffer[:total]
        if self.masks_nan:
            values.masked_fill_(buffer[checked:][:total] != 0, math.nan)
        if self.check is not None:
            self.agree = _check_agrees(buffer[total:checked], self.op, world_size)
        means = sum(segment.numel for segment in self.segments if segment.op == "mean")
        if means:
            values[:means].div_(world_size)
        reduced = {}
        for segment in self.segments:
            value = values[segment.offset : segment.offset + segment.numel].view(segment.shape)
            if segment.ride is not None:
                value = value == world_size if segment.ride == "count" and segment.op == "min" else value != 0
            reduced[segment.token] = _to(value, segment.device, segment.out_dtype)
        return reduced


_REDUCE_OPS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}


def _part(segment: _Segment, device: torch.device, dtype: torch.dtype) -> Tensor:
    """A segment's values, flat, on the bucket's device (negated when it rides with the opposite op)."""
    flat = _to(segment.tensor.detach().reshape(-1), device)
    return _to(flat, device, dtype).neg() if segment.ride == "negated" else flat


def _plan_buckets(
    items: Iterable[tuple[Any, Tensor, str]], group: Any, spare: torch.device | None = None
) -> tuple[list[_Bucket], list[_Segment]]:
    """Group ``(token, tensor, op)`` items into buckets, ordered by (device type, dtype, op) (the same on every rank).

    Returns the buckets, and the bool max/min segments on device ``spare`` that found no bucket to ride in: the
    caller carries them in the shape exchange of its gather on that device (``spare=None``: they get a buffer).
    """
    buckets: dict[tuple, _Bucket] = {}
    riders: list[tuple[_Segment, torch.device]] = []
    devices: dict[torch.device, torch.device] = {}
    for token, tensor, op in items:
        segment = _Segment(token, tensor, op)
        if tensor.device not in devices:
            devices[tensor.device] = collective_device(group, tensor.device)
        device = devices[tensor.device]
        if tensor.dtype == torch.bool and op in ("max", "min"):
            riders.append((segment, device))
            continue
        key = (device, _bucket_dtype(op, segment.out_dtype), _BUCKET_OP[op])
        if key not in buckets:
            buckets[key] = _Bucket(*key)
        buckets[key].segments.append(segment)
    leftovers = []
    for segment, device in riders:
        # 0 and 1 are exact in every real dtype: a bool max/min joins a buffer that is reduced anyway. In a max/min
        # buffer of the same op it is reduced as is; in a sum buffer it counts the ranks where it is true (any:
        # count > 0, all: count == world size); negated (0/-1) in a signed buffer of the opposite op, max(b) is
        # -min(-b). Only alone does it get a buffer of its own.
        candidates = [b for b in _canonical(buckets.values()) if b.device == device and not b.dtype.is_complex]
        ride, host = _ride(segment.op, candidates)
        if host is not None:
            segment.ride = ride
            host.segments.append(segment)
        elif device == spare:
            leftovers.append(segment)
        else:
            key = (device, torch.uint8, segment.op)
            if key not in buckets:
                buckets[key] = _Bucket(*key)
            buckets[key].segments.append(segment)
    # Launch order by (device type, dtype, op), not by first appearance: ranks whose plans differ only in order
    # still launch buckets of the same sizes, so the plan check (_start_state_sync) reports it instead of an abort.
    return _canonical(buckets.values()), leftovers


def _canonical(buckets: Iterable[_Bucket]) -> list[_Bucket]:
    """Buckets by (device type, dtype, op): an order that does not depend on the order of the metrics."""
    return sorted(buckets, key=lambda bucket: (bucket.device.type, str(bucket.dtype), bucket.op))


def _ride(op: str, candidates: list[_Bucket]) -> tuple[str | None, _Bucket | None]:
    """The first bucket a bool ``op`` segment can ride in, and how: same op, counted in a sum, or negated."""
    opposite = "min" if op == "max" else "max"
    for ride, bucket_op, signed_only in (("same", op, False), ("count", "sum", False), ("negated", opposite, True)):
        for bucket in candidates:
            if bucket.op == bucket_op and (bucket.dtype.is_signed or not signed_only):
                return ride, bucket
    return None, None


# --------------------------------------------------------------------------------------------------------------------
# The byte-packed gather: list states, stacked states, all_gather
# --------------------------------------------------------------------------------------------------------------------


def _row(dtype: torch.dtype, shape: tuple[int, ...]) -> list[int]:
    if len(shape) > MAX_GATHER_DIMS:
        raise ValueError(f"Cannot gather a {len(shape)}-dimensional tensor: at most {MAX_GATHER_DIMS} dimensions.")
    if dtype not in _DTYPE_CODE:
        raise TypeError(f"Cannot gather a tensor of dtype {dtype}.")
    return [_DTYPE_CODE[dtype], len(shape), *shape, *([0] * (MAX_GATHER_DIMS - len(shape)))]


def _decode(row: list[int]) -> tuple[torch.dtype, tuple[int, ...]] | None:
    if row[1] == _EMPTY:
        return None
    return _DTYPES[row[0]], tuple(row[2 : 2 + row[1]])


def _nbytes(described: tuple[torch.dtype, tuple[int, ...]] | None) -> int:
    if described is None:
        return 0
    dtype, shape = described
    return math.prod(shape) * dtype.itemsize


def _layout(described: list[tuple[torch.dtype, tuple[int, ...]] | None]) -> tuple[list[int], int]:
    """Byte offsets of each tensor in a rank's buffer, and the buffer's (aligned) length."""
    offsets, offset = [], 0
    for item in described:
        offsets.append(offset)
        offset += -(-_nbytes(item) // _ALIGN) * _ALIGN
    return offsets, offset


def _byte_view(buffer: Tensor, offset: int, dtype: torch.dtype, shape: tuple[int, ...]) -> Tensor:
    nbytes = math.prod(shape) * dtype.itemsize
    return buffer[offset : offset + nbytes].view(dtype).view(shape)


class _CatPieces:
    """A list state's elements: concatenated along dim 0 as ``dim_zero_cat`` does (0-dim elements become 1-D)."""

    __slots__ = ("pieces",)

    def __init__(self, pieces: list[Tensor]) -> None:
        self.pieces = [piece.unsqueeze(0) if piece.ndim == 0 else piece for piece in pieces]

    def describe(self) -> tuple[torch.dtype, tuple[int, ...]] | None:
        """The dtype and shape ``torch.cat`` gives, from metadata (meta-tensor ``cat`` would import torch._dynamo)."""
        if not self.pieces:
            return None
        dtype = functools.reduce(torch.promote_types, (piece.dtype for piece in self.pieces))
        # torch.cat skips 1-D empty tensors (legacy); the others must agree beyond dim 0.
        kept = [piece for piece in self.pieces if piece.shape != (0,)]
        if not kept:
            return dtype, (0,)
        trailing = kept[0].shape[1:]
        if any(piece.shape[1:] != trailing or piece.ndim != kept[0].ndim for piece in kept):
            torch.cat(self.pieces)  # raises torch's own error, as torchmetrics' dim_zero_cat would
        return dtype, (sum(piece.shape[0] for piece in kept), *trailing)

    def write(self, out: Tensor) -> Tensor | None:
        """Concatenate into ``out``; return the local concatenation when it carries autograd history."""
        if any(piece.requires_grad for piece in self.pieces):
            local = torch.cat(self.pieces)
            _copy_into(out, local.detach())
            return local
        if all(piece.device == out.device for piece in self.pieces):
            torch.cat(self.pieces, out=out)  # one copy, straight into the send buffer
        else:
            _copy_into(out, torch.cat(self.pieces))
        return None


class _Gather:
    """Byte-pack tensors and list states, exchange their dtypes and shapes, then their data: two all_gathers.

    Bool max/min segments without a bucket to ride in (``flags``) travel in the shape exchange, which every rank
    receives whole: they are reduced from it on the device, without a collective of their own.
    """

    def __init__(
        self,
        items: list[Tensor | _CatPieces],
        group: Any,
        device: torch.device,
        flags: list[_Segment] = (),
        checks: list[int] = (),
    ) -> None:
        self.group = group
        #: int64 values every rank sends after its rows and flags (the plan check); per rank once gathered
        self.checks = list(checks)
        self.gathered_checks: list[list[int]] = []
        self.device = device
        self.items = items
        self.flags = list(flags)
        self.described = [item.describe() if isinstance(item, _CatPieces) else _describe(item) for item in items]
        rows = [_row(*d) if d is not None else [_EMPTY] * 2 + [0] * MAX_GATHER_DIMS for d in self.described]
        offsets, total = _layout(self.described)
        # Pack now: the exchange sends the states as they are when the sync starts.
        self.local = torch.empty(total, dtype=torch.uint8, device=device)
        #: per item, the local value to put back in this rank's slot (autograd history, as torchmetrics keeps it)
        self.own: list[Tensor | None] = []
        for item, described, offset in zip(items, self.described, offsets, strict=True):
            if described is None:
                self.own.append(None)
                continue
            out = _byte_view(self.local, offset, *described)
            if isinstance(item, _CatPieces):
                self.own.append(item.write(out))
            else:
                _copy_into(out, item.detach())
                self.own.append(item)
        self.world_size = dist.get_world_size(group)
        self.meta_local = _host_to_device([value for row in rows for value in row], device)
        if self.flags:
            flags = [_to(flag.tensor.reshape(-1), device, torch.int64) for flag in self.flags]
            self.meta_local = torch.cat([self.meta_local, *flags])
        if self.checks:
            self.meta_local = torch.cat([self.meta_local, _host_to_device(self.checks, device)])
        self.meta = torch.empty(self.world_size * self.meta_local.numel(), dtype=torch.int64, device=device)
        self.work: Any = None

    def start(self, async_op: bool) -> Any:
        self.work = _all_gather_single(self.meta, self.meta_local, self.group, async_op)
        return self.work

    def shapes(self) -> list[list[tuple[torch.dtype, tuple[int, ...]] | None]]:
        """Per rank, per item: (dtype, shape), or ``None`` for a list state without elements. One host read."""
        if self.work is not None:
            self.work.wait()
            self.work = None
        width = len(self.items) * _ROW
        meta = self.meta.view(self.world_size, -1)
        if self.checks:  # the same host read brings the plan checks back
            meta = torch.cat([meta[:, :width], meta[:, meta.shape[1] - len(self.checks) :]], dim=1)
        rows = meta.tolist()
        self.gathered_checks = [rank_rows[width:] for rank_rows in rows]
        return [[_decode(rank_rows[i : i + _ROW]) for i in range(0, width, _ROW)] for rank_rows in rows]

    def reduced_flags(self) -> dict[Any, Tensor]:
        """The flags, reduced over ranks from the gathered shape exchange (device ops, no host read)."""
        end = self.meta_local.numel() - len(self.checks)
        columns = self.meta.view(self.world_size, -1)[:, len(self.items) * _ROW : end]
        reduced, offset = {}, 0
        for flag in self.flags:
            per_rank = columns[:, offset : offset + flag.numel]
            offset += flag.numel
            value = (per_rank.amax(0) if flag.op == "max" else per_rank.amin(0)) != 0
            reduced[flag.token] = _to(value.view(flag.shape), flag.device)
        return reduced

    def launch_data(self, described: list[list[tuple[torch.dtype, tuple[int, ...]] | None]], async_op: bool) -> Any:
        """Start the data exchange sized by ``described`` (from :meth:`shapes`); its work, or ``None``."""
        self.described = described
        self.layouts = [_layout(rank) for rank in described]
        longest = max(total for _, total in self.layouts)
        self.gathered: Tensor | None = None
        self.data_work: Any = None
        if longest == 0:
            return None
        local = self.local
        if local.numel() < longest:
            local = torch.empty(longest, dtype=torch.uint8, device=self.device)
            local[: self.local.numel()].copy_(self.local)
        self.sent = local  # alive until the exchange completes
        self.gathered = torch.empty(self.world_size * longest, dtype=torch.uint8, device=self.device)
        self.data_work = _all_gather_single(self.gathered, local, self.group, async_op)
        return self.data_work

    def data(self) -> list[list[Tensor | None]]:
        """Wait for the data exchange; per item, per rank, a view of that rank's tensor (``None`` where it had none)."""
        described = self.described
        if self.gathered is None:
            return [[None if d is None else _empty(d) for d in column] for column in zip(*described, strict=True)]
        if self.data_work is not None:
            self.data_work.wait()
            self.data_work = None
        gathered = self.gathered.view(self.world_size, -1)
        return [
            [
                None if d is None else _byte_view(gathered[rank], self.layouts[rank][0][index], *d)
                for rank, d in enumerate(column)
            ]
            for index, column in enumerate(zip(*described, strict=True))
        ]


def _describe(tensor: Tensor) -> tuple[torch.dtype, tuple[int, ...]]:
    return tensor.dtype, tuple(tensor.shape)


def _empty(described: tuple[torch.dtype, tuple[int, ...]]) -> Tensor:
    dtype, shape = described
    return torch.empty(shape, dtype=dtype)


def _gather_device(group: Any, tensors: Iterable[Tensor], default: torch.device | None = None) -> torch.device:
    """One buffer for the whole exchange: on the collective device of the first tensor's device."""
    first = next(iter(tensors), None)
    return collective_device(group, default if first is None else first.device)


# --------------------------------------------------------------------------------------------------------------------
# Functional API
# --------------------------------------------------------------------------------------------------------------------


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Number) and not isinstance(value, Tensor)


def _number_dtype(value: numbers.Number) -> torch.dtype:
    """The dtype ``torch.full((), value)`` gives (bool, int64, the default float or complex dtype)."""
    return torch.full((), value, device="meta").dtype


def _check_op(key: Any, op: Any, dtype: torch.dtype) -> str:
    if op not in OPS:
        raise ValueError(f"Unknown reduction {op!r} for key {key!r}: expected one of {', '.join(map(repr, OPS))}.")
    if not _fusable(op, dtype):
        if op == "mean":
            raise TypeError(
                f"Cannot reduce key {key!r} with 'mean': its dtype {dtype} is not floating point or complex (torch.mean"
                " refuses it too). Cast it to a float dtype, or reduce it with 'sum'."
            )
        raise TypeError(f"Cannot reduce key {key!r} with {op!r}: complex numbers have no order.")
    return op


def _reduce_dict(
    tensors: Mapping[Any, Any], ops: Callable[[Any], Any], group: Any, async_op: bool
) -> dict[Any, Any] | SyncHandle:
    if not isinstance(tensors, Mapping):
        raise TypeError(f"Expected a dict of tensors, got {type(tensors).__name__}.")
    numeric = {}
    for key, value in tensors.items():
        if isinstance(value, Tensor):
            numeric[key] = _check_op(key, ops(key), value.dtype)
        elif _is_number(value):
            numeric[key] = _check_op(key, ops(key), _number_dtype(value))
    if not numeric or not jit_distributed_available() or not _member(group):
        result = dict(tensors)
        return SyncHandle.completed(result) if async_op else result
    number_device = collective_device(group)
    items = [
        (key, value if isinstance(value, Tensor) else torch.full((), value, device=number_device), numeric[key])
        for key, value in tensors.items()
        if key in numeric
    ]
    buckets, _ = _plan_buckets(items, group)
    works = [bucket.launch(group, async_op) for bucket in buckets]
    world_size = dist.get_world_size(group)

    def finish() -> dict[Any, Any]:
        reduced: dict[Any, Tensor] = {}
        for bucket in buckets:
            reduced.update(bucket.finish(world_size))
        return {key: reduced.get(key, value) if key in numeric else value for key, value in tensors.items()}

    if async_op:
        return SyncHandle(finish, works)
    return finish()


def reduce_custom(
    tensors: Mapping[Any, Any],
    reduce_fn: Mapping[Any, str | None] | None = None,
    process_group: Any = None,
    async_op: bool = False,
) -> dict[Any, Any] | SyncHandle:
    """Reduce every value of a dict across ranks, each with its own op, with one ``all_reduce`` per bucket.

    Tensors of the same device, dtype and reduce op travel in one flattened buffer (``"mean"`` and ``"sum"`` share
    one: a mean is a sum divided by the world size). Results have the dtype ``torch.<op>`` over a stacked rank
    dimension gives: integer and bool sums are int64, max/min keep the dtype, a mean needs a floating-point (or
    complex) dtype and raises ``TypeError`` otherwise, as ``torch.mean`` does. Half-precision values are reduced in
    float32 and cast back. Every rank must pass the same keys with the same dtypes and shapes.

    Args:
        tensors: name -> tensor, Python number (becomes a 0-dim tensor, made by ``torch.full`` on the collective
            device) or anything else (returned unchanged).
        reduce_fn: name -> ``"mean"``, ``"sum"``, ``"max"``, ``"min"``; a missing name or ``None`` means ``"mean"``
            (as datarax). ``None``: ``"mean"`` for all.
        process_group: the group to reduce over (``None``: the default group).
        async_op: return a :class:`SyncHandle` whose ``wait()`` returns the dict.

    Returns:
        A new dict with the same keys, or a handle. Without an initialised process group, or on a rank outside
        ``process_group``, the values are returned unchanged (numbers stay numbers).

    Raises:
        ValueError: for an unknown op.
        TypeError: for a mean of integers or bools, or a max/min of complex numbers (also without a process group).

    Example:
        >>> import torch
        >>> reduce_custom({"loss": torch.tensor(0.25), "seen": torch.tensor(True)}, {"seen": "max"})
        {'loss': tensor(0.2500), 'seen': tensor(True)}
    """
    ops = dict(reduce_fn or {})
    return _reduce_dict(tensors, lambda key: ops.get(key) or "mean", process_group, async_op)


def reduce_mean(
    tensors: Mapping[Any, Any], process_group: Any = None, async_op: bool = False
) -> dict[Any, Any] | SyncHandle:
    """Mean over ranks of every tensor and number of a dict (floating point only), one ``all_reduce`` per bucket.

    Args:
        tensors: name -> tensor, number or anything else (passed through); see :func:`reduce_custom`.
        process_group: the group (``None``: the default group).
        async_op: return a :class:`SyncHandle`.

    Returns:
        The dict of means, or a handle.

    Example:
        >>> import torch
        >>> reduce_mean({"loss": torch.tensor([0.5, 1.5]), "lr": 0.1})
        {'loss': tensor([0.5000, 1.5000]), 'lr': 0.1}
    """
    return _reduce_dict(tensors, lambda key: "mean", process_group, async_op)


def reduce_sum(
    tensors: Mapping[Any, Any], process_group: Any = None, async_op: bool = False
) -> dict[Any, Any] | SyncHandle:
    """Sum over ranks of every tensor and number of a dict (integer sums are int64), one ``all_reduce`` per bucket.

    Args:
        tensors: name -> tensor, number or anything else (passed through); see :func:`reduce_custom`.
        process_group: the group (``None``: the default group).
        async_op: return a :class:`SyncHandle`.

    Returns:
        The dict of sums, or a handle.

    Example:
        >>> import torch
        >>> reduce_sum({"tokens": torch.tensor(128), "name": None})
        {'tokens': tensor(128), 'name': None}
    """
    return _reduce_dict(tensors, lambda key: "sum", process_group, async_op)


def reduce_max(
    tensors: Mapping[Any, Any], process_group: Any = None, async_op: bool = False
) -> dict[Any, Any] | SyncHandle:
    """Element-wise maximum over ranks of every tensor and number of a dict (NaN wins, as in ``torch.max``).

    Args:
        tensors: name -> tensor, number or anything else (passed through); see :func:`reduce_custom`.
        process_group: the group (``None``: the default group).
        async_op: return a :class:`SyncHandle`.

    Returns:
        The dict of maxima, or a handle.

    Example:
        >>> import torch
        >>> reduce_max({"peak_mem": torch.tensor([3.0, 4.0])})
        {'peak_mem': tensor([3., 4.])}
    """
    return _reduce_dict(tensors, lambda key: "max", process_group, async_op)


def reduce_min(
    tensors: Mapping[Any, Any], process_group: Any = None, async_op: bool = False
) -> dict[Any, Any] | SyncHandle:
    """Element-wise minimum over ranks of every tensor and number of a dict (NaN wins, as in ``torch.min``).

    Args:
        tensors: name -> tensor, number or anything else (passed through); see :func:`reduce_custom`.
        process_group: the group (``None``: the default group).
        async_op: return a :class:`SyncHandle`.

    Returns:
        The dict of minima, or a handle.

    Example:
        >>> reduce_min({"free_mem": 7})
        {'free_mem': 7}
    """
    return _reduce_dict(tensors, lambda key: "min", process_group, async_op)


def all_gather(
    tensors: Mapping[Any, Any], process_group: Any = None, async_op: bool = False
) -> dict[Any, Any] | SyncHandle:
    """Gather every tensor and number of a dict from all ranks, stacked: shape ``(world_size, *shape)``.

    Two collectives in all, whatever the number of keys: a small ``all_gather`` of every value's dtype and shape, then
    one ``all_gather`` of all the data, byte-packed. Exchanging shapes first makes a mismatch an error on every rank
    (a ``ValueError`` naming the key and each rank's shape or dtype) instead of a hang or garbage; ragged values
    belong in a metric list state, which :func:`sync_metrics` concatenates.

    Args:
        tensors: name -> tensor, Python number (a 0-dim tensor) or anything else (returned unchanged).
        process_group: the group (``None``: the default group).
        async_op: return a :class:`SyncHandle` whose ``wait()`` returns the dict.

    Returns:
        A new dict, or a handle. Without a process group (or outside ``process_group``) there is one rank: values
        come back stacked over it, shape ``(1, *shape)``, numbers as 1-element CPU tensors.

    Raises:
        ValueError: if a key has different shapes or dtypes on different ranks.

    Example:
        >>> import torch
        >>> all_gather({"loss": torch.tensor(0.5), "step": 3, "tag": "eval"})
        {'loss': tensor([0.5000]), 'step': tensor([3]), 'tag': 'eval'}
    """
    if not isinstance(tensors, Mapping):
        raise TypeError(f"Expected a dict of tensors, got {type(tensors).__name__}.")
    keys = [key for key, value in tensors.items() if isinstance(value, Tensor) or _is_number(value)]
    if not jit_distributed_available() or not _member(process_group):
        result = {
            key: value.unsqueeze(0) if isinstance(value, Tensor) else torch.full((1,), value) if key in keys else value
            for key, value in tensors.items()
        }
        return SyncHandle.completed(result) if async_op else result
    values = {key: tensors[key] for key in keys}
    device = _gather_device(process_group, (v for v in values.values() if isinstance(v, Tensor)))
    values = {key: v if isinstance(v, Tensor) else torch.full((), v, device=device) for key, v in values.items()}
    gather = _Gather(list(values.values()), process_group, device)
    works = [gather.start(async_op)] if keys else []

    def launch() -> list[Any]:
        described = gather.shapes()
        for index, key in enumerate(keys):
            column = [rank[index] for rank in described]
            if any(d != column[0] for d in column):
                per_rank = ", ".join(f"rank {r}: {tuple(d[1])} {d[0]}" for r, d in enumerate(column))
                raise ValueError(
                    f"all_gather: key {key!r} differs across ranks ({per_rank}); every rank must pass the same"
                    " shape and dtype."
                )
        return [gather.launch_data(described, async_op)]

    def finish() -> dict[Any, Any]:
        if not keys:
            return dict(tensors)
        gathered = gather.data()
        stacked = {
            key: _to(torch.stack(per_rank), values[key].device) for key, per_rank in zip(keys, gathered, strict=True)
        }
        return {key: stacked.get(key, value) for key, value in tensors.items()}

    handle = SyncHandle(finish, works, launch if keys else None)
    return handle if async_op else handle.wait()


# --------------------------------------------------------------------------------------------------------------------
# Metric states
# --------------------------------------------------------------------------------------------------------------------


def _collect_metrics(metrics: Any, into: dict[int, Metric]) -> dict[int, Metric]:
    if isinstance(metrics, _TorchMetricsCollection):
        for member in metrics.values(copy_state=False):  # links compute-group states, as its compute does
            _collect_metrics(member, into)
    elif isinstance(metrics, Metric):
        into.setdefault(id(metrics), metrics)
    elif isinstance(metrics, Mapping):
        for member in metrics.values():
            _collect_metrics(member, into)
    elif isinstance(metrics, (list, tuple)):
        for member in metrics:
            _collect_metrics(member, into)
    else:
        raise TypeError(f"Expected a Metric, a MetricCollection, or a dict/list of them; got {type(metrics).__name__}.")
    return into


def _fused_sync_dists() -> tuple[Callable, ...]:
    from torchmetrics_async.metric import SyncFreeMixin  # metric.py imports this module: resolve at call time

    return (Metric._sync_dist, SyncFreeMixin._sync_dist)


def _fusable_metric(metric: Metric) -> bool:
    """Whether ``metric.sync()`` would run the stock ``_sync_dist`` with the stock ``gather_all_tensors``."""
    return metric.dist_sync_fn in (None, gather_all_tensors) and type(metric)._sync_dist in _fused_sync_dists()


class _Entry:
    """One state to sync: the (metric, attribute) that holds it and how it is reduced."""

    __slots__ = ("attr", "fn", "metric", "value")

    def __init__(self, metric: Metric, attr: str, value: Any, fn: Callable | None) -> None:
        self.metric = metric
        self.attr = attr
        self.value = value
        self.fn = fn


def _announce_fallback(metric: Metric, attr: str, fn: Any) -> None:
    key = (type(metric).__qualname__, attr)
    if key not in _ANNOUNCED:
        _ANNOUNCED.add(key)
        rank_zero_warn(
            f"{type(metric).__name__}.{attr}: a list state reduced with {getattr(fn, '__name__', fn)!r} syncs through"
            " torchmetrics' gather_all_tensors (a barrier and gathers per element), not the fused sync.",
            UserWarning,
        )


# --------------------------------------------------------------------------------------------------------------------
# The plan check: every rank must have planned the same collectives
# --------------------------------------------------------------------------------------------------------------------

#: bits of the plan fingerprint that ride in an all_reduce bucket (each as a 0/1 pair, exact in every dtype and op)
CHECK_BITS = 32
_HASH_MASK = (1 << 62) - 1


def _fn_name(fn: Any) -> str:
    op = _STATE_OPS.get(fn)
    if op is not None:
        return op
    if fn is dim_zero_cat:
        return "cat"
    return "none" if fn is None else str(getattr(fn, "__qualname__", type(fn).__qualname__))


def _fingerprint(layout: Any) -> int:
    """A 62-bit hash of a plan layout (``repr`` of ints, strings and tuples: the same on every rank and process)."""
    digest = hashlib.blake2b(repr(layout).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & _HASH_MASK


def _check_bits(fingerprint: int) -> list[int]:
    """The low :data:`CHECK_BITS` bits of ``fingerprint``, then their complements."""
    bits = [(fingerprint >> bit) & 1 for bit in range(CHECK_BITS)]
    return bits + [1 - bit for bit in bits]


def _check_agrees(reduced: Tensor, op: str, world_size: int) -> Tensor:
    """Whether every rank sent the same bits (a 0-dim bool on the device; no host read).

    Summed, a bit agrees if 0 or all ranks set it; under max (min), a bit and its complement sum to 1 only if every
    rank sent the same bit.
    """
    bits, complements = reduced[:CHECK_BITS], reduced[CHECK_BITS:]
    if op == "sum":
        return ((bits == 0) | (bits == world_size)).all()
    return (bits + complements == 1).all()


class PlanMismatchError(RuntimeError):
    """The ranks planned different fused syncs: they do not sync the same metrics, in the same order, alike.

    Raised on every rank of the process group, before any state is changed.

    Example:
        >>> isinstance(PlanMismatchError("rank 0 and rank 1 differ"), RuntimeError)
        True
    """


def _mismatch(labels: list[str], differing: list[int] | None, per_rank: list[int] | None = None) -> PlanMismatchError:
    if differing:
        named = ", ".join(labels[i] if i < len(labels) else f"member {i}" for i in differing)
        where = f"member(s) at the same position differ: {named}"
    else:
        where = f"this rank syncs {', '.join(labels) or 'no metric'}"
    ranks = "" if per_rank is None else f" (plan fingerprints per rank: {', '.join(f'{v:#x}' for v in per_rank)})"
    return PlanMismatchError(
        f"torchmetrics-async fused sync: the ranks planned different syncs{ranks}; {where}. Every rank must sync the"
        " same metrics (same classes, options and state shapes), in the same order; torchmetrics would hang or fail"
        " here too."
    )


def _plan_entry(entry: _Entry, kind: str) -> tuple:
    value = entry.value
    if kind == "reduce" or (kind == "stack" and entry.fn is not dim_zero_cat):  # a concatenation may be ragged
        return entry.attr, kind, _fn_name(entry.fn), str(value.dtype), tuple(value.shape)
    return entry.attr, kind, _fn_name(entry.fn)


def _label(metric: Metric, labels: Mapping[int, str]) -> str:
    name = labels.get(id(metric))
    kind = type(metric).__name__
    return f"{name!r} ({kind})" if name is not None else kind


def _plan_states(
    metrics: list[Metric],
) -> tuple[list[tuple[int, Tensor, str]], list[_Entry], list[_Entry], dict[int, tuple[Metric, list[str]]], list[int]]:
    """Sort every state into all_reduce items, gathered entries and torchmetrics fallbacks; hash each member's layout.

    Returns ``(reduces, gathers, entries, fallbacks, member_hashes)``; a reduce item's token is its entry's index.
    """
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
            op = _STATE_OPS.get(fn)
            if isinstance(value, Tensor):
                # Autograd (a definition: torchmetrics' _enable_grad) keeps its history only through the stack.
                if op is not None and not getattr(metric, "_enable_grad", False) and _fusable(op, value.dtype):
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
    return reduces, gathers, entries, fallbacks, [_fingerprint(member) for member in layout]


def _start_state_sync(
    metrics: list[Metric],
    group: Any,
    async_op: bool,
    labels: Mapping[int, str] | None = None,
    verify: bool = False,
) -> SyncHandle:
    """Plan, pack and launch the first phase of a fused ``_sync_dist`` of ``metrics`` over ``group``.

    The plan (which states travel, in which buckets and order, their dtypes and shapes) is derived from what every
    rank shares: the metrics and their order, each state's reduction, dtype and shape (list states: only that they
    are lists; their lengths and shapes are exchanged). Never from local data: compute-group members that share state
    tensors on this rank send each their own (compute groups form from the data, so they differ between ranks).

    A fingerprint of the plan rides in the first collective: exact, in the shape exchange of list states, which is
    read anyway; otherwise as bits in the first all_reduce bucket, read on the host only if ``verify``. A mismatch
    raises :class:`PlanMismatchError` on every rank, before any state is set.
    """
    labels = labels or {}
    reduces, gathers, entries, fallbacks, member_hashes = _plan_states(metrics)
    fingerprint = _fingerprint(tuple(member_hashes))
    member_labels = [_label(metric, labels) for metric in metrics]

    items: list[Tensor | _CatPieces] = [
        _CatPieces(entry.value) if isinstance(entry.value, list) else entry.value for entry in gathers
    ]
    gather_device = None
    if gathers:
        tensors = [t for item in items for t in (item.pieces if isinstance(item, _CatPieces) else [item])]
        gather_device = _gather_device(group, tensors, gathers[0].metric.device)
    buckets, flags = _plan_buckets(reduces, group, spare=gather_device)
    if buckets and not gathers:
        buckets[0].check = _host_to_device(_check_bits(fingerprint), buckets[0].device)  # pinned, asynchronous
    works = [bucket.launch(group, async_op) for bucket in buckets]
    gather = None
    if gathers:
        gather = _Gather(items, group, gather_device, flags, checks=[fingerprint, *member_hashes])
        works.append(gather.start(async_op))
    world_size = dist.get_world_size(group)
    rank = dist.get_rank(group)

    def launch() -> list[Any]:
        """The second phase: every collective whose size or presence depends on the first phase's results."""
        works = []
        if gather is not None:
            described = gather.shapes()  # the one host read
            _verify_gathered(gather.gathered_checks, member_labels)
            works.append(gather.launch_data(described, async_op))
        elif fallbacks and verify and buckets and buckets[0].check is not None:
            # torchmetrics' own sync of the fallbacks must not start on mismatched plans: read the check first
            agrees = bool(buckets[0].plan_agrees(world_size))
            if not agrees:
                raise _mismatch(member_labels, None)
        for metric, attrs in fallbacks.values():  # blocking: torchmetrics' gathers, done by the time this returns
            _torchmetrics_sync_dist(metric, attrs, group)
        return works

    def finish() -> None:
        """Local: wait for the collectives issued, unpack, set the states."""
        results: dict[int, Any] = {}
        if gather is not None:
            gathered = gather.data()
            for entry, per_rank, own in zip(gathers, gathered, gather.own, strict=True):
                results[id(entry)] = _combine_gathered(entry, per_rank, own, rank)
            for token, value in gather.reduced_flags().items():
                results[id(entries[token])] = value
        reduced: dict[Any, Tensor] = {}
        for bucket in buckets:
            reduced.update(bucket.finish(world_size))
        if verify and buckets and buckets[0].agree is not None and not bool(buckets[0].agree):
            raise _mismatch(member_labels, None)
        for token, value in reduced.items():
            results[id(entries[token])] = value
        for entry in entries:
            setattr(entry.metric, entry.attr, results[id(entry)])

    return SyncHandle(finish, works, launch if gather is not None or fallbacks else None)


def _verify_gathered(per_rank: list[list[int]], labels: list[str]) -> None:
    """Raise :class:`PlanMismatchError` (on every rank: they all read the same values) unless all plans are equal."""
    if all(checks == per_rank[0] for checks in per_rank):
        return
    members = [row[1:] for row in per_rank]
    differing = [i for i in range(len(members[0])) if any(row[i] != members[0][i] for row in members)]
    raise _mismatch(labels, differing, [row[0] for row in per_rank])


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


def _resolve_group(metric: Metric, process_group: Any) -> Any:
    group = process_group or metric.process_group
    return dist.group.WORLD if group is None else group


def _by_group(metrics: Iterable[Metric], process_group: Any) -> list[tuple[Any, list[Metric]]]:
    """Metrics per process group, groups in first-appearance order (the same order on every rank)."""
    groups: dict[int, tuple[Any, list[Metric]]] = {}
    for metric in metrics:
        group = _resolve_group(metric, process_group)
        groups.setdefault(id(group), (group, []))[1].append(metric)
    return list(groups.values())


def sync_states(metrics: Any, process_group: Any = None, async_op: bool = False) -> SyncHandle | None:
    """Replace the states of one or many metrics by their reductions across ranks, all states fused.

    This is ``Metric._sync_dist`` for many metrics at once, with torchmetrics' results: reduced tensor states,
    list states concatenated in rank order (a rank without elements contributes nothing; multi-dimensional elements
    keep their trailing shape), ``None``/custom reductions applied to the stack of every rank's state. States of
    metrics on different process groups are synced per group. It sets states only; :func:`sync_metrics` also keeps
    the local states for ``unsync()``. List states with another reduction than ``"cat"`` use torchmetrics' own path.
    Without an initialised process group it does nothing.

    Args:
        metrics: a ``Metric``, a ``MetricCollection``, or a dict/list/tuple of them (nested).
        process_group: the group for all of them (``None``: each metric's ``process_group``, else the world).
        async_op: launch the first collectives and return a :class:`SyncHandle`; ``wait()`` finishes the sync.

    Returns:
        ``None``, or the handle.

    Example:
        >>> from torchmetrics_async import SumMetric
        >>> metric = SumMetric()
        >>> metric.update(2.0)
        >>> sync_states(metric)  # not distributed: one rank, nothing to exchange
        >>> metric.sum_value
        tensor(2.)
    """
    collected = list(_collect_metrics(metrics, {}).values())
    if not jit_distributed_available():
        return SyncHandle.completed(None) if async_op else None
    labels = _labels(metrics, {})
    handles = [
        _start_state_sync(members, group, async_op, labels)
        for group, members in _by_group(collected, process_group)
        if _member(group)
    ]
    if not async_op:
        for handle in handles:
            handle.wait()
        return None
    return _joined(handles)


def _joined(
    handles: list[SyncHandle], then: Callable[[], None] | None = None, communicate: Callable[[], None] | None = None
) -> SyncHandle:
    """One handle for several, launched and finished in order (the same order on every rank).

    ``communicate()`` runs after every handle's second phase is launched (it may issue blocking collectives);
    ``then()`` after every handle has finished (local work only).
    """

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


def _labels(metrics: Any, into: dict[int, str], prefix: str = "") -> dict[int, str]:
    """Names of the metrics in a (nested) collection or dict, for messages: ``id(metric) -> name``."""
    if isinstance(metrics, _TorchMetricsCollection):
        items: Iterable[tuple[Any, Any]] = metrics.items(keep_base=False, copy_state=False)
    elif isinstance(metrics, Mapping):
        items = metrics.items()
    elif isinstance(metrics, (list, tuple)):
        items = enumerate(metrics)
    else:
        return into
    for name, member in items:
        if isinstance(member, Metric) and not isinstance(member, _TorchMetricsCollection):
            into.setdefault(id(member), f"{prefix}{name}")
        else:
            _labels(member, into, f"{prefix}{name}.")
    return into


def _start_metric_sync(
    metrics: list[Metric],
    process_group: Any,
    async_op: bool,
    labels: Mapping[int, str] | None = None,
    verify: bool = False,
) -> SyncHandle:
    """``Metric.sync()`` of every metric, fused: cache the local states, sync, mark synced."""
    for metric in metrics:
        if metric._is_synced:
            raise TorchMetricsUserError(ALREADY_SYNCED_MESSAGE)
    fused = [metric for metric in metrics if _fusable_metric(metric)]
    others = [metric for metric in metrics if not _fusable_metric(metric)]
    for metric in fused:
        metric._cache = metric._copy_state_dict()
    handles = [
        _start_state_sync(members, group, async_op, labels, verify)
        for group, members in _by_group(fused, process_group)
        if _member(group)  # outside the group there is nothing to exchange: the local states stand
    ]

    def sync_others() -> None:
        for metric in others:  # a user's dist_sync_fn or a custom _sync_dist: torchmetrics' own (blocking) sync
            metric.sync(process_group=process_group)

    def mark_synced() -> None:
        for metric in fused:
            metric._is_synced = True

    return _joined(handles, mark_synced, sync_others if others else None)


def sync_metrics(metrics: Any, process_group: Any = None, async_op: bool = False) -> SyncHandle | None:
    """``Metric.sync()`` for one or many metrics, with all their states in one fused round of collectives.

    Each metric ends synced, as after ``metric.sync()``: its states are the reductions across ranks, its local states
    are kept, and ``metric.unsync()`` (or ``sync_context``) restores them. Metrics whose ``distributed_available_fn``
    says no are left alone, as ``sync()`` leaves them; a metric with its own ``dist_sync_fn`` or ``_sync_dist`` is
    synced by torchmetrics' ``sync()``, after the fused round. On a rank outside the process group a metric keeps its
    local states (torchmetrics fails there).

    Args:
        metrics: a ``Metric``, a ``MetricCollection``, or a dict/list/tuple of them (nested).
        process_group: the group for all of them (``None``: each metric's ``process_group``, else the world).
        async_op: launch the first collectives and return a :class:`SyncHandle`; the metrics are synced once
            ``wait()`` returns. Do not update them in between.

    Returns:
        ``None``, or the handle.

    Raises:
        TorchMetricsUserError: if a metric is synced already (as ``sync()`` raises), before any collective.

    Example:
        >>> import torch
        >>> from torchmetrics_async import MeanMetric
        >>> metric = MeanMetric()
        >>> metric.update(torch.tensor([1.0, 3.0]))
        >>> sync_metrics([metric])  # not distributed: nothing to do, as for metric.sync()
        >>> metric._is_synced, metric.compute()
        (False, tensor(2.))
    """
    collected = [
        metric
        for metric in _collect_metrics(metrics, {}).values()
        if callable(metric.distributed_available_fn) and metric.distributed_available_fn()
    ]
    if not collected:
        return SyncHandle.completed(None) if async_op else None
    # Waiting here anyway: also read the plan check of all_reduce-only plans (a host read; async callers skip it).
    handle = _start_metric_sync(collected, process_group, async_op, _labels(metrics, {}), verify=not async_op)
    if async_op:
        return handle
    handle.wait()
    return None


# --------------------------------------------------------------------------------------------------------------------
# MetricCollection: one fused sync per compute()
# --------------------------------------------------------------------------------------------------------------------


def _syncs_in_compute(metric: Metric) -> bool:
    """Whether ``metric.compute()`` would sync now, through the stock ``_sync_dist``: then it can be pre-synced."""
    return (
        has_stock_compute(metric)  # wrappers and compositions sync inside, or not at all
        # Not "no cached value": whether this rank updated since the last compute() is local data; a member with a
        # cached value takes part in the sync (its compute() returns the cache) so that every rank plans alike.
        and metric._to_sync
        and not metric._is_synced  # compute() raises "already synced": let it
        and _fusable_metric(metric)
        and callable(metric.distributed_available_fn)
        and bool(metric.distributed_available_fn())
    )


@contextlib.contextmanager
def sync_context(metrics: Any, process_group: Any = None) -> Iterator[None]:
    """Compute many metrics on states synced in one fused round: ``compute()`` inside the block does not sync again.

    On entry, every metric whose ``compute()`` would sync (``sync_on_compute``, distributed,
    torchmetrics' default ``dist_sync_fn``; not wrappers such as ``Running``, which sync inside) is synced, fused, as
    ``sync()`` syncs it, including a metric holding a cached value (whether a rank has one depends on its data;
    the plan must not), whose ``compute()`` then returns the cache. Inside, their ``compute()`` uses the synced states
    and restores the local ones afterwards, as torchmetrics' compute does; on exit every metric still synced is
    restored. Other metrics keep torchmetrics' behaviour. A ``MetricCollection`` from
    :func:`~torchmetrics_async.accelerate` does this in ``compute()``. If the ranks' plans differ (other metrics or
    another order), every rank raises :class:`PlanMismatchError` on entry.

    Args:
        metrics: a ``Metric``, a ``MetricCollection``, or a dict/list/tuple of them (nested).
        process_group: the group for all of them (``None``: each metric's ``process_group``, else the world).

    Yields:
        Nothing; compute inside the block.

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
    members = [metric for metric in _collect_metrics(metrics, {}).values() if _syncs_in_compute(metric)]
    previous = [(metric, metric._to_sync) for metric in members]
    try:
        if members:
            _start_metric_sync(members, process_group, False, _labels(metrics, {}), verify=True).wait()
        for metric in members:
            metric._to_sync = False  # compute() finds them synced and only unsyncs afterwards
        yield
    finally:
        for metric, to_sync in previous:
            metric._to_sync = to_sync
            if metric._is_synced and metric._should_unsync:  # not computed, or its compute raised before unsync
                metric.unsync()


class _FusedSyncCollection:
    """``compute()`` syncs every member that would sync in one fused round, then computes each on synced states."""

    # Compute groups form as torchmetrics forms them, accelerated and torchmetrics members mixed.
    _equal_metric_states = staticmethod(equal_metric_states)

    def update(self, *args: Any, **kwargs: Any) -> None:
        """Torchmetrics' collection update; inside ``torch.compile`` compute groups are neither formed nor checked.

        Forming the groups compares the members' states on the host (``allclose``): traced by ``torch.compile`` it
        would break the graph. Until the groups are formed (at the first update made outside compiled code), a
        compiled update updates every member, each on its own states, as torchmetrics does with
        ``compute_groups=False``: the same values. Once formed, compiled updates use the groups.

        Args:
            args: given to every member's ``update``.
            kwargs: filtered by each member's ``update`` signature.

        Example:
            >>> import torch, torchmetrics
            >>> collection = MetricCollection([torchmetrics.SumMetric()])
            >>> collection.update(torch.tensor(2.0))
            >>> collection.compute()
            {'SumMetric': tensor(2.)}
        """
        if torch.compiler.is_compiling() and not self._groups_checked:
            for metric in self._modules.values():
                metric.update(*args, **metric._filter_kwargs(**kwargs))
            return
        super().update(*args, **kwargs)

    def _compute_groups_create_state_ref(self, copy: bool = False) -> None:
        """torchmetrics' state sharing within compute groups; update counts are copied without a host read."""  # noqa: D403
        if not self._state_is_copy:
            for group in self._groups.values():
                first = getattr(self, group[0])
                for name in group[1:]:
                    member = getattr(self, name)
                    for state in first._defaults:
                        value = getattr(first, state)
                        setattr(member, state, deepcopy(value) if copy else value)
                    copy_update_count(first, member)
        self._state_is_copy = copy

    def compute(self) -> dict[str, Any]:
        """Sync all members together, compute each, restore their local states.

        Members whose ``compute()`` would not sync (``sync_on_compute=False``, a cached value, not distributed),
        wrappers that sync inside their own compute (``Running``...), and members with their own ``dist_sync_fn``
        keep torchmetrics' behaviour.

        Returns:
            The members' values, keyed as torchmetrics keys them.

        Example:
            >>> import torch
            >>> from torchmetrics_async import MeanMetric, SumMetric
            >>> collection = MetricCollection({"mean": MeanMetric(), "sum": SumMetric()})
            >>> collection.update(torch.tensor([1.0, 2.0]))
            >>> collection.compute()
            {'mean': tensor(1.5000), 'sum': tensor(3.)}
        """
        with sync_context(self):
            # sync_context linked the compute groups' states before the sync, as torchmetrics links them before its
            # members compute (and sync one by one). Linking again now would hand the first member's *synced* states
            # to the others: on a rank where a group formed from the data, they would compute another rank's values.
            groups, self._groups = self._groups, {}
            try:
                return super().compute()
            finally:
                self._groups = groups

    def reset(self) -> None:
        """Reset every member, then raise the first deferred error a member's ``reset()`` reported.

        torchmetrics' loop would stop at the first member that raises and leave the others holding the old window.

        Raises:
            RuntimeError: the first deferred error that a member's ``compute()`` had not reported.

        Example:
            >>> import torch
            >>> from torchmetrics_async import MeanMetric, SumMetric
            >>> collection = MetricCollection({"mean": MeanMetric(nan_strategy="error"), "sum": SumMetric()})
            >>> collection.update(torch.tensor([1.0, float("nan")]))
            >>> try:
            ...     collection.reset()
            ... except RuntimeError as err:
            ...     print(err)
            Encountered `nan` values in tensor (torchmetrics-async: first recorded in update 1 of this window)
            >>> collection["sum"].update_count
            0
        """
        first: RuntimeError | None = None
        for metric in self.values(copy_state=False):
            try:
                metric.reset()
            except RuntimeError as err:
                first = first or err
        if self._enable_compute_groups and self._groups_checked:
            self._compute_groups_create_state_ref()  # as torchmetrics' reset: re-link the groups' states
        if first is not None:
            raise first


class MetricCollection(_FusedSyncCollection, _TorchMetricsCollection):
    """torchmetrics' ``MetricCollection`` whose ``compute()`` syncs all members in one fused round of collectives.

    ``accelerate(collection)`` turns a torchmetrics collection into this class in place.

    Example:
        >>> import torch, torchmetrics
        >>> collection = MetricCollection([torchmetrics.MaxMetric(), torchmetrics.MinMetric()])
        >>> collection.update(torch.tensor([1.0, 5.0]))
        >>> collection.compute()
        {'MaxMetric': tensor(5.), 'MinMetric': tensor(1.)}
    """


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
    """The class with a fused-sync ``compute()`` for a ``MetricCollection`` class (a user subclass keeps its code).

    Args:
        cls: ``torchmetrics.MetricCollection`` or a subclass.

    Returns:
        :class:`MetricCollection` for torchmetrics' class, ``cls`` if it fuses already, else a subclass of ``cls``
        (same name, created once, picklable).

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
