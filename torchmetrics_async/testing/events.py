"""What the host-sync detector reports: the reasons, one sync (:class:`HostSyncEvent`), the error and the counts."""

from __future__ import annotations

import collections
import dataclasses

__all__ = [
    "BARRIER",
    "CUDA_SYNC",
    "DATA_DEPENDENT_SHAPE",
    "DEVICE_TO_HOST",
    "EXPLICIT_SYNCHRONIZE",
    "HOST_READ",
    "HOST_TO_DEVICE",
    "PAGEABLE_COPY",
    "HostSyncCounter",
    "HostSyncError",
    "HostSyncEvent",
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


@dataclasses.dataclass(frozen=True)
class HostSyncEvent:
    """One host sync: the op (``"aten.nonzero"``...), its reason, and the user frame (outside torch and this package).

    Example:
        >>> str(HostSyncEvent("Tensor.item", "host read", "train.py", 3, "step", "loss.item()"))
        'Tensor.item (host read) at train.py:3 in step: loss.item()'
    """

    op: str
    reason: str
    filename: str = "<unknown>"
    lineno: int = 0
    function: str = "<unknown>"
    source: str = ""

    @property
    def location(self) -> str:
        """``file:line in function: source`` of the code that triggered the sync."""
        return f"{self.filename}:{self.lineno} in {self.function}: {self.source}"

    def __str__(self) -> str:
        return f"{self.op} ({self.reason}) at {self.location}"


class HostSyncError(RuntimeError):
    """Raised by :func:`no_host_sync` at a host sync; ``event`` says which op, why, and where."""

    def __init__(self, message: str, event: HostSyncEvent | None = None) -> None:
        super().__init__(message)
        self.event = event


class HostSyncCounter:
    """Host syncs seen by one :func:`count_host_syncs` block: ``total``, ``by_op``, ``by_reason`` and ``events``.

    Example:
        >>> HostSyncCounter().summary()
        '0 host syncs'
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
            reason, where = (event.reason, f"  at {event.location}") if event is not None else ("", "")
            lines.append(f"{count:6d}  {op} ({reason}){where}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"HostSyncCounter(total={self.total}, by_op={dict(self.by_op)})"
