"""NCCL with one rank (world size 1): the fused sync and the collector over a real NCCL process group."""

import socket

import pytest
import torch
import torch.distributed as dist

import torchmetrics_async as ta
from tests.cuda._helpers import NUM_CLASSES, as_python
from torchmetrics_async import AsyncMetricCollector
from torchmetrics_async.classification import MulticlassAccuracy
from torchmetrics_async.distributed import sync_metrics
from torchmetrics_async.testing import count_collectives, count_host_syncs

pytestmark = pytest.mark.cuda


@pytest.fixture
def nccl(device):
    if not dist.is_available() or not dist.is_nccl_available():
        pytest.skip("this torch build has no NCCL")
    if dist.is_initialized():
        pytest.skip("a process group is already initialised")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1, device_id=device)
    try:
        warm = torch.ones(1, device=device)
        dist.all_reduce(warm)  # the communicator is created by the first collective, outside the checked regions
        torch.cuda.synchronize()
        yield
    finally:
        dist.destroy_process_group()


def _metrics(device):
    return {
        "mean": ta.MeanMetric().to(device),
        "max": ta.MaxMetric().to(device),
        "acc": MulticlassAccuracy(num_classes=NUM_CLASSES).to(device),
    }


def _feed(metrics, device, seed):
    g = torch.Generator(device=device).manual_seed(seed)
    for _ in range(3):
        values = torch.randn(32, generator=g, device=device)
        logits = torch.randn(32, NUM_CLASSES, generator=g, device=device)
        target = torch.randint(0, NUM_CLASSES, (32,), generator=g, device=device)
        metrics["mean"].update(values)
        metrics["max"].update(values)
        metrics["acc"].update(logits, target)


def _gathers(counted):
    # One flat all_gather: ``all_gather_single`` where torch has it, else ``all_gather_into_tensor`` (torch < 2.13).
    counts = counted.as_dict()
    return counts.get("all_gather_single", 0) + counts.get("all_gather_into_tensor", 0)


def _states(metrics):
    return {name: as_python({attr: getattr(m, attr) for attr in m._defaults}) for name, m in metrics.items()}


def _buckets(metrics):
    out = set()
    for metric in metrics.values():
        for attr, fx in metric._reductions.items():
            out.add((getattr(metric, attr).dtype, getattr(fx, "__name__", str(fx))))
    return out


def test_sync_metrics_over_nccl_is_fused_and_keeps_values(device, nccl):
    metrics, reference = _metrics(device), _metrics(device)
    _feed(metrics, device, 0)
    _feed(reference, device, 0)
    local = {name: as_python(metric.compute()) for name, metric in reference.items()}
    with count_collectives() as counted:
        sync_metrics(metrics)
    # the plan check (one fixed-size all_gather) and at most one all_reduce per bucket
    assert _gathers(counted) == 1, counted.as_dict()
    assert 2 <= counted.total <= len(_buckets(metrics)) + 1, counted.as_dict()
    assert all(metric._is_synced for metric in metrics.values())
    assert _states(metrics) == _states(reference)  # one rank: the synced states are the local ones
    for metric in metrics.values():
        metric.unsync()  # compute() syncs itself: after sync_metrics() it raises "already synced", as torchmetrics does
    assert {name: as_python(metric.compute()) for name, metric in metrics.items()} == local


def test_collector_over_nccl_schedules_without_a_host_wait(device, nccl):
    live, reference = _metrics(device), _metrics(device)
    collector = AsyncMetricCollector(live)
    collector.bind()
    for seed in range(3):
        _feed(live, device, seed)
        _feed(reference, device, seed)
        # bind() agreed on the plan: the window's plan check rides in the float32 sum bucket launched here, and is
        # read in collect_results()
        with count_collectives() as counted, count_host_syncs() as syncs:
            collector.schedule_collection()
        assert syncs.total == 0, syncs.summary()
        assert _gathers(counted) == 0, counted.as_dict()
        assert counted.total >= 2
        expected = {name: as_python(metric.compute()) for name, metric in reference.items()}
        for metric in reference.values():
            metric.reset()
        assert collector.collect_results() == expected
    collector.unbind()
