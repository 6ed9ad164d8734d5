"""Host-sync detection for tests and benchmarks: :func:`no_host_sync` raises, :func:`count_host_syncs` counts.

A host sync is any point where the CPU waits for the accelerator (host reads, data-dependent shapes, blocking copies,
barriers, ``synchronize()``; the list is in ``docs/design.md``). On CUDA the contexts also drive
``torch.cuda.set_sync_debug_mode``; on a CPU-only machine a ``TorchDispatchMode`` and a few patched entry points catch
the same mistakes, with any device other than the CPU (``meta`` in tests) standing for the accelerator. Contexts nest:
every active counter counts, and the innermost context decides whether a sync raises.

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
