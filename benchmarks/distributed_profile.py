"""Where the host time of the accelerated collection's ``compute()`` and of ``schedule_collection()`` goes, on 2 ranks.

``python -m benchmarks.distributed_profile`` spawns 2 gloo ranks (as ``benchmarks.distributed_bench`` does, on the
same article collection and data) and prints, from rank 0:

- the cProfile of :data:`CALLS` calls of the accelerated collection's ``compute()`` (sync+compute), top entries by
  own time and by cumulative time;
- the same for ``AsyncMetricCollector.schedule_collection()`` (each call followed, unprofiled, by an update and
  ``collect_results()``), with the host time of its ``all_reduce(async_op=True)`` calls, and for
  ``collect_results()`` (each call followed, unprofiled, by an update and ``schedule_collection()``);
- the host time of a bare gloo ``all_reduce(async_op=True)`` *call* (the launch alone; its wait untimed) of buffers
  of the same sizes and dtypes as the collector's buckets, in the same processes, right after: each waited for before
  the next launch; launched back to back as ``schedule_collection()`` launches them; back to back 2 ms after the other
  rank launched (it is already waiting in the collective); back to back right after a metric update. If the
  collector's calls cost what bare calls cost, the launch cost is gloo's (and the machine's), not this package's.

Also ``compute()`` with the bucket plan cached against planning at every call (the cache emptied before each call),
rounds interleaved in the same processes. Numbers are printed, never asserted (a loaded machine shifts
them all); rank 1 makes the same calls unprofiled.

Example:
    >>> _median_us([3e-6, 1e-6, 2e-6])
    2.0
"""

from __future__ import annotations

import cProfile
import io
import os
import pstats
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

from benchmarks.distributed_bench import _batch, _collection
from tests.distributed import harness
from tools.demo import update_metrics
from torchmetrics_async import AsyncMetricCollector
from torchmetrics_async.sync import metrics as fused_sync

__all__ = ["CALLS", "main"]

#: Profiled calls per case.
CALLS = int(os.environ.get("TORCHMETRICS_ASYNC_PROFILE_CALLS", "200"))
_TOP = 18


def _median_us(seconds: Sequence[float]) -> float:
    return round(statistics.median(seconds) * 1e6, 1)


def _stats(profile: cProfile.Profile, calls: int) -> str:
    out = io.StringIO()
    stats = pstats.Stats(profile, stream=out)
    out.write(f"(per-call figures: divide by {calls})\n")
    stats.sort_stats("tottime").print_stats(_TOP)
    stats.sort_stats("cumulative").print_stats(_TOP)
    return out.getvalue()


def _profiled(rank: int, fn: Any, between: Any = None) -> tuple[str, float]:
    """cProfile of :data:`CALLS` calls of ``fn`` on rank 0 (rank 1 runs them unprofiled) and the median call."""
    profile = cProfile.Profile() if rank == 0 else None
    times = []
    for _ in range(CALLS):
        start = time.perf_counter()
        if profile is not None:
            profile.enable()
        fn()
        if profile is not None:
            profile.disable()
        times.append(time.perf_counter() - start)
        if between is not None:
            between()
    return (_stats(profile, CALLS) if profile is not None else ""), _median_us(times)


def _with_and_without_plan_cache(collection: Any, rounds: int = 20, calls: int = 10) -> tuple[float, float]:
    """Median ``compute()`` with the bucket plan cached and planned at every call, rounds interleaved."""
    times: dict[bool, list[float]] = {True: [], False: []}
    for index in range(2 * rounds):
        cached = index % 2 == 0
        elapsed = 0.0
        for _ in range(calls):
            if not cached:
                fused_sync._PLANS.clear()  # on both ranks: the same calls
            start = time.perf_counter()
            collection.compute()
            elapsed += time.perf_counter() - start
        times[cached].append(elapsed / calls)
    return _median_us(times[True]), _median_us(times[False])


def _bare_launches(buffers: list[torch.Tensor], before: Any = None, wait_each: bool = False) -> list[float]:
    """Host time of each ``all_reduce(async_op=True)`` call over ``buffers``, :data:`CALLS` times (waits untimed)."""
    launches = []
    for _ in range(CALLS):
        if before is not None:
            before()
        works = []
        for buffer in buffers:
            start = time.perf_counter()
            works.append(dist.all_reduce(buffer, async_op=True))
            launches.append(time.perf_counter() - start)
            if wait_each:
                works.pop().wait()
        for work in works:
            work.wait()
    return launches


