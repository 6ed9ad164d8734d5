"""Distributed benchmarks on 2 gloo ranks: torchmetrics vs torchmetrics-async side by side in one run.

``python -m benchmarks.distributed_bench`` (run by ``scripts/bench`` after the pytest-benchmark suites) spawns 2 gloo
ranks on 127.0.0.1 (a free port) once and measures, on the article's collection (``MeanMetric`` + multiclass
``Accuracy``/``Precision``/``Recall``/``F1Score``, ``num_classes=1000``, as :func:`tools.demo.build_metrics`
builds them, in one ``MetricCollection``), with the task wrappers' default ``average="micro"`` and with ``"macro"``:

- **sync+compute**: ``collection.compute()`` of the torchmetrics collection and of the same collection after
  :func:`torchmetrics_async.accelerate`: collectives per call (``torch.distributed`` calls counted by wrapping them)
  and host time per call. The members are built with ``compute_with_cache=False`` so that every call syncs and
  computes (a cached value would come back without either);
- **schedule_collection()**: host time of :meth:`~torchmetrics_async.AsyncMetricCollector.schedule_collection` over
  the accelerated collection (each round: one untimed update, the timed schedule, then ``collect_results()``, timed
  apart and reported for information);
- **training loop**: a small data-parallel loop on each rank (the demo's CPU model, ``DistributedDataParallel``,
  batch 64 of 32x32 images, the five updates per step) that also collects every step (``collect_results()`` of the
  window scheduled one step earlier, then ``schedule_collection()``), against the same loop that updates the metrics
  but never collects. Rounds of :data:`LOOP_STEPS` steps alternate between the two (order swapped every round so
  drift hits both); the ratio is of their median per-step times.

Method: that of ``benchmarks/timing.py`` (warm-up, the cost of one call estimated, rounds sized to a timed budget,
the median round), with a per-case budget of :data:`BUDGET_S` and at least :data:`MIN_ROUNDS` rounds (a torchmetrics
sync takes tens of milliseconds on gloo, so the in-process suites' 100-round floor would take minutes). Rank 0 times
and decides the number of rounds; rank 1 makes the same calls in the same order, so the collectives match. Each rank
uses ``cores // 2`` torch threads. Results go to ``benchmarks/results/distributed.json``; the Markdown table compares
them with the issue's targets. Numbers are reported, never asserted.

Example:
    >>> rows = [{"case": "sync+compute", "average": "micro", "impl": impl, "median_s": s, "collectives": c}
    ...         for impl, s, c in (("torchmetrics", 0.06, {"barrier": 18, "all_gather": 34}),
    ...                            ("accelerated", 0.003, {"all_gather_single": 1, "all_reduce": 2}))]
    >>> print(render_sync_table(rows))  # doctest: +NORMALIZE_WHITESPACE
    | average | collectives tm | collectives acc | target (≤ 3) | tm median µs | acc median µs | ratio (acc/tm) | target (ratio ≤ 0.15) |
    |---|---:|---:|---|---:|---:|---:|---|
    | micro | 52 | 3 | met | 60000.0 | 3000.0 | 0.050 | met |
"""  # noqa: E501

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torchmetrics
from torch import nn

from benchmarks.timing import ITERATIONS, MAX_ROUNDS, WARMUP_CALLS, plan_rounds
from tests.distributed import harness
from tools.demo import build_metrics, small_cnn, update_metrics
from torchmetrics_async import AsyncMetricCollector, accelerate

__all__ = [
    "AVERAGES",
    "BUDGET_S",
    "LOOP_ROUNDS",
    "LOOP_STEPS",
    "MIN_ROUNDS",
    "TARGETS",
    "main",
    "render",
    "render_async_table",
    "render_sync_table",
    "time_rounds",
]

