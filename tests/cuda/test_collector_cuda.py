"""AsyncMetricCollector on real CUDA streams: side stream, events, pinned transfer, and stress.

- the side stream, the events and the pinned host copy are what the collector says it uses;
- lifecycle with ``torch.cuda._sleep`` queued on the main stream: every window equals eager, exactly;
- a side stream delayed inside the stream seam while the main stream appends and mutates new tensors, drops its own
  references and fills fresh allocations with NaN: the window in flight is untouched;
- a launch that fails (in the sync, in the transfer): nothing lost, the next window is exact;
- ~200 ms queued on the main stream: ``schedule_collection()`` returns in milliseconds without a host sync and
  ``collect_results()`` waits on the window's event;
- updates captured in a CUDA graph and replayed, scheduled and collected outside the capture: equal eager, the live
  states keep their addresses.

Exact means ``==`` on the Python values: the collector's compute runs the same kernels on the same states as eager.
"""

from __future__ import annotations

import contextlib
import math
import time
import warnings
from typing import Any

import pytest
import torch

import torchmetrics_async as ta
from tests.cuda._helpers import NUM_CLASSES, as_python, sleep_ms
from torchmetrics_async import AsyncMetricCollector
from torchmetrics_async.classification import MulticlassAccuracy, MulticlassF1Score
from torchmetrics_async.collector import CudaStreamOps
from torchmetrics_async.collector import collector as collector_module
from torchmetrics_async.testing import HostSyncError, count_host_syncs, no_host_sync

pytestmark = pytest.mark.cuda

BATCH = 64


def make_metrics(device: torch.device, cat: str | None = "warn") -> dict[str, Any]:
    """Aggregators, a list state (``CatMetric`` with ``nan_strategy=cat``; ``None``: none) and two classifiers."""
    metrics: dict[str, Any] = {
        "mean": ta.MeanMetric(),
        "sum": ta.SumMetric(),
        "max": ta.MaxMetric(),
        "acc": MulticlassAccuracy(num_classes=NUM_CLASSES, average="macro"),
        "f1": MulticlassF1Score(num_classes=NUM_CLASSES),
    }
    if cat is not None:
        metrics["cat"] = ta.CatMetric(nan_strategy=cat)
    return {name: metric.to(device) for name, metric in metrics.items()}


