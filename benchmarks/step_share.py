"""The article's question, measured: what share of a training step the metrics take, per mode.

Used by ``scripts/gpu-check`` (``benchmarks/gpu_check.py``): the ``table``, ``overlap`` and ``cuda_graphs`` sections.

- :func:`step_table`: for each ``(model, batch, image size)``, the step time of the demo's training loop in each of
  :data:`MODES` (no metrics; torchmetrics; accelerated; accelerated with the collector), the metrics' share of the step
  ``(mode - none) / none`` and the host syncs per step and per log. Every mode trains its own copy of the model (same
  seed) on the same device-resident batches. After one warm-up block per mode, ``repeats`` rounds each run one timed
  block of every mode, the order rotated every round, so drift hits every mode alike. A block is whole logging
  intervals, timed from one device synchronize to the next (the loop itself never waits for the device, as a real one
  does not). The share is the median over rounds of the round's ``(mode - none) / none`` (paired in time), with its
  minimum and maximum. Syncs are counted afterwards in a separate block with the counters on (counting costs host time,
  so timed blocks run without them).
- :func:`overlap_trace` (CUDA): a ``torch.profiler`` trace (CUDA activity) of the collector mode's loop (ResNet-18,
  batch 128, logging every 20 steps), summarised by :func:`benchmarks.gpu_check.summarize_trace`: how much of the side
  stream's time ran while main-stream kernels ran.
- :func:`compiled_step` and :func:`cuda_graph_check`: a training step whose forward, loss and metric updates
  (accuracy, F1, mean loss in a ``MetricCollection``) are one ``torch.compile(fullgraph=True)`` graph; on CUDA with
  ``mode="reduce-overhead"`` (CUDA graphs), its values against eager, its step time against the same step without
  metrics, and a ``torch.cuda.graph`` capture of the accelerated updates.

Example:
    >>> table = step_table([("small_cnn", 4, 8)], "cpu", steps_per_block=2, log_every=2, repeats=3, warmup_blocks=0)
    >>> row = table["rows"][0]
    >>> sorted(row["modes"]) == sorted(MODES), row["modes"]["accelerated"]["syncs_per_step"]
    (True, 0.0)
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torchmetrics
from torch import nn

from tools import demo
from torchmetrics_async import accelerate
from torchmetrics_async.testing import count_host_syncs

__all__ = ["MODES", "NO_METRICS", "Loop", "compiled_step", "cuda_graph_check", "overlap_trace", "step_table"]

NO_METRICS = "none"
MODES = (NO_METRICS, *demo.MODES, demo.ASYNC_MODE)
MODELS: dict[str, Callable[[int], nn.Module]] = {"small_cnn": demo.small_cnn, "resnet18": demo.resnet18}
NUM_CLASSES = 1000


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _batches(count: int, batch_size: int, image_size: int, device: torch.device, seed: int) -> list:
    """``count`` batches on ``device`` (the loop cycles through them: no host-to-device copy in the timed steps)."""
    generator = torch.Generator().manual_seed(seed)
    labels = torch.arange(count * batch_size) % NUM_CLASSES
    return [
        (
            torch.randn(batch_size, 3, image_size, image_size, generator=generator).to(device),
            labels[i * batch_size : (i + 1) * batch_size].to(device),
        )
        for i in range(count)
    ]


class Loop:
    """One mode's training loop (the demo's: SGD, cross entropy, the article's five metrics), run block by block.

    Example:
        >>> batches = _batches(2, 4, 8, torch.device("cpu"), 0)
        >>> loop = Loop("accelerated", "small_cnn", torch.device("cpu"), log_every=2, batches=batches)
        >>> loop.count(2)
        (0.0, 10.0)
    """

    def __init__(
        self, mode: str, model: str, device: torch.device, log_every: int, batches: list, seed: int = 0
    ) -> None:
        torch.manual_seed(seed)
        self.model = MODELS[model](NUM_CLASSES).to(device)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01)
        self.criterion = nn.CrossEntropyLoss()
        self.device = torch.device(device)
        self.log_every = log_every
        self.batches = batches
        self.steps = 0
        self.metrics: dict[str, torchmetrics.Metric] = {}
        self.logging: Any = None
        if mode != NO_METRICS:
            self.metrics = {name: metric.to(device) for name, metric in demo.build_metrics(NUM_CLASSES).items()}
            self.logging = demo._Logging(mode, self.metrics, distributed=False)
            self.logging.counting = False
        self.update_syncs = 0
        self.counting = False

    def step(self) -> None:
        """One training step, its metric updates, and the logging step every ``log_every`` steps."""
        images, labels = self.batches[self.steps % len(self.batches)]
        self.optimizer.zero_grad(set_to_none=True)
        output = self.model(images)
        loss = self.criterion(output, labels)
        loss.backward()
        self.optimizer.step()
        if self.metrics:
            if self.counting:
                with count_host_syncs(record_events=False) as syncs:
                    demo.update_metrics(self.metrics, loss, output, labels)
                self.update_syncs += syncs.total
            else:
                demo.update_metrics(self.metrics, loss, output, labels)
        self.steps += 1
        if self.logging is not None and self.steps % self.log_every == 0:
            self.logging.log()

    def block(self, steps: int) -> float:
        """Run ``steps`` steps; the mean step time in ms, from a device synchronize to the next."""
        _synchronize(self.device)
        start = time.perf_counter()
        for _ in range(steps):
            self.step()
        _synchronize(self.device)
        return 1000 * (time.perf_counter() - start) / steps

    def count(self, steps: int) -> tuple[float, float]:
        """Run ``steps`` steps with the host-sync counters on: ``(syncs per step in the updates, syncs per log)``."""
        if self.logging is None:
            self.block(steps)
            return 0.0, 0.0
        self.counting = self.logging.counting = True
        self.update_syncs = self.logging.host_syncs = self.logging.logs = 0
        try:
            self.block(steps)
        finally:
            self.counting = self.logging.counting = False
        return self.update_syncs / steps, self.logging.host_syncs / max(self.logging.logs, 1)

    def finish(self) -> None:
        """Collect the collector's last window and release it."""
        if self.logging is not None:
            self.logging.finish()


