"""Process teardown: :func:`shutdown` leaves no collective of this package running when the process group goes.

Not an :mod:`atexit` hook: draining at exit cannot stop the gloo threads behind the exit crash (``docs/exit-crash.md``).
"""

from __future__ import annotations

from torchmetrics_async.collector.collector import drain_in_flight

__all__ = ["shutdown"]


def shutdown() -> int:
    """Wait for every collector window in flight, drop it, and return how many; call it on every rank.

    Example:
        >>> shutdown()
        0
    """
    return drain_in_flight()
