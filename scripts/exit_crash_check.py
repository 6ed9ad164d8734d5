"""Count 2-rank gloo runs whose workers do not exit cleanly (issue 14, point 5: "terminate called ...", SIGABRT).

Each run starts two fresh interpreters (one per rank, as ``torchrun`` does) on 127.0.0.1 with a free port; each rank
runs one variant, calls ``destroy_process_group()`` and exits. A run counts as a crash when a rank's exit code is not
0 (SIGABRT shows as -6 / 134) or its stderr says ``terminate called``. The package variants import their package
after ``init_process_group()``, the order in which an import inside this package used to keep the group alive.

Variants:
    torch: 20 rounds of ``all_reduce`` + ``barrier`` (torch alone).
    torchmetrics: torchmetrics' ``MetricCollection`` (``MeanMetric``, ``SumMetric``), 5 x update/compute/reset.
    accelerated: the same with ``torchmetrics_async.MetricCollection`` (fused sync).
    collector: the same collection through ``AsyncMetricCollector``, 5 x schedule/collect.
    inflight: as ``collector``, but the last window is scheduled and never collected; ``torchmetrics_async.shutdown()``
        drains it before ``destroy_process_group()``.
    inflight-nodestroy: as ``inflight`` without ``shutdown()`` and without ``destroy_process_group()``.
    torch-nodestroy: torch alone: 20 ``all_reduce(async_op=True)`` never waited, the process group never destroyed
        (the crash mechanism, without this package).
    torch-held: torch alone: 20 ``all_reduce(async_op=True)`` dropped unwaited, then ``destroy_process_group()``, with
        ``torch.distributed.nn`` imported after ``init_process_group()``: its functions' ``group=group.WORLD`` defaults
        keep the group alive, so ``destroy_process_group()`` does not stop gloo's threads (the cause, torch alone).
    torch-dropped: as ``torch-held`` without that import: ``destroy_process_group()`` waits for the works and stops
        gloo's threads (the control).

Why a rank aborts: a gloo worker thread that drops the last reference to a tensor whose Python object Python has
already let go of must take the GIL to free that object; once the interpreter is finalizing, Python ends such a thread
with ``pthread_exit``, whose unwinding through a ``noexcept`` destructor calls ``std::terminate``. That needs gloo's
threads alive at exit: a group never destroyed, or one something still references after ``destroy_process_group()``.

Run: ``scripts/exit-crash-check [--runs 50] [variant ...]`` (default: every variant). Exit status 1 if any crashed.
:func:`lingering_threads` runs a variant once and returns the gloo/TCPStore threads each rank still has after
``destroy_process_group()`` (Linux): the deterministic symptom of a group kept alive.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import os
import socket
import subprocess
import sys

__all__ = ["VARIANTS", "free_port", "lingering_threads", "main", "run_once", "torch_threads", "worker"]

VARIANTS = (
    "torch",
    "torchmetrics",
    "accelerated",
    "collector",
    "inflight",
    "inflight-nodestroy",
    "torch-nodestroy",
    "torch-held",
    "torch-dropped",
)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port() -> int:
    """A port nobody listens on right now (bound to port 0, read back, closed)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def torch_threads() -> list[str]:
    """Names of this process's gloo and TCPStore threads (torch names them; read from ``/proc``, so Linux only)."""
    names = []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as comm:
                names.append(comm.read().strip())
        except FileNotFoundError:  # the thread ended meanwhile
            continue
    return sorted(name for name in names if name.startswith(("pt_gloo", "gloo_", "pt_tcpstore")))