def _spread(values: Sequence[float]) -> dict[str, float]:
    median = statistics.median(values)
    return {
        "median": median,
        "min": min(values),
        "max": max(values),
        "spread_pct": 100 * (max(values) - min(values)) / median,
    }


def _row(
    model: str,
    batch_size: int,
    image_size: int,
    device: torch.device,
    steps_per_block: int,
    log_every: int,
    repeats: int,
    warmup_blocks: int,
    seed: int,
) -> dict[str, Any]:
    batches = _batches(4, batch_size, image_size, device, seed)
    loops = {mode: Loop(mode, model, device, log_every, batches, seed) for mode in MODES}
    for _ in range(warmup_blocks):
        for loop in loops.values():
            loop.block(steps_per_block)
    times: dict[str, list[float]] = {mode: [] for mode in MODES}
    for round_ in range(repeats):
        order = MODES[round_ % len(MODES) :] + MODES[: round_ % len(MODES)]
        for mode in order:
            times[mode].append(loops[mode].block(steps_per_block))
    counts = {mode: loop.count(log_every) for mode, loop in loops.items()}
    for loop in loops.values():
        loop.finish()
    base = times[NO_METRICS]
    modes: dict[str, Any] = {}
    for mode in MODES:
        shares = [100 * (t - b) / b for t, b in zip(times[mode], base, strict=True)]
        modes[mode] = {
            "step_ms": _spread(times[mode]),
            "share_pct": None if mode == NO_METRICS else _spread_share(shares),
            "syncs_per_step": counts[mode][0],
            "syncs_per_log": counts[mode][1],
            "step_ms_per_round": times[mode],
        }
    return {"model": model, "batch_size": batch_size, "image_size": image_size, "modes": modes}


def _spread_share(shares: Sequence[float]) -> dict[str, float]:
    return {"median": statistics.median(shares), "min": min(shares), "max": max(shares)}


