"""A window's results and deferred flags, byte-packed into one buffer and read by the host in one copy."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch
from torch import Tensor

from torchmetrics_async.collector.streams import StreamOps
from torchmetrics_async.sync.gather import _DTYPES


def _tensor_leaves(tree: Any, into: list[Tensor]) -> list[Tensor]:
    if isinstance(tree, Tensor):
        into.append(tree)
    elif isinstance(tree, Mapping):
        for value in tree.values():
            _tensor_leaves(value, into)
    elif isinstance(tree, (list, tuple)):
        for value in tree:
            _tensor_leaves(value, into)
    return into


def _to_python(tree: Any, values: Iterator[Any]) -> Any:
    """The tree with each tensor replaced by the next host value (``float|int|bool`` or nested lists)."""
    if isinstance(tree, Tensor):
        return next(values)
    if isinstance(tree, Mapping):
        return {key: _to_python(value, values) for key, value in tree.items()}
    if isinstance(tree, (list, tuple)):
        items = [_to_python(value, values) for value in tree]
        return type(tree)(*items) if hasattr(tree, "_fields") else type(tree)(items)  # a named tuple takes fields
    return tree


def _numpy_dtype(dtype: torch.dtype) -> np.dtype | None:
    with warnings.catch_warnings(), contextlib.suppress(TypeError, RuntimeError):
        warnings.simplefilter("ignore")  # complex32 is "experimental"
        return torch.empty(0, dtype=dtype).numpy().dtype
    return None


# Computed once at import, outside any host-sync detector.
_NUMPY_DTYPES = {dtype: numpy for dtype in _DTYPES if (numpy := _numpy_dtype(dtype)) is not None}


def _wire_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a result travels in: its own if numpy has it, else a wider one that holds it exactly."""
    if dtype in _NUMPY_DTYPES:
        return dtype
    if dtype.is_complex:
        return torch.complex64  # complex32
    return torch.float32  # bfloat16, the float8 types: exact in float32 (Python floats from either are equal)


class _Transfer:
    """Every tensor of a window byte-packed into one buffer per device, copied to the host once, read once."""

    def __init__(self, tensors: list[Tensor], ops: StreamOps | None) -> None:
        #: per tensor: (group, byte offset, byte length, numpy dtype, shape)
        self.layout: list[tuple[int, int, int, np.dtype, tuple[int, ...]]] = []
        groups: dict[torch.device, tuple[int, list[Tensor], list[int]]] = {}
        for tensor in tensors:
            value = tensor.detach()
            wire = _wire_dtype(value.dtype)
            if wire != value.dtype:
                value = value.to(wire)
            index, pieces, length = groups.setdefault(value.device, (len(groups), [], [0]))
            data = value.reshape(-1).contiguous().view(torch.uint8)
            self.layout.append((index, length[0], data.numel(), _NUMPY_DTYPES[wire], tuple(value.shape)))
            pieces.append(data)
            length[0] += data.numel()
        self.device_buffers: list[Tensor] = []  # alive until the host has synchronized on the copies
        self.hosts: list[Tensor] = []
        for _, pieces, _ in groups.values():
            buffer = pieces[0] if len(pieces) == 1 else torch.cat(pieces)  # one kernel for the whole window
            self.device_buffers.append(buffer)
            self.hosts.append(buffer if ops is None else ops.to_host(buffer))

    def values(self) -> list[Any]:
        """Host values in the original order: one read of each host buffer; call after synchronizing."""
        arrays = [host.numpy() for host in self.hosts]  # the read (numpy shares the host memory)
        return [
            arrays[group][offset : offset + nbytes].view(dtype).reshape(shape).tolist()
            for group, offset, nbytes, dtype, shape in self.layout
        ]
