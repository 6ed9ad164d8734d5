"""The functional API on dicts: ``reduce_mean/sum/max/min/custom`` and ``all_gather``, fused per bucket."""

from __future__ import annotations

import numbers
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from torchmetrics_async._torchmetrics import jit_distributed_available
from torchmetrics_async.reductions import OPS, fusable
from torchmetrics_async.sync.buckets import _plan_buckets
from torchmetrics_async.sync.collectives import SyncHandle, _member, _to, collective_device
from torchmetrics_async.sync.gather import _Gather, _gather_device

__all__ = ["all_gather", "reduce_custom", "reduce_max", "reduce_mean", "reduce_min", "reduce_sum"]


def _numeric_keys(tensors: Mapping[Any, Any]) -> list[Any]:
    """The keys of the values that travel: tensors and numbers."""
    if not isinstance(tensors, Mapping):
        raise TypeError(f"Expected a dict of tensors, got {type(tensors).__name__}.")
    return [key for key, value in tensors.items() if isinstance(value, (Tensor, numbers.Number))]


def _check_op(key: Any, op: Any, dtype: torch.dtype) -> str:
    if op not in OPS:
        raise ValueError(f"Unknown reduction {op!r} for key {key!r}: expected one of {', '.join(map(repr, OPS))}.")
    if not fusable(op, dtype):
        if op == "mean":
            raise TypeError(
                f"Cannot reduce key {key!r} with 'mean': its dtype {dtype} is not floating point or complex (torch.mean"
                " refuses it too). Cast it to a float dtype, or reduce it with 'sum'."
            )
        raise TypeError(f"Cannot reduce key {key!r} with {op!r}: complex numbers have no order.")
    return op


def _reduce_dict(tensors: Mapping, ops: Callable, group: Any, async_op: bool) -> dict[Any, Any] | SyncHandle:
    numeric = {}
    for key in _numeric_keys(tensors):
        value = tensors[key]  # a number: the dtype of the tensor it becomes
        dtype = value.dtype if isinstance(value, Tensor) else torch.full((), value, device="meta").dtype
        numeric[key] = _check_op(key, ops(key), dtype)
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

    handle = SyncHandle(finish, works)
    return handle if async_op else handle.wait()


def reduce_custom(
    tensors: Mapping,
    reduce_fn: Mapping[Any, str | None] | None = None,
    process_group: Any = None,
    async_op: bool = False,
) -> dict[Any, Any] | SyncHandle:
    """Reduce every value of a dict across ranks, each with its own op, with one ``all_reduce`` per bucket.

    ``reduce_fn`` maps a key to ``"mean"`` (the default), ``"sum"``, ``"max"`` or ``"min"``. Numbers become 0-dim
    tensors, other values pass through; without a process group the values come back unchanged. Result dtypes are
    ``torch.<op>``'s over a stacked rank dimension. ``async_op=True`` returns a :class:`SyncHandle`.

    Example:
        >>> import torch
        >>> reduce_custom({"loss": torch.tensor(0.25), "seen": torch.tensor(True)}, {"seen": "max"})
        {'loss': tensor(0.2500), 'seen': tensor(True)}
    """
    ops = dict(reduce_fn or {})
    return _reduce_dict(tensors, lambda key: ops.get(key) or "mean", process_group, async_op)


def reduce_mean(tensors: Mapping, process_group: Any = None, async_op: bool = False) -> dict[Any, Any] | SyncHandle:
    """Mean over ranks of every tensor and number of a dict (floating point only); see :func:`reduce_custom`.

    Example:
        >>> import torch
        >>> reduce_mean({"loss": torch.tensor([0.5, 1.5]), "lr": 0.1})
        {'loss': tensor([0.5000, 1.5000]), 'lr': 0.1}
    """
    return _reduce_dict(tensors, lambda key: "mean", process_group, async_op)


def reduce_sum(tensors: Mapping, process_group: Any = None, async_op: bool = False) -> dict[Any, Any] | SyncHandle:
    """Sum over ranks of every tensor and number of a dict (integer sums are int64); see :func:`reduce_custom`.

    Example:
        >>> import torch
        >>> reduce_sum({"tokens": torch.tensor(128), "name": None})
        {'tokens': tensor(128), 'name': None}
    """
    return _reduce_dict(tensors, lambda key: "sum", process_group, async_op)


def reduce_max(tensors: Mapping, process_group: Any = None, async_op: bool = False) -> dict[Any, Any] | SyncHandle:
    """Element-wise maximum over ranks of every tensor and number of a dict (NaN wins, as in ``torch.max``).

    Example:
        >>> import torch
        >>> reduce_max({"peak_mem": torch.tensor([3.0, 4.0])})
        {'peak_mem': tensor([3., 4.])}
    """
    return _reduce_dict(tensors, lambda key: "max", process_group, async_op)


def reduce_min(tensors: Mapping, process_group: Any = None, async_op: bool = False) -> dict[Any, Any] | SyncHandle:
    """Element-wise minimum over ranks of every tensor and number of a dict (NaN wins, as in ``torch.min``).

    Example:
        >>> reduce_min({"free_mem": 7})
        {'free_mem': 7}
    """
    return _reduce_dict(tensors, lambda key: "min", process_group, async_op)


def all_gather(tensors: Mapping, process_group: Any = None, async_op: bool = False) -> dict[Any, Any] | SyncHandle:
    """Gather every tensor and number of a dict from all ranks, stacked: shape ``(world_size, *shape)``.

    Two collectives: every value's dtype and shape (a mismatch is a ``ValueError`` on every rank), then the data.

    Example:
        >>> import torch
        >>> all_gather({"loss": torch.tensor(0.5), "step": 3, "tag": "eval"})
        {'loss': tensor([0.5000]), 'step': tensor([3]), 'tag': 'eval'}
    """
    keys = _numeric_keys(tensors)
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
