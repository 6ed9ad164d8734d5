"""The fused sync on 2 gloo ranks, window after window: the collector and an accelerated ``MetricCollection``'s
``compute()`` (the plan check, then one all_reduce per bucket), with torchmetrics' values, across resets, a replaced
state, an added member, compute groups and a list state.

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
# The members' all_reduce buckets: float32 sums (means, and the float16 sum travelling in float32), float32 max, float32
# min, int64 sums (the stat scores); the bool flags ride in them.
BUCKETS = 4


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
    got, expected, counted = [], [], []
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
    return {"got": got, "expected": expected, "collectives": counted}


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
    return {"first": first, "second": second}


def _floats(values: dict[str, Any]) -> dict[str, float]:
    return {name: float(value) for name, value in values.items()}


def collection_windows(rank: int, world_size: int) -> dict[str, Any]:
    """compute() twice per window (the second after more updates: the local states were kept), reset between."""
    collection = ta.MetricCollection(_members(ta), compute_groups=False)
    got, expected, counted = [], [], []
    for window in range(3):
        steps = range(3 * window, 3 * window + 3)
        change = _set_sum if window == 2 else None  # a state replaced between computes (by the user), every rank
        for step in steps[:2]:
            _update(collection, rank, step)
        with harness.count_collectives() as first:
            got.append(_floats(collection.compute()))
        expected.append(_reference(rank, steps[:2]))
        if change is not None:
            change(collection)
        _update(collection, rank, steps[2])
        with harness.count_collectives() as second:
            got.append(_floats(collection.compute()))
        expected.append(_reference(rank, steps, change))
        counted.append([first.as_dict(), second.as_dict()])
        collection.reset()
    return {"got": got, "expected": expected, "collectives": counted}


def _scores(make: Any, **kwargs: Any) -> Any:
    names = ("MulticlassAccuracy", "MulticlassPrecision", "MulticlassRecall")
    members = {name: getattr(make.classification, name)(num_classes=CLASSES, average="macro") for name in names}
    return make.MetricCollection(members, **kwargs)


def compute_groups(rank: int, world_size: int) -> dict[str, Any]:
    """Followers hold their leader's states: each still sends its own piece; values as torchmetrics'."""
    collection = _scores(ta)
    reference = _scores(torchmetrics, compute_groups=False)
    got, expected, counted = [], [], []
    for step in range(3):
        generator = torch.Generator().manual_seed(10 * rank + step)
        # rank-dependent data: the groups could differ between ranks; the plan must not
        logits = torch.randn(5 + rank, CLASSES, generator=generator)
        labels = torch.randint(0, CLASSES, (5 + rank,), generator=generator)
        collection.update(logits, labels)
        reference.update(logits, labels)
        with harness.count_collectives() as calls:
            got.append(_floats(collection.compute()))
        expected.append(_floats(reference.compute()))
        counted.append(calls.as_dict())
    return {"got": got, "expected": expected, "collectives": counted, "groups": len(collection._groups)}


def list_states(rank: int, world_size: int) -> dict[str, Any]:
    """A member with a list state: its elements are gathered beside the buckets, across resets."""

    def members(make: Any) -> dict[str, Any]:
        return {"loss": make.MeanMetric(), "all": make.CatMetric(), "peak": make.MaxMetric()}

    collection = ta.MetricCollection(members(ta), compute_groups=False)
    got, expected = [], []
    for window in range(2):
        reference = torchmetrics.MetricCollection(members(torchmetrics), compute_groups=False)
        for step in range(2):
            values = torch.arange(3.0) + 10 * rank + step + window
            collection.update(values)
            reference.update(values)
        got.append({name: value.tolist() for name, value in collection.compute().items()})
        expected.append({name: value.tolist() for name, value in reference.compute().items()})
        collection.reset()
    return {"got": got, "expected": expected}


def run_all(rank: int, world_size: int) -> dict[str, Any]:
    scenarios = {
        "windows": windows,
        "added": added,
        "collection_windows": collection_windows,
        "compute_groups": compute_groups,
        "list_states": list_states,
    }
    return harness.run_scenarios(scenarios, rank, world_size)


@pytest.fixture(scope="module")
def ranks() -> list[dict[str, Any]]:
    return harness.run(run_all, world_size=2)


def test_collector_windows_match_torchmetrics(ranks):
    for result in scenario(ranks, "windows"):
        assert result["got"] == result["expected"]


def test_one_all_reduce_per_bucket_also_after_a_state_is_replaced(ranks):
    for result in scenario(ranks, "windows"):
        # the plan check (agreed at bind()) rides in a sum bucket, also when a replaced state is packed afresh
        assert result["collectives"] == [{"all_reduce": BUCKETS}] * 3


def test_a_metric_added_to_a_collection(ranks):
    for result in scenario(ranks, "added"):
        assert result["first"] == {"loss": 0.5}
        assert result["second"] == {"loss": 2.5, "top": 10.0}


def test_collection_compute_matches_torchmetrics(ranks):
    for result in scenario(ranks, "collection_windows"):
        assert result["got"] == result["expected"]


def test_collection_compute_is_one_all_reduce_per_bucket_also_after_a_state_is_replaced(ranks):
    for result in scenario(ranks, "collection_windows"):
        assert result["collectives"] == [[{"all_gather_single": 1, "all_reduce": BUCKETS}] * 2] * 3


def test_collection_compute_groups_send_one_piece_per_member(ranks):
    for result in scenario(ranks, "compute_groups"):
        assert result["got"] == result["expected"]
        assert result["groups"] == 1
        # int64 sums (the stat scores of all three members), the bool flags riding in them
        assert result["collectives"] == [{"all_gather_single": 1, "all_reduce": 1}] * 3


def test_collection_with_a_list_state_matches_torchmetrics(ranks):
    for result in scenario(ranks, "list_states"):
        assert result["got"] == result["expected"]
