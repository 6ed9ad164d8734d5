"""The accelerated collection on one process, with and without its state arena: ``compute()`` and ``reset()``.

``python -m benchmarks.collection_arena_bench`` builds the article's collection (as ``benchmarks.distributed_bench``
does, accelerated, ``average="micro"``) twice: one whose arena is planned (its states are views, ``reset()`` one copy
per group) and one whose arena is switched off (``reset()`` member by member, fresh states, as before the arena).
Rounds alternate between the two; it prints the median host time per call of ``compute()`` (after one update, every
call computing: no cached value) and of ``reset()``. Numbers are printed, never asserted.

Example:
    >>> _median_us([3e-6, 1e-6, 2e-6])
    2.0
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from benchmarks.distributed_bench import _batch, _collection
from tools.demo import update_metrics
from torchmetrics_async.distributed.collection_arena import collection_arena

__all__ = ["ROUNDS", "main"]

#: Alternating rounds per case, and calls per round.
ROUNDS, CALLS = 30, 20


def _median_us(seconds: Sequence[float]) -> float:
    return round(statistics.median(seconds) * 1e6, 1)


def _built(arena: bool) -> tuple[dict[str, Any], Any]:
    members, collection = _collection(None, accelerated=True)
    for metric in members.values():
        metric.compute_with_cache = False
    if not arena:
        collection_arena(collection).current = lambda _collection: None  # the path before the arena
    collection.reset()
    return members, collection


def _alternating(calls: dict[bool, Callable[[], Any]]) -> dict[bool, float]:
    times: dict[bool, list[float]] = {True: [], False: []}
    for index in range(2 * ROUNDS):
        arena = index % 2 == 0
        start = time.perf_counter()
        for _ in range(CALLS):
            calls[arena]()
        times[arena].append((time.perf_counter() - start) / CALLS)
    return {arena: _median_us(values) for arena, values in times.items()}


def main(argv: Sequence[str] | None = None) -> int:
    """Measure and print.

    Args:
        argv: unused.

    Returns:
        0.
    """
    built = {arena: _built(arena) for arena in (True, False)}
    batch = _batch(0)
    for members, _ in built.values():
        update_metrics(members, *batch)
    compute = _alternating({arena: collection.compute for arena, (_, collection) in built.items()})

    reset = _alternating({arena: collection.reset for arena, (_, collection) in built.items()})
    plans = collection_arena(built[True][1]).plans
    print(f"compute(): with the arena {compute[True]} µs, without {compute[False]} µs (median per call)")
    print(f"reset(): with the arena {reset[True]} µs, without {reset[False]} µs (arena plans: {plans})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
