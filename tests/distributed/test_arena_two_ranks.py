"""The state arena on 2 gloo ranks: the collector's planned all_reduce (a collective per bucket), torchmetrics' values.

Expected values are torchmetrics' own: the same per-rank data fed to torchmetrics' classes, computed with torchmetrics'
sync. One spawn for the module.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torchmetrics

import torchmetrics_async as ta
from tests.distributed import harness
from tests.distributed.harness import scenario
from torchmetrics_async import AsyncMetricCollector

pytestmark = pytest.mark.skipif(
    not torch.distributed.is_available() or not torch.distributed.is_gloo_available(), reason="needs gloo"
)

CLASSES = 4


def _members(make: Any) -> dict[str, Any]:
    half = make.SumMetric()
    half.set_dtype(torch.float16)  # travels in float32, comes back exact
    return {
        "loss": make.MeanMetric(),
        "peak": make.MaxMetric(),
        "low": make.MinMetric(),
        "small": half,
        "acc": make.classification.MulticlassAccuracy(num_classes=CLASSES),
        "f1": make.classification.MulticlassF1Score(num_classes=CLASSES, average="macro"),
    }


def _update(collection: Any, rank: int, step: int) -> None:
    generator = torch.Generator().manual_seed(100 * rank + step)
    values = torch.rand(6, generator=generator) * (rank + 1)
    logits = torch.randn(6, CLASSES, generator=generator)
    labels = torch.randint(0, CLASSES, (6,), generator=generator)
    for name, metric in collection.items(keep_base=True):
        if name in ("acc", "f1"):
            metric.update(logits, labels)
        else:
            metric.update(values.to(metric.dtype) if name == "small" else values)


def _reference(rank: int, steps: range, change: Any = None) -> dict[str, float]:
    reference = torchmetrics.MetricCollection(_members(torchmetrics), compute_groups=False)
    for step in steps:
        if change is not None and step == steps[-1]:
            change(reference)
        _update(reference, rank, step)
    return {name: float(value) for name, value in reference.compute().items()}


def _set_sum(collection: Any) -> None:
    collection["small"].sum_value = torch.tensor(7.0, dtype=torch.float16)


def windows(rank: int, world_size: int) -> dict[str, Any]:
    collection = ta.MetricCollection(_members(ta), compute_groups=False)
    collector = AsyncMetricCollector(collection)
    collector.bind()
    got, expected, counted, plans = [], [], [], []
    for window in range(3):
        steps = range(2 * window, 2 * window + 2)
        change = _set_sum if window == 2 else None  # a state replaced mid-run (by the user), on every rank
        for step in steps:
            if change is not None and step == steps[-1]:
                change(collection)
            _update(collection, rank, step)
        with harness.count_collectives() as scheduled:
            collector.schedule_collection()
        counted.append(scheduled.as_dict())
        got.append(collector.collect_results())
        expected.append(_reference(rank, steps, change))
        plans.append(id(collector._arena_sync[0]) if collector._arena_sync else None)
    return {
        "got": got,
        "expected": expected,
        "collectives": counted,
        "buckets": len(collector._arena_sync[0].buckets),
        "plans": plans,
        "live_plans": collector._live_arena.plans,
    }


def added(rank: int, world_size: int) -> dict[str, Any]:
    collection = ta.MetricCollection({"loss": ta.MeanMetric()}, compute_groups=False)
    collector = AsyncMetricCollector(collection)
    collector.bind()
    collection["loss"].update(torch.tensor(float(rank)))
    collector.schedule_collection()
    first = collector.collect_results()
    collector.unbind()
    collection.add_metrics({"top": ta.MaxMetric()})  # a metric added to the collection: a new collector plans it
    collector = AsyncMetricCollector(collection)
    collector.bind()
    collection["loss"].update(torch.tensor(2.0 + rank))
    collection["top"].update(torch.tensor(10.0 * rank))
    collector.schedule_collection()
    second = collector.collect_results()
    return {"first": first, "second": second, "planned": bool(collector._arena_sync)}


def run_all(rank: int, world_size: int) -> dict[str, Any]:
    return harness.run_scenarios({"windows": windows, "added": added}, rank, world_size)


@pytest.fixture(scope="module")
def ranks() -> list[dict[str, Any]]:
    return harness.run(run_all, world_size=2)


def test_collector_windows_match_torchmetrics(ranks):
    for result in scenario(ranks, "windows"):
        assert result["got"] == result["expected"]


def test_one_all_reduce_per_bucket_and_a_plan_kept_until_a_state_is_replaced(ranks):
    for result in scenario(ranks, "windows"):
        assert result["collectives"] == [{"all_reduce": result["buckets"]}] * 3
        first, second, third = result["plans"]
        assert first is not None
        assert first == second  # planned once
        assert third != second  # the replaced state made the arenas and the sync plan again
        assert result["live_plans"] == 2


def test_a_metric_added_to_a_collection(ranks):
    for result in scenario(ranks, "added"):
        assert result["first"] == {"loss": 0.5}
        assert result["second"] == {"loss": 2.5, "top": 10.0}
        assert result["planned"]
