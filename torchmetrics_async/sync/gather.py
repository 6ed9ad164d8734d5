"""The byte-packed gather: list states, stacked states and ``all_gather`` values in two collectives.

Every rank first exchanges a fixed-size row per tensor (dtype code, ndim, shape; read on the host), then all data in
one buffer, byte-packed with aligned segments and padded to the longest rank.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from torchmetrics_async.sync.buckets import _Segment
from torchmetrics_async.sync.collectives import _all_gather_single, _copy_into, _host_to_device, _to, collective_device

__all__ = ["MAX_GATHER_DIMS"]

# Segments of the gathered byte buffer start at multiples of this, so every slice can be viewed as any dtype.
_ALIGN = 16
# Dimensions a gathered tensor may have: the shape exchange has a fixed row per tensor, the same on every rank.
MAX_GATHER_DIMS = 8
_ROW = 2 + MAX_GATHER_DIMS
_EMPTY = -1  # dtype code and ndim of a list state with no elements on a rank
# dtype codes of the shape exchange (an index into this tuple: the same on every rank).
_DTYPES = tuple(
    getattr(torch, name)
    for name in (
        "float32", "float64", "float16", "bfloat16", "complex64", "complex128", "complex32", "bool", "uint8", "int8",
        "int16", "int32", "int64", "uint16", "uint32", "uint64", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz",
        "float8_e5m2fnuz",
    )
)  # fmt: skip
_DTYPE_CODE = {dtype: code for code, dtype in enumerate(_DTYPES)}


def _row(dtype: torch.dtype, shape: tuple[int, ...]) -> list[int]:
    if len(shape) > MAX_GATHER_DIMS:
        raise ValueError(f"Cannot gather a {len(shape)}-dimensional tensor: at most {MAX_GATHER_DIMS} dimensions.")
    if dtype not in _DTYPE_CODE:
        raise TypeError(f"Cannot gather a tensor of dtype {dtype}.")
    return [_DTYPE_CODE[dtype], len(shape), *shape, *([0] * (MAX_GATHER_DIMS - len(shape)))]


def _decode(row: list[int]) -> tuple[torch.dtype, tuple[int, ...]] | None:
    return None if row[1] == _EMPTY else (_DTYPES[row[0]], tuple(row[2 : 2 + row[1]]))


def _nbytes(described: tuple[torch.dtype, tuple[int, ...]] | None) -> int:
    return 0 if described is None else math.prod(described[1]) * described[0].itemsize


def _layout(described: list[tuple[torch.dtype, tuple[int, ...]] | None]) -> tuple[list[int], int]:
    """Byte offsets of each tensor in a rank's buffer, and the buffer's (aligned) length."""
    offsets, offset = [], 0
    for item in described:
        offsets.append(offset)
        offset += -(-_nbytes(item) // _ALIGN) * _ALIGN
    return offsets, offset


def _byte_view(buffer: Tensor, offset: int, dtype: torch.dtype, shape: tuple[int, ...]) -> Tensor:
    return buffer[offset : offset + _nbytes((dtype, shape))].view(dtype).view(shape)


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
        history = any(piece.requires_grad for piece in self.pieces)
        if not history and all(piece.device == out.device for piece in self.pieces):
            torch.cat(self.pieces, out=out)  # one copy, straight into the send buffer
            return None
        local = torch.cat(self.pieces)
        _copy_into(out, local.detach())
        return local if history else None


class _Gather:
    """Byte-pack tensors and list states, exchange their dtypes and shapes, then their data: two all_gathers.

    Bool max/min segments without a bucket to ride in (``flags``) travel in the shape exchange, reduced on the device.
    """

    def __init__(
        self, items: list[Tensor | _CatPieces], group: Any, device: torch.device, flags: list[_Segment] = ()
    ) -> None:
        self.group = group
        self.device = device
        self.items = items
        self.flags = list(flags)
        self.described = [
            item.describe() if isinstance(item, _CatPieces) else (item.dtype, tuple(item.shape)) for item in items
        ]
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
        rows = self.meta.view(self.world_size, -1)[:, :width].tolist()
        return [[_decode(rank_rows[i : i + _ROW]) for i in range(0, width, _ROW)] for rank_rows in rows]

    def reduced_flags(self) -> dict[Any, Tensor]:
        """The flags, reduced over ranks from the gathered shape exchange (device ops, no host read)."""
        columns = self.meta.view(self.world_size, -1)[:, len(self.items) * _ROW :]
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
            return [
                [None if d is None else torch.empty(d[1], dtype=d[0]) for d in column]
                for column in zip(*described, strict=True)
            ]
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


def _gather_device(group: Any, tensors: Iterable[Tensor], default: torch.device | None = None) -> torch.device:
    """One buffer for the whole exchange: on the collective device of the first tensor's device."""
    first = next(iter(tensors), None)
    return collective_device(group, default if first is None else first.device)