def step_table(
    configs: Sequence[tuple[str, int, int]],
    device: str | torch.device,
    steps_per_block: int = 40,
    log_every: int = 20,
    repeats: int = 5,
    warmup_blocks: int = 1,
    seed: int = 0,
) -> dict[str, Any]:
    """The article's table: per ``(model, batch size, image size)``, every mode's step time, share and syncs.

    Args:
        configs: ``(model, batch size, image side)``; models: ``"small_cnn"``, ``"resnet18"``.
        device: where to train.
        steps_per_block: steps per timed block (a multiple of ``log_every``: every block logs as often).
        log_every: the logging interval in steps.
        repeats: timed rounds (at least 3: median and spread).
        warmup_blocks: untimed blocks per mode first (cuDNN autotuning, allocator, the collector's first window).
        seed: model and data seed.

    Returns:
        ``{"device", "steps_per_block", "log_every", "repeats", "rows": [{"model", "batch_size", "image_size",
        "modes": {mode: {"step_ms", "share_pct", "syncs_per_step", "syncs_per_log", "step_ms_per_round"}}}]}``.
    """
    if steps_per_block % log_every:
        raise ValueError(f"steps_per_block ({steps_per_block}) must be a multiple of log_every ({log_every})")
    if repeats < 3:
        raise ValueError(f"repeats must be at least 3 (median and spread), got {repeats}")
    dev = torch.device(device)
    if dev.type == "cuda":
        torch.backends.cudnn.benchmark = True
    rows = [
        _row(model, batch, image, dev, steps_per_block, log_every, repeats, warmup_blocks, seed)
        for model, batch, image in configs
    ]
    return {
        "device": str(dev),
        "steps_per_block": steps_per_block,
        "log_every": log_every,
        "repeats": repeats,
        "warmup_blocks": warmup_blocks,
        "rows": rows,
    }


