"""Spawn gloo workers, run a function on every rank, bring each rank's result (or traceback) back to the parent.

A worker process costs seconds (interpreter, torch import, rendezvous), so a test module spawns once and runs many
scenarios per spawn; :func:`run_scenarios` keeps going after a failing scenario and reports it by name.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import socket
import tempfile
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from torchmetrics_async.testing import COLLECTIVES, CollectiveCounter, count_collectives  # noqa: F401  (re-exported)

ERROR = "__error__"


@contextlib.contextmanager
def count_waits() -> Iterator[list[int]]:
    """Count blocking ``Work.wait()`` calls made from Python inside the block (a one-element list: the count)."""
    count = [0]
    original = dist.Work.wait

    def wait(self: Any, *args: Any, **kwargs: Any) -> Any:
        count[0] += 1
        return original(self, *args, **kwargs)

    dist.Work.wait = wait
    try:
        yield count
    finally:
        dist.Work.wait = original


def free_port() -> int:
    """A port nobody listens on right now (bound to port 0, read back, closed)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _worker(fn: Callable[[int, int], Any], rank: int, world_size: int, store: str, out: str) -> None:
    result: Any
    try:
        # A failing scenario can leave the other rank waiting in a collective: fail in minutes, not half an hour. Not
        # less: a loaded machine can take a minute to start the other rank (imports), and the wait covers its arrival.
        dist.init_process_group(
            "gloo",
            init_method=f"file://{store}",
            rank=rank,
            world_size=world_size,
            timeout=datetime.timedelta(seconds=300),
        )
        result = fn(rank, world_size)
    except BaseException:  # the parent reports it with the rank
        result = {ERROR: traceback.format_exc()}
    # Save before tearing down: the result is what the test checks, whatever happens at teardown.
    torch.save(result, out)
    if dist.is_initialized():
        dist.destroy_process_group()


def run(fn: Callable[[int, int], Any], world_size: int = 2, timeout: float = 900.0) -> list[Any]:
    """Run ``fn(rank, world_size)`` in ``world_size`` spawned gloo processes; return their results in rank order.

    Raises:
        AssertionError: if a worker raised (with its traceback), died, or ran past ``timeout`` seconds.
    """
    context = mp.get_context("spawn")
    with tempfile.TemporaryDirectory() as tmp:
        # The ranks meet in a file, not on a port: no port to pick, so none that another process can take first.
        store = os.path.join(tmp, "store")
        paths = [os.path.join(tmp, f"rank{rank}.pt") for rank in range(world_size)]
        processes = [
            context.Process(target=_worker, args=(fn, rank, world_size, store, paths[rank]), daemon=True)
            for rank in range(world_size)
        ]
        for process in processes:
            process.start()
        for process in processes:
            process.join(timeout)
        hung = [rank for rank, process in enumerate(processes) if process.is_alive()]
        for rank in hung:
            processes[rank].kill()  # only the processes this call started
            processes[rank].join()
        assert not hung, f"ranks {hung} still running after {timeout} s"
        results = []
        for rank, (process, path) in enumerate(zip(processes, paths, strict=True)):
            assert os.path.exists(path), f"rank {rank} died (exit code {process.exitcode}) without a result"
            result = torch.load(path, weights_only=False)
            if isinstance(result, dict) and ERROR in result:
                raise AssertionError(f"rank {rank} failed:\n{result[ERROR]}")
            results.append(result)
    return results


def run_scenarios(scenarios: dict[str, Callable[[int, int], Any]], rank: int, world_size: int) -> dict[str, Any]:
    """Run every scenario in order on this rank; a failure is recorded as ``{ERROR: traceback}`` under its name."""
    results: dict[str, Any] = {}
    for name, scenario in scenarios.items():
        try:
            results[name] = scenario(rank, world_size)
        except BaseException:
            results[name] = {ERROR: traceback.format_exc()}
    return results


def scenario(ranks: list[dict[str, Any]], name: str) -> list[Any]:
    """Every rank's result of scenario ``name`` (from :func:`run_scenarios`); fails the test with a rank's traceback."""
    import pytest  # the workers import this module too: only the tests need pytest

    per_rank = [results[name] for results in ranks]
    for rank, result in enumerate(per_rank):
        if isinstance(result, dict) and ERROR in result:
            pytest.fail(f"scenario {name!r} failed on rank {rank}:\n{result[ERROR]}")
    return per_rank