def worker(variant: str, rank: int, port: int, report_threads: bool = False) -> None:
    """One rank of one run: join the group, run ``variant``, tear down; print :func:`torch_threads` if asked."""
    import torch
    import torch.distributed as dist

    # A peer that dies must not leave this rank waiting for the default half hour.
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=2,
        timeout=datetime.timedelta(seconds=30),
    )
    destroy = True
    if variant == "torch":
        for _ in range(20):
            dist.all_reduce(torch.ones(3))
            dist.barrier()
    elif variant == "torch-nodestroy":
        works = [dist.all_reduce(torch.ones(1000), async_op=True) for _ in range(20)]  # noqa: F841  (alive at exit)
        destroy = False
    elif variant in ("torch-held", "torch-dropped"):
        if variant == "torch-held":
            importlib.import_module("torch.distributed.nn")  # after init: its defaults capture group.WORLD
        for _ in range(20):
            dist.all_reduce(torch.ones(1000), async_op=True)  # work and tensor dropped at once
    elif variant in ("torchmetrics", "accelerated"):
        if variant == "torchmetrics":
            from torchmetrics import MeanMetric, MetricCollection, SumMetric
        else:
            from torchmetrics_async import MeanMetric, MetricCollection, SumMetric
        metrics = MetricCollection({"mean": MeanMetric(), "sum": SumMetric()})
        for step in range(5):
            metrics.update(torch.tensor([1.0 + rank, 2.0 * step]))
            metrics.compute()
            metrics.reset()
    elif variant in ("collector", "inflight", "inflight-nodestroy"):
        import torchmetrics_async
        from torchmetrics_async import AsyncMetricCollector, MeanMetric, MetricCollection, SumMetric

        metrics = MetricCollection({"mean": MeanMetric(), "sum": SumMetric()})
        collector = AsyncMetricCollector(metrics)
        collector.bind()
        for step in range(5):
            metrics.update(torch.tensor([1.0 + rank, 2.0 * step]))
            collector.schedule_collection()
            if variant == "collector" or step < 4:
                collector.collect_results()
        if variant == "inflight":
            assert torchmetrics_async.shutdown() == 1
        elif variant == "inflight-nodestroy":
            destroy = False
    else:
        raise SystemExit(f"unknown variant {variant!r}")
    if destroy:
        dist.destroy_process_group()
    if report_threads:
        print(json.dumps(torch_threads()), flush=True)  # flushed: a rank may still abort at exit


def _start_ranks(variant: str, *flags: str) -> list[subprocess.Popen]:
    """Two fresh interpreters running ``worker(variant, rank, port)`` on a free port."""
    port = free_port()
    command = [sys.executable, os.path.abspath(__file__), "--worker", variant]
    # This checkout's package, not whichever one the environment has installed.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}
    return [
        subprocess.Popen(
            [*command, str(rank), str(port), *flags], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        for rank in range(2)
    ]


def _finish(process: subprocess.Popen, timeout: float) -> tuple[str, str] | None:
    """``(stdout, stderr)`` of a rank, or ``None`` if it ran past ``timeout`` (then it is killed)."""
    try:
        return process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()  # only the processes this run started
        process.communicate()
        return None


def run_once(variant: str, timeout: float = 90.0) -> tuple[bool, str]:
    """Run ``variant`` on two fresh ranks; ``(crashed, why)``."""
    why = []
    for rank, process in enumerate(_start_ranks(variant)):
        outputs = _finish(process, timeout)
        if outputs is None:
            why.append(f"rank {rank} timed out")
        elif process.returncode != 0 or "terminate called" in outputs[1]:
            tail = " | ".join(outputs[1].strip().splitlines()[-2:])
            why.append(f"rank {rank} exit {process.returncode}: {tail}")
    return bool(why), "; ".join(why)


def lingering_threads(variant: str, timeout: float = 90.0) -> list[list[str]]:
    """Run ``variant`` once; per rank, the gloo/TCPStore threads left after ``destroy_process_group()``.

    Raises:
        RuntimeError: a rank timed out or printed no thread list (its stderr's tail in the message).
    """
    found = []
    for rank, process in enumerate(_start_ranks(variant, "--threads")):
        outputs = _finish(process, timeout)
        lines = outputs[0].strip().splitlines() if outputs else []
        if not lines:
            tail = " | ".join(outputs[1].strip().splitlines()[-2:]) if outputs else "timed out"
            raise RuntimeError(f"rank {rank} of {variant!r} reported no threads: {tail}")
        found.append(json.loads(lines[-1]))
    return found


def main(argv: list[str] | None = None) -> int:
    """Run each variant ``--runs`` times and print a table of crash counts; 1 if any run crashed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("variants", nargs="*", choices=[[], *VARIANTS], default=[])
    opts = parser.parse_args(argv)
    counts = {}
    for variant in opts.variants or VARIANTS:
        crashed = 0
        for index in range(opts.runs):
            bad, why = run_once(variant)
            if bad:
                crashed += 1
                print(f"{variant} run {index}: {why}", flush=True)
        counts[variant] = crashed
        print(f"{variant}: {crashed}/{opts.runs} crashed", flush=True)
    print("\n| variant | crashed / runs |\n|---|---|")
    for variant, crashed in counts.items():
        print(f"| {variant} | {crashed}/{opts.runs} |")
    return 1 if any(counts.values()) else 0


if __name__ == "__main__":
    if len(sys.argv) in (5, 6) and sys.argv[1] == "--worker":
        worker(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), report_threads=sys.argv[5:] == ["--threads"])
    else:
        sys.exit(main())
