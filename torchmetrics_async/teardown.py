"""Process teardown: leave no collective of this package running when the process group is destroyed.

``AsyncMetricCollector.schedule_collection()`` launches collectives that run in gloo's worker threads (or on NCCL's
stream) until ``collect_results()`` waits for them. A window still in flight when the program ends means
``destroy_process_group()`` (or interpreter exit) tears down a group whose collectives have not finished, with the
other ranks still taking part in them. :func:`shutdown` waits for such windows and drops them.

It is deliberately not an :mod:`atexit` hook. The exit crash of issue 14 ("terminate called without an active
exception", SIGABRT) is a gloo worker thread asking for the GIL while the interpreter finalizes (to free a tensor's
Python object when it drops a finished work), which needs gloo's threads alive at exit: a group never destroyed, or
one still referenced after ``destroy_process_group()``. Draining at exit cannot stop those threads (measured without
destroying the group: still 1/6), and destroying the user's group behind their back is theirs to decide. The cure is
the documented order, ``shutdown()`` then ``destroy_process_group()`` on every rank, with nothing left referencing
the group (README, "Distributed: exiting cleanly").

Call it before ``destroy_process_group()``::

    torchmetrics_async.shutdown()
    torch.distributed.destroy_process_group()

Example:
    >>> from torchmetrics_async.teardown import shutdown
    >>> shutdown()  # nothing in flight
    0
"""

from __future__ import annotations

from torchmetrics_async.collector.collector import drain_in_flight

__all__ = ["shutdown"]


def shutdown() -> int:
    """Wait for every collector window whose collectives are in flight, and drop those windows.

    Call it on every rank before ``destroy_process_group()``: the collectives of a window involve all ranks, and
    every rank has the same windows in flight (they schedule in the same order). Collected windows, bound collectors
    and metric states are left as they are.

    Returns:
        How many windows were drained.

    Example:
        >>> shutdown()
        0
    """
    return drain_in_flight()
