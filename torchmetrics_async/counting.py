"""The window's update count: host-counted updates in a Python int, compiled ones in a device tensor.

Dynamo would guard on a changing Python int (a recompile per step), so compiled code counts in a 0-dim device tensor.

Example:
    >>> import torch
    >>> from torchmetrics_async import SumMetric
    >>> metric = SumMetric()
    >>> metric.update(torch.tensor(1.0))
    >>> count_compiled_update(metric)  # what a compiled update does: no host read
    >>> metric.update_count
    2
"""

from typing import Any

import torch
from torch import Tensor

from torchmetrics_async.deferred import UNREPORTED, mark_static_address

__all__ = [
    "COMPILED_SEEN",
    "COMPILED_UPDATES",
    "COUNTS_ON_HOST",
    "clear_compiled_count",
    "compiled_count_codes",
    "copy_update_count",
    "count_compiled_update",
    "count_traced_update",
    "fold_compiled_count",
    "read_window_count",
    "set_update_count",
    "unread_window_count",
]

#: Instance attribute: a 0-dim int64 device tensor counting this window's updates made inside compiled code.
COMPILED_UPDATES = "_compiled_updates"
# Instance attribute: its value as last read on the host, or None once compiled code counted since (no guard).
COMPILED_SEEN = "_compiled_seen"
# Instance attribute: while true (torchmetrics' forward inside compiled code), updates count in the Python int.
COUNTS_ON_HOST = "_counts_on_host"


def read_window_count(metric: Any) -> int:
    """The window's count, reading the device count if compiled code counted since it was last read."""
    state = metric.__dict__
    if state.get(COMPILED_SEEN, 0) is None:
        state[COMPILED_SEEN] = int(state[COMPILED_UPDATES])
    return state[metric._window_counter] + state.get(COMPILED_SEEN, 0)


def unread_window_count(metric: Any) -> int | Tensor:
    """The window count without a host read: an int, or a 0-dim device tensor once (or while) compiled code counts."""
    state = metric.__dict__
    count = state[metric._window_counter]
    if torch.compiler.is_compiling() or state.get(COMPILED_SEEN, 0) != 0:
        return state[COMPILED_UPDATES] + count
    return count


def compiled_count_codes(metric: Any) -> list[Tensor]:
    """The device count, to read in the same host read as the check states, if it changed since last read."""
    state = metric.__dict__
    return [state[COMPILED_UPDATES]] if state.get(COMPILED_SEEN, 0) is None else []


def fold_compiled_count(metric: Any, count: int) -> None:
    """Record ``count``, a host read of the device count (see :func:`compiled_count_codes`)."""
    metric.__dict__[COMPILED_SEEN] = count


def count_traced_update(metric: Any) -> None:
    """Count an update inside traced code: on the device, or in the int inside torchmetrics' traced forward."""
    state = metric.__dict__
    if state.get(COUNTS_ON_HOST):
        state["_update_count"] += 1
    else:
        count_compiled_update(metric)


def count_compiled_update(metric: Any) -> None:
    """Count an update inside traced code, in place on the device."""
    state = metric.__dict__
    state[COMPILED_UPDATES].add_(1)
    state[COMPILED_SEEN] = None
    state[UNREPORTED] = True


def set_update_count(metric: Any, count: int) -> None:
    """Set a metric's window update count to ``count`` (compiled updates' device count cleared, without a read)."""
    metric.__dict__["_update_count"] = count
    clear_compiled_count(metric)


def clear_compiled_count(metric: Any) -> None:
    """Forget the updates counted on the device by compiled code (zeroed in place: no host read)."""
    state = metric.__dict__
    if state.get(COMPILED_SEEN, 0) != 0:
        state[COMPILED_UPDATES].zero_()
        state[COMPILED_SEEN] = 0


def copy_update_count(source: Any, target: Any) -> None:
    """Give ``target`` the update count of ``source`` (same class) without a host read."""
    src, dst = source.__dict__, target.__dict__
    counter = src.get(COMPILED_UPDATES)
    if counter is None:
        set_update_count(target, src["_update_count"])
        return
    dst["_update_count"] = src["_update_count"]
    mine = dst.get(COMPILED_UPDATES)
    if isinstance(mine, Tensor) and mine.device == counter.device:
        mine.copy_(counter)
    else:
        dst[COMPILED_UPDATES] = mark_static_address(counter.clone())
    # Compiled: a constant store (reading the source's host-side value would make Dynamo guard on it).
    dst[COMPILED_SEEN] = None if torch.compiler.is_compiling() else src.get(COMPILED_SEEN, 0)