def format_table(table: dict[str, Any]) -> str:
    """The table as Markdown: one line per (model, batch, mode).

    Example:
        >>> table = step_table([("small_cnn", 4, 8)], "cpu", steps_per_block=2, log_every=2, repeats=3, warmup_blocks=0)
        >>> format_table(table).splitlines()[0].split(" | ")[:3]
        ['| model', 'batch', 'mode']
    """
    lines = [
        "| model | batch | mode | step ms (median) | spread % | metrics share % (median [min, max]) | syncs/step"
        " | syncs/log |",
        "|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    for row in table["rows"]:
        for mode, result in row["modes"].items():
            step, share = result["step_ms"], result["share_pct"]
            shown = "—" if share is None else f"{share['median']:+.1f} [{share['min']:+.1f}, {share['max']:+.1f}]"
            lines.append(
                f"| {row['model']} {row['image_size']}px | {row['batch_size']} | {mode} | {step['median']:.2f} |"
                f" {step['spread_pct']:.1f} | {shown} | {result['syncs_per_step']:.2f} |"
                f" {result['syncs_per_log']:.2f} |"
            )
    return "\n".join(lines)


def overlap_trace(
    outdir: Path, steps: int = 60, log_every: int = 20, batch_size: int = 128, image_size: int = 224
) -> dict[str, Any]:
    """Trace the collector mode's ResNet-18 loop on CUDA; how much side-stream time overlapped main-stream kernels.

    Args:
        outdir: where ``overlap-trace.json`` goes.
        steps: profiled steps (whole logging intervals; each log collects the window before and schedules this one).
        log_every: the logging interval.
        batch_size: images per step.
        image_size: image side.

    Returns:
        :func:`benchmarks.gpu_check.summarize_trace`'s summary, the main stream's busy share of the profiled loop
        (near 100 %: GPU-bound, the main stream had work to overlap with) and the host time of each logging step.
    """
    from torch.profiler import ProfilerActivity, profile

    from benchmarks.gpu_check import summarize_trace

    device = torch.device("cuda")
    torch.backends.cudnn.benchmark = True
    loop = Loop(demo.ASYNC_MODE, "resnet18", device, log_every, _batches(4, batch_size, image_size, device, 0))
    loop.block(2 * log_every)  # warm-up: cuDNN autotuning, allocator, pinned host blocks, two windows
    log_ms: list[float] = []
    logging_step = loop.logging.log

    def timed_log() -> None:
        start = time.perf_counter()
        logging_step()
        log_ms.append(1000 * (time.perf_counter() - start))

    loop.logging.log = timed_log
    trace_path = outdir / "overlap-trace.json"
    _synchronize(device)
    start = time.perf_counter()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            loop.step()
        _synchronize(device)
    loop_ms = 1000 * (time.perf_counter() - start)
    prof.export_chrome_trace(str(trace_path))
    loop.finish()
    summary = summarize_trace(json.loads(trace_path.read_text()))
    busy = summary.get("main_busy_ms")
    return {
        "model": f"resnet18, batch {batch_size}, {image_size}x{image_size}",
        "steps": steps,
        "log_every": log_every,
        "profiled_loop_ms": loop_ms,
        "main_busy_pct_of_loop": None if busy is None else 100 * busy / loop_ms,
        "host_ms_per_log": log_ms,
        "trace": trace_path.name,
        **summary,
    }


def compiled_step(model: nn.Module, metrics: Any) -> Callable[[torch.Tensor, torch.Tensor], tuple]:
    """The part of a training step that one graph can hold: forward, loss and the metric updates (no backward).

    ``metrics``: a collection with ``"acc"``, ``"f1"`` (``(logits, target)``) and ``"loss"`` (the loss), or ``None``
    for the same step without metrics. Returns ``(loss, logits detached)``: an eager twin updated with the logits must
    end with the same values.

    Example:
        >>> step = compiled_step(demo.small_cnn(4), step_metrics(4))
        >>> loss, logits = step(torch.zeros(2, 3, 8, 8), torch.zeros(2, dtype=torch.long))
        >>> loss.shape, logits.shape
        (torch.Size([]), torch.Size([2, 4]))
    """

    def step(images: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        output = model(images)
        loss = nn.functional.cross_entropy(output, labels)
        if metrics is not None:
            update_step_metrics(metrics, loss, output, labels)
        return loss, output.detach()

    return step


def step_metrics(num_classes: int) -> torchmetrics.MetricCollection:
    """Accuracy, F1 and the mean loss, as one accelerated ``MetricCollection`` (members updated one by one).

    Example:
        >>> sorted(step_metrics(4))
        ['acc', 'f1', 'loss']
    """
    members = {
        "acc": torchmetrics.Accuracy(task="multiclass", num_classes=num_classes),
        "f1": torchmetrics.F1Score(task="multiclass", num_classes=num_classes),
        "loss": torchmetrics.MeanMetric(),
    }
    return accelerate(torchmetrics.MetricCollection(members, compute_groups=False))


def update_step_metrics(metrics: Any, loss: torch.Tensor, output: torch.Tensor, labels: torch.Tensor) -> None:
    """The step's updates of :func:`step_metrics`' collection."""
    metrics["acc"].update(output.detach(), labels)
    metrics["f1"].update(output.detach(), labels)
    metrics["loss"].update(loss.detach())


def _train(step: Callable, model: nn.Module, batches: list, mark_step: bool) -> Callable[[int], list]:
    """``run(n)``: ``n`` SGD steps through ``step``; each step's loss and logits (cloned: graph outputs are reused)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    done = [0]
    mark = getattr(torch.compiler, "cudagraph_mark_step_begin", None) if mark_step else None

    def run(n: int) -> list:
        out = []
        for _ in range(n):
            images, labels = batches[done[0] % len(batches)]
            done[0] += 1
            if mark is not None:
                mark()  # a new iteration: the previous replay's outputs may be overwritten
            optimizer.zero_grad(set_to_none=True)
            loss, logits = step(images, labels)
            loss.backward()
            optimizer.step()
            out.append((loss.detach().clone(), logits.clone(), labels))
        return out

    return run


def cuda_graph_check(
    steps: int = 30, batch_size: int = 128, image_size: int = 32, repeats: int = 5, block: int = 20
) -> dict[str, Any]:
    """``torch.compile(mode="reduce-overhead", fullgraph=True)`` of :func:`compiled_step` on CUDA, and a raw capture.

    Returns:
        Graph breaks and CUDA-graph skips of the compiled step, whether its metric values equal an eager twin's updated
        with the same logits, the step time with and without metrics (median over ``repeats`` interleaved blocks),
        and whether a ``torch.cuda.graph`` capture of the accelerated updates replays to eager's values.
    """
    import torch._dynamo
    from torch._dynamo.utils import counters

    from tests.parity import assert_same

    device = torch.device("cuda")
    batches = _batches(4, batch_size, image_size, device, 0)
    result: dict[str, Any] = {
        "torch": torch.__version__,
        "model": f"small_cnn, batch {batch_size}, {image_size}x{image_size}",
    }
    torch._dynamo.reset()
    counters.clear()
    runs: dict[str, Callable[[int], list]] = {}
    collections: dict[str, Any] = {}
    for name, with_metrics in (("with_metrics", True), ("without_metrics", False)):
        torch.manual_seed(0)
        model = demo.small_cnn(NUM_CLASSES).to(device)
        collections[name] = step_metrics(NUM_CLASSES).to(device) if with_metrics else None
        step = torch.compile(compiled_step(model, collections[name]), mode="reduce-overhead", fullgraph=True)
        runs[name] = _train(step, model, batches, mark_step=True)
    twin = step_metrics(NUM_CLASSES).to(device)
    for loss, logits, labels in runs["with_metrics"](steps):  # compiles, records the graph, then replays it
        update_step_metrics(twin, loss, logits, labels)
    result["graph_breaks"] = sum(counters["graph_break"].values())
    result["cudagraph_skips"] = dict(counters["inductor"]).get("cudagraph_skips", 0)
    result["steps_checked"] = steps
    try:
        assert_same(collections["with_metrics"].compute(), twin.compute(), rtol=1e-5, atol=1e-6)
        result["values_equal_eager"] = True
    except AssertionError as err:
        result["values_equal_eager"] = False
        result["values_difference"] = str(err)[:500]
    runs["without_metrics"](steps)  # its compile and capture, outside the timing
    times: dict[str, list[float]] = {name: [] for name in runs}
    for round_ in range(repeats):
        for name in list(runs)[round_ % 2 :] + list(runs)[: round_ % 2]:
            _synchronize(device)
            start = time.perf_counter()
            runs[name](block)
            _synchronize(device)
            times[name].append(1000 * (time.perf_counter() - start) / block)
    result["step_ms"] = {name: _spread(values) for name, values in times.items()}
    shares = [100 * (w - b) / b for w, b in zip(times["with_metrics"], times["without_metrics"], strict=True)]
    result["metrics_share_pct"] = _spread_share(shares)
    result["raw_capture"] = _raw_capture(device, batch_size)
    return result


def _raw_capture(device: torch.device, batch_size: int, replays: int = 10) -> dict[str, Any]:
    """Capture the accelerated updates with ``torch.cuda.graph`` and replay them on new data copied into the inputs."""
    from tests.parity import assert_same

    metrics, twin = step_metrics(NUM_CLASSES).to(device), step_metrics(NUM_CLASSES).to(device)
    generator = torch.Generator(device=device).manual_seed(1)
    logits = torch.randn(batch_size, NUM_CLASSES, device=device, generator=generator)
    labels = torch.randint(0, NUM_CLASSES, (batch_size,), device=device, generator=generator)
    loss = logits.square().mean()
    try:
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):  # warm-up on a side stream, as torch.cuda.graph's documentation asks
            for _ in range(3):
                update_step_metrics(metrics, loss, logits, labels)
        torch.cuda.current_stream(device).wait_stream(side)
        metrics.reset()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            update_step_metrics(metrics, loss, logits, labels)
        for _ in range(replays):
            logits.copy_(torch.randn(batch_size, NUM_CLASSES, device=device, generator=generator))
            labels.copy_(torch.randint(0, NUM_CLASSES, (batch_size,), device=device, generator=generator))
            loss.copy_(logits.square().mean())
            graph.replay()
            update_step_metrics(twin, loss, logits, labels)
        values, expected = metrics.compute(), twin.compute()
        assert_same(values, expected, rtol=1e-5, atol=1e-6)
    except Exception as err:  # the limit, stated: what the capture or the replay raised
        return {"status": f"failed: {type(err).__name__}: {err}"[:500]}
    counts = {name: metrics[name].update_count for name in metrics}
    return {
        "status": "ok: replays give eager's values",
        "replays": replays,
        # The Python-side update count is not in the graph: it counts the capture, not the replays.
        "update_count_after_replays": counts,
    }