class Feeder:
    """Device-generated batches; feeds the live metrics and clones of each batch to an eager reference."""

    def __init__(self, device: torch.device, seed: int = 0) -> None:
        self.device = device
        self.generator = torch.Generator(device=device).manual_seed(seed)

    def batch(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        g, d = self.generator, self.device
        values = torch.randn(BATCH, generator=g, device=d)
        logits = torch.randn(BATCH, NUM_CLASSES, generator=g, device=d)
        target = torch.randint(0, NUM_CLASSES, (BATCH,), generator=g, device=d)
        return values, logits, target

    def feed(self, live: dict, reference: dict, skip_cat_reference: bool = False) -> tuple[torch.Tensor, ...]:
        values, logits, target = self.batch()
        for name, metric in live.items():
            args = (logits, target) if name in ("acc", "f1") else (values,)
            metric.update(*args)
            if not (name == "cat" and skip_cat_reference):
                reference[name].update(*(arg.clone() for arg in args))
        return values, logits, target


def eager(reference: dict) -> dict:
    """The reference's values as the collector returns them, then reset."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = {name: as_python(metric.compute()) for name, metric in reference.items()}
    for metric in reference.values():
        metric.reset()
    return out


def test_side_stream_events_and_pinned_transfer(device):
    live = make_metrics(device)
    collector = AsyncMetricCollector(live)
    collector.bind()
    assert isinstance(collector._ops, CudaStreamOps)
    side = collector._side
    assert isinstance(side, torch.cuda.Stream)
    assert side != torch.cuda.current_stream(device)
    reference = make_metrics(device)
    feeder = Feeder(device)
    for _ in range(3):
        feeder.feed(live, reference)
    collector.schedule_collection()
    assert isinstance(collector._done, torch.cuda.Event)
    _, transfer = collector._outcome
    hosts = transfer.hosts
    assert len(hosts) == 1  # every result and flag in one copy
    assert all(host.device.type == "cpu" and host.is_pinned() for host in hosts)
    assert all(buffer.device.type == "cuda" for buffer in transfer.device_buffers)
    assert collector.collect_results() == eager(reference)
    collector.unbind()


def test_lifecycle_with_sleeps_on_the_main_stream_is_exact_each_window(device, cycles):
    live, reference = make_metrics(device), make_metrics(device)
    collector = AsyncMetricCollector(live)
    collector.bind()
    feeder = Feeder(device, seed=1)
    expected: list[dict] = []
    got: list[dict] = []
    for window in range(5):
        for step in range(3):
            sleep_ms(cycles, 20)  # the batch below is produced after 20 ms of main-stream work
            feeder.feed(live, reference)
            if step == 1 and collector.is_scheduled:  # collect the previous window mid-way, as a training loop does
                got.append(collector.collect_results())
        expected.append(eager(reference))
        collector.schedule_collection()
        assert window == 0 or len(got) == window
    got.append(collector.collect_results())
    assert got == expected
    collector.unbind()


class DelayedOps(CudaStreamOps):
    """CudaStreamOps whose side-stream work starts only after ``delay_ms`` of spinning on the side stream."""

    def __init__(self, device: torch.device, cycles: float, delay_ms: float) -> None:
        super().__init__(device)
        self.cycles = cycles
        self.delay_ms = delay_ms

    @contextlib.contextmanager
    def use(self, stream: Any):
        with torch.cuda.stream(stream):
            sleep_ms(self.cycles, self.delay_ms)
            yield


def test_delayed_side_stream_while_the_main_stream_mutates_and_reallocates(device, cycles):
    live, reference = make_metrics(device), make_metrics(device)
    collector = AsyncMetricCollector(live, stream_ops=DelayedOps(device, cycles, delay_ms=150))
    collector.bind()
    feeder = Feeder(device, seed=2)
    window_inputs = [feeder.feed(live, reference) for _ in range(4)]
    expected_first = eager(reference)
    collector.schedule_collection()  # the side stream spins 150 ms before it reads anything
    # Main stream, meanwhile: drop our references to the window's inputs (CatMetric's list holds some of them),
    # fill fresh allocations of every size with NaN (they reuse whatever the allocator got back)...
    del window_inputs
    junk = []
    for _ in range(8):
        for shape in ((BATCH,), (BATCH, NUM_CLASSES), (NUM_CLASSES,), (4 * BATCH,), ()):
            junk.append(torch.empty(shape, device=device).fill_(math.nan))
    # ...and append new tensors to the live metrics and mutate them in place. CatMetric keeps appended tensors by
    # reference (as torchmetrics does), so the next window sees the mutation; the reference's CatMetric is fed the
    # mutated values.
    for _ in range(3):
        values, _, _ = feeder.feed(live, reference, skip_cat_reference=True)
        values.mul_(-3.0)
        reference["cat"].update(values.clone())
    del junk
    assert collector.collect_results() == expected_first
    expected_second = eager(reference)
    collector.schedule_collection()
    assert collector.collect_results() == expected_second
    collector.unbind()


class FailingTransferOps(CudaStreamOps):
    def __init__(self, device: torch.device) -> None:
        super().__init__(device)
        self.fail = True

    def to_host(self, tensor: torch.Tensor) -> torch.Tensor:
        if self.fail:
            raise RuntimeError("injected transfer failure")
        return super().to_host(tensor)


@pytest.mark.parametrize("where", ["sync", "transfer"])
def test_failed_launch_loses_nothing(where, device, monkeypatch):
    live, reference = make_metrics(device), make_metrics(device)
    ops = FailingTransferOps(device)
    if where == "sync":
        ops.fail = False

        def boom(*args, **kwargs):
            raise RuntimeError("injected sync failure")

        monkeypatch.setattr(collector_module, "sync_metrics", boom)
    collector = AsyncMetricCollector(live, stream_ops=ops)
    collector.bind()
    feeder = Feeder(device, seed=3)
    for _ in range(3):
        feeder.feed(live, reference)
    with pytest.raises(RuntimeError, match="injected"):
        collector.schedule_collection()
    assert not collector.is_scheduled
    monkeypatch.undo()
    ops.fail = False
    for _ in range(2):  # the window goes on: the failed launch left the live metrics as they were
        feeder.feed(live, reference)
    collector.schedule_collection()
    assert collector.collect_results() == eager(reference)
    feeder.feed(live, reference)
    collector.schedule_collection()
    assert collector.collect_results() == eager(reference)
    collector.unbind()


def test_schedule_returns_at_once_and_collect_waits_on_its_event(device, cycles):
    # A CatMetric under "warn" drops NaNs in compute() by reading masks on the host (the package's one allowed
    # sync), which would wait for the main stream here: "disable" keeps a list state without it.
    live, reference = make_metrics(device, cat="disable"), make_metrics(device, cat="disable")
    collector = AsyncMetricCollector(live)
    collector.bind()
    feeder = Feeder(device, seed=4)
    feeder.feed(live, reference)  # a warm-up window: pinned host blocks and the side stream's first kernels
    collector.schedule_collection()
    assert collector.collect_results() == eager(reference)

    sleep_ms(cycles, 200)
    for _ in range(2):
        feeder.feed(live, reference)  # queued behind the 200 ms
    start = time.perf_counter()
    with no_host_sync():
        collector.schedule_collection()
    schedule_ms = 1000 * (time.perf_counter() - start)
    assert schedule_ms < 50, f"schedule_collection() took {schedule_ms:.1f} ms with 200 ms queued"
    assert not collector._done.query()  # the window's event has not completed: nothing waited for it
    event = collector._done
    start = time.perf_counter()
    values = collector.collect_results()
    collect_ms = 1000 * (time.perf_counter() - start)
    assert event.query()
    assert collect_ms > 100, f"collect_results() returned after {collect_ms:.1f} ms: it did not wait on the event"
    torch.cuda.synchronize()
    assert values == eager(reference)
    collector.unbind()


@pytest.mark.filterwarnings("ignore::UserWarning")  # replays do not count updates: compute() warns "before update"
def test_cuda_graph_replayed_updates_collect_as_eager(device):
    """Updates replayed from a hand-captured CUDA graph, re-captured after each collection (as with torchmetrics).

    ``reset()`` and the collection's snapshot give the live metrics fresh state tensors (what held the old ones keeps
    its values), so a graph captured before writes into tensors the metrics no longer hold: capture again.
    """
    live = make_metrics(device, cat=None)
    reference = make_metrics(device, cat=None)
    collector = AsyncMetricCollector(live)
    collector.bind()
    values = torch.zeros(BATCH, device=device)
    logits = torch.zeros(BATCH, NUM_CLASSES, device=device)
    target = torch.zeros(BATCH, dtype=torch.long, device=device)

    def updates() -> None:
        for name, metric in live.items():
            metric.update(*((logits, target) if name in ("acc", "f1") else (values,)))

    def capture() -> torch.cuda.CUDAGraph:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):  # recorded, not run: the states are unchanged
            updates()
        return graph

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up on a side stream, as CUDA graph capture requires
        for _ in range(3):
            updates()
    torch.cuda.current_stream().wait_stream(side)
    for metric in live.values():
        metric.reset()
    feeder = Feeder(device, seed=5)
    for _ in range(3):
        graph = capture()
        for _ in range(4):
            new_values, new_logits, new_target = feeder.batch()
            values.copy_(new_values)
            logits.copy_(new_logits)
            target.copy_(new_target)
            graph.replay()
            for name, metric in reference.items():
                metric.update(*((new_logits, new_target) if name in ("acc", "f1") else (new_values,)))
        collector.schedule_collection()
        assert collector.collect_results() == eager(reference)
    collector.unbind()


def test_collect_results_waits_once_and_reads_pinned_memory(device):
    live = make_metrics(device, cat=None)  # CatMetric's default NaN strategy reads at schedule time (documented)
    reference = make_metrics(device, cat=None)
    collector = AsyncMetricCollector(live)
    collector.bind()
    feeder = Feeder(device, seed=11)
    for _ in range(3):
        for _ in range(2):
            feeder.feed(live, reference)
        with no_host_sync():
            collector.schedule_collection()
        with count_host_syncs() as syncs:
            got = collector.collect_results()
        assert syncs.total == 1, syncs.by_op  # the done-event's synchronize; the pinned host buffer is then read
        assert syncs.by_op["Event.synchronize"] == 1
        assert got == eager(reference)
    collector.unbind()


def test_schedule_and_collect_inside_a_graph_capture_raise(device):
    metric = ta.SumMetric().to(device)
    collector = AsyncMetricCollector(metric)
    collector.bind()
    metric.update(torch.ones((), device=device))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="inside a CUDA graph capture"), torch.cuda.graph(graph, stream=side):
        collector.schedule_collection()
    collector.schedule_collection()
    assert collector.collect_results() == 1.0
    collector.unbind()


def test_bind_rejects_cpu_and_cuda_metrics(device):
    collector = AsyncMetricCollector({"gpu": ta.SumMetric().to(device), "cpu": ta.SumMetric()})
    with pytest.raises(ValueError, match="several devices"):
        collector.bind()


def test_no_host_sync_flags_a_non_blocking_copy_into_pageable_memory(device):
    source = torch.ones(4, device=device)
    pageable, pinned = torch.empty(4), torch.empty(4, pin_memory=True)
    with pytest.raises(HostSyncError, match="pageable"), no_host_sync():
        pageable.copy_(source, non_blocking=True)
    with no_host_sync():
        pinned.copy_(source, non_blocking=True)
        source.to("cpu", non_blocking=True)  # torch allocates pinned memory for it
