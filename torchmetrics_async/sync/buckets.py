"""all_reduce buckets: every tensor of one (collective device, dtype, reduce op) flattened into one buffer.

The plan follows only what every rank shares (devices, dtypes, ops, shapes), in a canonical order.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from torchmetrics_async.reductions import BUCKET_OP, REDUCE_OPS
from torchmetrics_async.sync.collectives import _to, collective_device

__all__ = ["bucket_layout", "ride_value"]


def _reduced_dtype(op: str, dtype: torch.dtype) -> torch.dtype:
    """The dtype ``torch.<op>(stacked, dim=0)`` returns: ``torch.sum`` promotes integers and bools to int64."""
    if op == "sum" and not (dtype.is_floating_point or dtype.is_complex):
        return torch.int64
    return dtype


def _bucket_dtype(op: str, dtype: torch.dtype) -> torch.dtype:
    """The dtype a reduction travels in: sub-32-bit floats in float32, int16 max/min in int32 (gloo has none)."""
    if dtype.is_floating_point and dtype.itemsize < 4:
        return torch.float32
    if op in ("max", "min") and dtype == torch.int16:
        return torch.int32
    return dtype


class _Segment:
    __slots__ = ("device", "numel", "offset", "op", "out_dtype", "ride", "shape", "tensor", "token")

    def __init__(self, token: Any, tensor: Tensor, op: str, ride: str | None = None) -> None:
        self.token = token
        #: how a bool max/min rides in a buffer of another dtype or op: None (it does not), "same" (0/1 reduced with
        #: its own op), "negated" (0/-1 reduced with the opposite op) or "count" (summed: how many ranks are true)
        self.ride = ride
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
        #: words reduced after the values (and NaN mask), not part of any segment: the plan check's rows riding along
        self.tail: Tensor | None = None

    @property
    def masks_nan(self) -> bool:
        # gloo's max/min may drop a NaN (torch.max over a stack keeps it): the buffer carries a NaN mask.
        return self.op in ("max", "min") and self.dtype.is_floating_point

    def pack(self) -> Tensor:
        """Flatten the segments into one buffer (means first, so one division covers them)."""
        self.segments.sort(key=lambda segment: segment.op != "mean")
        offset = 0
        for segment in self.segments:
            segment.offset = offset
            offset += segment.numel
        parts = [_part(segment, self.device, self.dtype) for segment in self.segments]
        extra = 0 if self.tail is None else self.tail.numel()
        buffer = torch.empty(offset * (2 if self.masks_nan else 1) + extra, dtype=self.dtype, device=self.device)
        values = buffer[:offset]
        if extra:
            buffer[-extra:].copy_(self.tail)
        if len(parts) == 1:
            values.copy_(parts[0])
        elif parts:
            torch.cat(parts, out=values)  # one kernel; casts into the bucket dtype
        self.buffer = buffer
        if self.masks_nan:
            self.mask_nan()
        return buffer

    def mask_nan(self) -> None:
        """Write the NaN mask after the packed values (see :attr:`masks_nan`)."""
        total = self.numel
        mask = self.buffer[total : 2 * total]
        mask.copy_(torch.isnan(self.buffer[:total]))
        if self.op == "min":
            mask.neg_()  # min over ranks of -isnan is -1 where any rank has a NaN

    def launch(self, group: Any, async_op: bool) -> Any:
        """All-reduce the buffer (packed now unless :meth:`pack` was called already)."""
        buffer = self.pack() if self.buffer is None else self.buffer
        self.work = dist.all_reduce(buffer, op=REDUCE_OPS[self.op], group=group, async_op=async_op)
        return self.work

    def tail_view(self) -> Tensor:
        """The (reduced, once finished) :attr:`tail` in the buffer."""
        return self.buffer[self.buffer.numel() - self.tail.numel() :]

    @property
    def numel(self) -> int:
        """Values in the buffer (without the NaN mask)."""
        return sum(segment.numel for segment in self.segments)

    def finish(self, world_size: int) -> dict[Any, Tensor]:
        if self.work is not None:
            self.work.wait()
            self.work = None
        total = self.numel
        means = sum(segment.numel for segment in self.segments if segment.op == "mean")
        values = self.buffer[:total]
        if self.masks_nan:
            values.masked_fill_(self.buffer[total : 2 * total] != 0, math.nan)
        if means:
            values[:means].div_(world_size)
        reduced = {}
        for segment in self.segments:
            value = values[segment.offset : segment.offset + segment.numel].view(segment.shape)
            if segment.ride is not None:
                value = ride_value(segment, value, world_size)
            reduced[segment.token] = _to(value, segment.device, segment.out_dtype)
        return reduced


def ride_value(segment: _Segment, value: Tensor, world_size: int) -> Tensor:
    """A bool flag that rode in another buffer, back from its reduced values (see ``_Segment.ride``)."""
    return value == world_size if segment.ride == "count" and segment.op == "min" else value != 0


def _part(segment: _Segment, device: torch.device, dtype: torch.dtype) -> Tensor:
    """A segment's values, flat, on the bucket's device (negated when it rides with the opposite op)."""
    flat = _to(segment.tensor.detach().reshape(-1), device)
    return _to(flat, device, dtype).neg() if segment.ride == "negated" else flat


def _plan_buckets(
    items: Iterable[tuple[Any, Tensor, str]], group: Any, spare: torch.device | None = None
) -> tuple[list[_Bucket], list[_Segment]]:
    """Group ``(token, tensor, op)`` items into buckets in canonical order; return them and the unplaced bool riders.

    Bool max/min segments on device ``spare`` that found no bucket to ride in are returned for the caller's gather to
    carry (``spare=None``: they get a buffer).
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
        key = (device, _bucket_dtype(op, segment.out_dtype), BUCKET_OP[op])
        if key not in buckets:
            buckets[key] = _Bucket(*key)
        buckets[key].segments.append(segment)
    leftovers = []
    for segment, device in riders:
        # 0 and 1 are exact in every real dtype: a bool max/min rides in a buffer reduced anyway (see _Segment.ride).
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
    return _canonical(buckets.values()), leftovers


def bucket_layout(buckets: Iterable[_Bucket]) -> tuple:
    """What every rank's buckets must agree on, for the plan check: device type, dtype, op and size of each."""
    return tuple((bucket.device.type, str(bucket.dtype), bucket.op, bucket.numel) for bucket in buckets)


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