#: Timed budget per case in seconds (override with ``TORCHMETRICS_ASYNC_DIST_BENCH_SECONDS``).
BUDGET_S = float(os.environ.get("TORCHMETRICS_ASYNC_DIST_BENCH_SECONDS", "2.0"))
#: Fewest rounds per case, however slow the call.
MIN_ROUNDS = 10
#: Training-loop rounds per variant, and steps per round.
LOOP_ROUNDS = 20
LOOP_STEPS = 10
#: The scores' ``average``: ``None`` is the task wrappers' default (micro), as in the article.
AVERAGES: dict[str, str | None] = {"micro": None, "macro": "macro"}
#: The issue's targets.
TARGETS = {
    # collectives per sync+compute of the accelerated collection (torchmetrics: 52): the plan check's fixed-size
    # all_gather, then one all_reduce per bucket (2 here)
    "collectives": 3,
    "sync_ratio": 0.15,  # host time of sync+compute, accelerated / torchmetrics
    "schedule_s": 1e-3,  # host time of schedule_collection() (absolute; the ratio below is the target)
    "schedule_ratio": 0.01,  # schedule_collection() / torchmetrics' blocking compute() of the collection, same run
    "collect_ratio": 0.02,  # collect_results() / the same
    "loop_ratio": 1.05,  # per-step time, collect every step / never collect
}
DEFAULT_JSON = Path(__file__).resolve().parent / "results" / "distributed.json"
WORLD_SIZE = 2
_BATCH, _IMAGE, _CLASSES = 64, 32, 1000


# --------------------------------------------------------------------------------------------------------------------
# Timing (on every rank, in step)
# --------------------------------------------------------------------------------------------------------------------


def _agree(value: int) -> int:
    """Rank 0's ``value`` on every rank (so both make the same calls); the value itself without a process group."""
    if not (dist.is_available() and dist.is_initialized()):
        return value
    tensor = torch.tensor([value], dtype=torch.int64)
    dist.broadcast(tensor, src=0)
    return int(tensor.item())


def time_rounds(
    fn: Callable[[], Any],
    teardown: Callable[[], Any] | None = None,
    iterations: int = ITERATIONS,
    budget_s: float | None = None,
) -> dict[str, Any]:
    """Time ``fn`` as ``benchmarks/timing.py`` does, with the number of rounds agreed across ranks.

    :data:`~benchmarks.timing.WARMUP_CALLS` warm-up calls, as many again to estimate one call, then rounds of
    ``iterations`` calls, as many as fit in the budget (clamped to ``[MIN_ROUNDS, MAX_ROUNDS]``). ``teardown`` runs
    untimed after every round and after every warm-up call (a round of one), as pytest-benchmark's ``teardown``.

    Args:
        fn: the call to time.
        teardown: what must follow each round before ``fn`` can run again (e.g. ``collect_results()``).
        iterations: calls per round.
        budget_s: timed budget in seconds (``None``: :data:`BUDGET_S`).

    Returns:
        ``{"median_s": seconds per call in the median round, "rounds", "iterations"}``.

    Example:
        >>> timing = time_rounds(lambda: sum(range(100)), budget_s=0.01)
        >>> timing["rounds"] >= MIN_ROUNDS, timing["iterations"]
        (True, 10)
    """
    after = teardown or (lambda: None)
    for _ in range(WARMUP_CALLS):
        fn()
        after()
    spent = 0.0
    for _ in range(WARMUP_CALLS):
        start = time.perf_counter()
        fn()
        spent += time.perf_counter() - start
        after()
    budget = BUDGET_S if budget_s is None else budget_s
    rounds = _agree(plan_rounds(spent / WARMUP_CALLS, iterations, budget, MIN_ROUNDS, MAX_ROUNDS))
    per_call = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(iterations):
            fn()
        per_call.append((time.perf_counter() - start) / iterations)
        after()
    return {"median_s": statistics.median(per_call), "rounds": rounds, "iterations": iterations}