def _on_rank(rank: int, world_size: int) -> dict[str, Any]:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    torch.set_num_threads(max(1, cores // world_size))
    members, collection = _collection(None, accelerated=True)
    for metric in members.values():
        metric.compute_with_cache = False  # every compute() syncs and computes again
    update_metrics(members, *_batch(rank))
    for _ in range(10):
        collection.compute()
    compute_stats, compute_us = _profiled(rank, collection.compute)
    cached_us, per_call_us = _with_and_without_plan_cache(collection)

    members, collection = _collection(None, accelerated=True)
    collector = AsyncMetricCollector(collection)
    collector.bind()

    def next_window() -> None:
        collector.collect_results()
        update_metrics(members, *_batch(rank))

    update_metrics(members, *_batch(rank))
    for _ in range(10):
        collector.schedule_collection()
        next_window()
    original = dist.all_reduce
    buffers: list[torch.Tensor] = []  # one window's buckets, for the bare launches below

    def recording_all_reduce(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        buffers.append(tensor.clone())
        return original(tensor, *args, **kwargs)

    dist.all_reduce = recording_all_reduce
    try:
        collector.schedule_collection()
        next_window()
    finally:
        dist.all_reduce = original
    launches: list[float] = []

    def timed_all_reduce(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            launches.append(time.perf_counter() - start)

    dist.all_reduce = timed_all_reduce
    try:
        schedule_stats, schedule_us = _profiled(rank, collector.schedule_collection, next_window)
    finally:
        dist.all_reduce = original

    def next_schedule() -> None:
        update_metrics(members, *_batch(rank))
        collector.schedule_collection()

    collector.schedule_collection()
    collect_stats, collect_us = _profiled(rank, collector.collect_results, next_schedule)
    collector.collect_results()
    # each waited for before the next launch; back to back (as schedule_collection() launches them); back to back
    # 2 ms after the other rank (already waiting in the collective); back to back right after a metric update
    bare = _bare_launches(buffers, wait_each=True)
    together = _bare_launches(buffers)
    peer_first = _bare_launches(buffers, before=(lambda: time.sleep(2e-3)) if rank == 0 else None)
    after_update = _bare_launches(buffers, before=lambda: update_metrics(members, *_batch(rank)))
    return {
        "compute_us": compute_us,
        "compute_profile": compute_stats,
        "compute_cached_plan_us": cached_us,
        "compute_per_call_planning_us": per_call_us,
        "schedule_us": schedule_us,
        "schedule_profile": schedule_stats,
        "collect_us": collect_us,
        "collect_profile": collect_stats,
        "buckets": [(str(buffer.dtype), buffer.numel()) for buffer in buffers],
        "collector_all_reduce_call_us": _median_us(launches),
        "bare_all_reduce_call_us": _median_us(bare),
        "bare_back_to_back_call_us": _median_us(together),
        "bare_peer_first_call_us": _median_us(peer_first),
        "bare_after_update_call_us": _median_us(after_update),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Spawn the ranks, profile, print rank 0's report.

    Args:
        argv: unused (the number of calls comes from ``TORCHMETRICS_ASYNC_PROFILE_CALLS``).

    Returns:
        0.
    """
    result = harness.run(_on_rank, world_size=2, timeout=600.0)[0]
    print(f"accelerated collection compute() (sync+compute), median {result['compute_us']} µs per call")
    print(result["compute_profile"])
    print(
        "compute(), rounds interleaved in the same processes: bucket plan cached"
        f" {result['compute_cached_plan_us']} µs, planned at every call {result['compute_per_call_planning_us']} µs"
    )
    print(f"schedule_collection(), median {result['schedule_us']} µs per call")
    print(result["schedule_profile"])
    print(f"collect_results() (after an update and schedule_collection()), median {result['collect_us']} µs per call")
    print(result["collect_profile"])
    print(f"buckets: {result['buckets']}")
    print(
        "all_reduce(async_op=True) call (launch only), median µs: inside schedule_collection()"
        f" {result['collector_all_reduce_call_us']}; bare, same buffer sizes, one at a time"
        f" {result['bare_all_reduce_call_us']}, launched back to back {result['bare_back_to_back_call_us']},"
        f" back to back with the peer already waiting {result['bare_peer_first_call_us']},"
        f" back to back right after a metric update {result['bare_after_update_call_us']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
