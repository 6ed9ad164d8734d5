"""Host-sync detection for tests and benchmarks.

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

The package: :mod:`~torchmetrics_async.testing.events` (what a sync is reported as),
:mod:`~torchmetrics_async.testing.host_sync` (the detector and its contexts) and
:mod:`~torchmetrics_async.testing.collectives` (:func:`count_collectives`).
"""

from torchmetrics_async.testing.collectives import COLLECTIVES, CollectiveCounter, count_collectives
from torchmetrics_async.testing.events import HostSyncCounter, HostSyncError, HostSyncEvent
from torchmetrics_async.testing.host_sync import count_host_syncs, no_host_sync

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