def _batch(rank: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A loss, logits and labels of one step on this rank (per-rank data, as a data-parallel loop has)."""
    generator = torch.Generator().manual_seed(rank)
    logits = torch.randn(128, _CLASSES, generator=generator)
    return torch.tensor(6.9), logits, torch.randint(0, _CLASSES, (128,), generator=generator)


def _collection(average: str | None, accelerated: bool) -> tuple[dict[str, torchmetrics.Metric], Any]:
    """The article's metrics and one ``MetricCollection`` of them (members updated one by one: no compute groups)."""
    members = build_metrics(_CLASSES, average)
    collection = torchmetrics.MetricCollection(members, compute_groups=False)
    return members, accelerate(collection) if accelerated else collection


def _sync_compute(rank: int, variant: str) -> list[dict[str, Any]]:
    rows = []
    for impl in ("torchmetrics", "accelerated"):
        members, collection = _collection(AVERAGES[variant], impl == "accelerated")
        for metric in members.values():
            metric.compute_with_cache = False  # every compute() syncs and computes again
        update_metrics(members, *_batch(rank))
        timing = time_rounds(collection.compute)
        with harness.count_collectives() as counted:
            collection.compute()
        rows.append(
            {"case": "sync+compute", "average": variant, "impl": impl, **timing, "collectives": counted.as_dict()}
        )
    return rows


def _schedule(rank: int, variant: str) -> list[dict[str, Any]]:
    members, collection = _collection(AVERAGES[variant], accelerated=True)
    collector = AsyncMetricCollector(collection)
    collector.bind()
    batch = _batch(rank)
    collect_s: list[float] = []

    def next_window() -> None:
        start = time.perf_counter()
        collector.collect_results()
        collect_s.append(time.perf_counter() - start)
        update_metrics(members, *batch)  # the next window has data, as in training

    update_metrics(members, *batch)
    timing = time_rounds(collector.schedule_collection, teardown=next_window, iterations=1)
    with harness.count_collectives() as scheduled:
        collector.schedule_collection()
    with harness.count_collectives() as collected:
        collector.collect_results()
    collector.unbind()
    timed = collect_s[-timing["rounds"] :]  # the timed rounds' collects, not the warm-up's
    common = {"average": variant, "impl": "accelerated", "iterations": 1, "rounds": timing["rounds"]}
    return [
        {"case": "schedule_collection()", **common, "median_s": timing["median_s"], "collectives": scheduled.as_dict()},
        {
            "case": "collect_results()",
            **common,
            "median_s": statistics.median(timed),
            "collectives": collected.as_dict(),
        },
    ]


def _training_loop(rank: int, variant: str) -> list[dict[str, Any]]:
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(small_cnn(_CLASSES))
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    generator = torch.Generator().manual_seed(rank)
    batches = [
        (torch.randn(_BATCH, 3, _IMAGE, _IMAGE, generator=generator), torch.randint(0, _CLASSES, (_BATCH,)))
        for _ in range(4)
    ]
    never, _ = _collection(AVERAGES[variant], accelerated=True)
    every, collection = _collection(AVERAGES[variant], accelerated=True)
    collector = AsyncMetricCollector(collection)
    collector.bind()

    def step(index: int, metrics: dict[str, torchmetrics.Metric]) -> None:
        images, labels = batches[index % len(batches)]
        optimizer.zero_grad()
        output = model(images)
        loss = criterion(output, labels)
        loss.backward()
        optimizer.step()
        update_metrics(metrics, loss, output, labels)

    def collecting_step(index: int) -> None:
        step(index, every)
        if collector.is_scheduled:  # the window scheduled one step ago
            collector.collect_results()
        collector.schedule_collection()

    variants: dict[str, Callable[[int], None]] = {
        "never collects": lambda index: step(index, never),
        "collects every step": collecting_step,
    }
    per_step: dict[str, list[float]] = {name: [] for name in variants}
    for run_step in variants.values():  # warm-up
        for index in range(WARMUP_CALLS):
            run_step(index)
    for round_index in range(LOOP_ROUNDS):
        order = list(variants) if round_index % 2 == 0 else list(reversed(variants))
        for name in order:
            start = time.perf_counter()
            for index in range(LOOP_STEPS):
                variants[name](index)
            per_step[name].append((time.perf_counter() - start) / LOOP_STEPS)
    if collector.is_scheduled:
        collector.collect_results()
    collector.unbind()
    return [
        {
            "case": "training step",
            "average": variant,
            "impl": f"accelerated, {name}",
            "median_s": statistics.median(times),
            "rounds": LOOP_ROUNDS,
            "iterations": LOOP_STEPS,
        }
        for name, times in per_step.items()
    ]


def _on_rank(rank: int, world_size: int) -> list[dict[str, Any]]:
    """Every case, in the same order on every rank; rank 0's rows are the results."""
    # The ranks share the machine's cores: one share each rather than each one thread per core.
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    torch.set_num_threads(max(1, cores // world_size))
    rows = []
    for variant in AVERAGES:
        rows += _sync_compute(rank, variant)
        rows += _schedule(rank, variant)
    rows += _training_loop(rank, "micro")
    return rows


# --------------------------------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------------------------------


def _verdict(ok: bool | None) -> str:
    return "NOT measured" if ok is None else ("met" if ok else "NOT met")


def _find(rows: Sequence[Mapping[str, Any]], case: str, average: str, impl: str) -> Mapping[str, Any] | None:
    return next((r for r in rows if r["case"] == case and r["average"] == average and r["impl"] == impl), None)


def _sync_checks(rows: Sequence[Mapping[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for average in dict.fromkeys(r["average"] for r in rows if r["case"] == "sync+compute"):
        tm, acc = (_find(rows, "sync+compute", average, impl) for impl in ("torchmetrics", "accelerated"))
        count = {name: None if r is None else sum(r["collectives"].values()) for name, r in (("tm", tm), ("acc", acc))}
        ratio = None if tm is None or acc is None else acc["median_s"] / tm["median_s"]
        out.append(
            (
                average,
                {
                    "tm": tm,
                    "acc": acc,
                    "count": count,
                    "ratio": ratio,
                    "count_ok": None if count["acc"] is None else count["acc"] <= TARGETS["collectives"],
                    "ratio_ok": None if ratio is None else ratio <= TARGETS["sync_ratio"],
                },
            )
        )
    return out


def _us(row: Mapping[str, Any] | None) -> str:
    return "—" if row is None else f"{row['median_s'] * 1e6:.1f}"


def render_sync_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """Markdown table of sync+compute: collectives and host time per ``compute()``, torchmetrics vs accelerated.

    Args:
        rows: result rows (``case``, ``average``, ``impl``, ``median_s``, ``collectives``).

    Returns:
        The table (two header lines, one line per ``average``).

    Example:
        >>> print(render_sync_table([]).splitlines()[1])
        |---|---:|---:|---|---:|---:|---:|---|
    """
    lines = [
        f"| average | collectives tm | collectives acc | target (≤ {TARGETS['collectives']}) | tm median µs"
        f" | acc median µs | ratio (acc/tm) | target (ratio ≤ {TARGETS['sync_ratio']:g}) |",
        "|---|---:|---:|---|---:|---:|---:|---|",
    ]
    for average, check in _sync_checks(rows):
        count, ratio = check["count"], check["ratio"]
        cells = [
            average,
            "—" if count["tm"] is None else str(count["tm"]),
            "—" if count["acc"] is None else str(count["acc"]),
            _verdict(check["count_ok"]),
            _us(check["tm"]),
            _us(check["acc"]),
            "—" if ratio is None else f"{ratio:.3f}",
            _verdict(check["ratio_ok"]),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _async_checks(rows: Sequence[Mapping[str, Any]]) -> list[tuple[list[str], bool | None]]:
    """``(cells, target met?)`` per line of the collector table (``None``: no target)."""
    out: list[tuple[list[str], bool | None]] = []
    for row in rows:
        if row["case"] == "schedule_collection()":
            ok = row["median_s"] < TARGETS["schedule_s"]
            target = f"< {TARGETS['schedule_s'] * 1e3:g} ms: {_verdict(ok)}"
            out.append(([row["case"], row["average"], f"{row['median_s'] * 1e6:.1f} µs", target], ok))
        elif row["case"] == "collect_results()":
            out.append(
                ([f"{row['case']} (after one update)", row["average"], f"{row['median_s'] * 1e6:.1f} µs", "—"], None)
            )
        else:
            continue
        tm = _find(rows, "sync+compute", row["average"], "torchmetrics")
        if tm is not None:  # the issue's target: a ratio to torchmetrics' blocking compute() measured in this run
            key = "schedule_ratio" if row["case"] == "schedule_collection()" else "collect_ratio"
            ratio = row["median_s"] / tm["median_s"]
            ok = ratio <= TARGETS[key]
            cells = [f"{row['case']} / torchmetrics compute()", row["average"], f"{ratio:.4f}x"]
            out.append(([*cells, f"≤ {TARGETS[key]:g}x: {_verdict(ok)}"], ok))
    for average in dict.fromkeys(r["average"] for r in rows if r["case"] == "training step"):
        never = _find(rows, "training step", average, "accelerated, never collects")
        every = _find(rows, "training step", average, "accelerated, collects every step")
        for row in (never, every):
            if row is not None:
                name = row["impl"].split(", ", 1)[1]
                out.append(([f"training step, {name}", average, f"{row['median_s'] * 1e3:.2f} ms", "—"], None))
        if never is not None and every is not None:
            ratio = every["median_s"] / never["median_s"]
            ok = ratio <= TARGETS["loop_ratio"]
            target = f"≤ {TARGETS['loop_ratio']:g}: {_verdict(ok)}"
            out.append((["training step ratio, collects every step / never", average, f"{ratio:.3f}", target], ok))
    return out


def render_async_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """Markdown table of the collector: ``schedule_collection()``, ``collect_results()`` and the training loop.

    Args:
        rows: result rows.

    Returns:
        The table.

    Example:
        >>> rows = [{"case": "schedule_collection()", "average": "micro", "impl": "accelerated", "median_s": 4e-4}]
        >>> print(render_async_table(rows).splitlines()[-1])
        | schedule_collection() | micro | 400.0 µs | < 1 ms: met |
    """
    lines = ["| measure (accelerated, AsyncMetricCollector) | average | median | target |", "|---|---|---:|---|"]
    lines += ["| " + " | ".join(cells) + " |" for cells, _ in _async_checks(rows)]
    return "\n".join(lines)


def _targets(rows: Sequence[Mapping[str, Any]]) -> tuple[int, int]:
    """(met, judged) over every target of both tables."""
    verdicts = [check[key] for _, check in _sync_checks(rows) for key in ("count_ok", "ratio_ok")]
    verdicts += [ok for _, ok in _async_checks(rows) if ok is not None]
    return sum(ok is True for ok in verdicts), len(verdicts)


def render(data: Mapping[str, Any]) -> str:
    """The whole Markdown report of a ``distributed.json`` document: header, both tables, targets met.

    Args:
        data: the document (``machine_info``, ``command``, ``rows``).

    Returns:
        The report.

    Example:
        >>> print(render({"machine_info": {"cpu_count": 2}, "command": "python -m benchmarks.distributed_bench",
        ...               "rows": []}).splitlines()[-1])
        Targets met: 0/0
    """
    info = data.get("machine_info", {})
    parts = [str(info.get("platform", "?")), f"{info.get('cpu_count', '?')} CPUs"]
    parts += [f"{info.get('world_size', WORLD_SIZE)} gloo ranks, {info.get('torch_num_threads', '?')} torch threads"]
    parts += [f"{name} {info.get(name, '?')}" for name in ("torch", "torchmetrics", "torchmetrics_async")]
    rows = data.get("rows", [])
    met, judged = _targets(rows)
    return "\n".join(
        [
            "Machine: " + " · ".join(parts) + (f" · {data['datetime']}" if data.get("datetime") else ""),
            f"Command: `{data.get('command', '?')}`",
            "",
            "sync+compute of the article's 5-metric MetricCollection (`collection.compute()` on 2 ranks): collectives"
            " per call and median host time per call; ratio = accelerated / torchmetrics (lower is better).",
            "",
            render_sync_table(rows),
            "",
            "AsyncMetricCollector over the accelerated collection; training step = the demo's CPU model under DDP,"
            " batch 64, five metric updates, with or without collecting every step (median per-step time).",
            "",
            render_async_table(rows),
            "",
            f"Targets met: {met}/{judged}",
        ]
    )


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "unknown"


def main(argv: Sequence[str] | None = None) -> int:
    """Spawn the ranks, run every case, write the JSON and print the report (or only re-render a JSON).

    Args:
        argv: command-line arguments without the program name (default: ``sys.argv[1:]``).

    Returns:
        0 whether or not the targets are met (this is a report, not a check).
    """
    parser = argparse.ArgumentParser(prog="python -m benchmarks.distributed_bench", description=__doc__.split("\n")[0])
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help=f"results file (default {DEFAULT_JSON})")
    parser.add_argument("--report", action="store_true", help="only print the report of an existing --json")
    args = parser.parse_args(argv)
    if not args.report:
        started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        rows = harness.run(_on_rank, world_size=WORLD_SIZE, timeout=600.0)[0]
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        data = {
            "machine_info": {
                "platform": platform.platform(),
                "cpu_count": os.cpu_count(),
                "world_size": WORLD_SIZE,
                "backend": "gloo",
                "torch_num_threads": max(1, cores // WORLD_SIZE),
                "torch": torch.__version__,
                "torchmetrics": torchmetrics.__version__,
                "torchmetrics_async": _version("torchmetrics-async"),
            },
            "command": shlex.join(["python", "-m", "benchmarks.distributed_bench", *(argv or sys.argv[1:])]),
            "datetime": started,
            "method": {
                "budget_s": BUDGET_S,
                "warmup_calls": WARMUP_CALLS,
                "min_rounds": MIN_ROUNDS,
                "max_rounds": MAX_ROUNDS,
                "loop_rounds": LOOP_ROUNDS,
                "loop_steps": LOOP_STEPS,
            },
            "targets": TARGETS,
            "rows": rows,
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(data, indent=2) + "\n")
    print(render(json.loads(args.json.read_text())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
