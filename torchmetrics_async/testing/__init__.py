"""Host-sync detection for tests and benchmarks: :func:`no_host_sync` raises, :func:`count_host_syncs` counts.

A host sync is any point where the CPU waits for the accelerator (host reads, data-dependent shapes, blocking copies,
barriers, ``synchronize()``). On CUDA the contexts also drive ``torch.cuda.set_sync_debug_mode``; elsewhere any device
but the CPU (``meta`` in tests) stands for the accelerator. Contexts nest: every active counter counts, and the
innermost context decides whether a sync raises.

Example:
    >>> import torch
    >>> x = torch.tensor([1.0, float("nan"), 3.0])
    >>> with no_host_sync():
    ...     total = torch.where(x.isnan(), 0.0, x).sum()  # stays on the device
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
