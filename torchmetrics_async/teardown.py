"""Process teardown: :func:`shutdown` leaves no collective of this package running when the process group goes.

Not an :mod:`atexit` hook: draining at exit cannot stop the gloo threads behind the exit crash, and destroying the
user's group is theirs to decide (``docs/exit-crash.md``). Call it on every rank before ``destroy_process_group()``.
"""

from __future__ import annotations

from torchmetrics_async.collector.collector import drain_in_flight

__all__ = ["shutdown"]


def shutdown() -> int:
    """Wait for every collector window whose collectives are in flight, drop those windows, and return how many.

    Call it on every rank: a window's collectives involve all ranks, and every rank has the same windows in flight.

    Example:
        >>> shutdown()
        0
    """
    return drain_in_flight()
