"""Snapshots and resets of many metrics: fused copies into fresh tensors, never a reset under the user.

The collector's window snapshot and the fresh states of a collection's or a collector's reset are one
``torch._foreach_copy_`` per (device, dtype); the states stay ordinary tensors owned by their metric, so a tensor a user
holds keeps its value through a reset (as with torchmetrics). Values against torchmetrics, compiled updates across
resets (one graph, no recompile).
"""

from __future__ import annotations

import copy
import pickle
from typing import Any

import torch
import torchmetrics
from torch.utils._python_dispatch import TorchDispatchMode

import torchmetrics_async as ta
from tests._compile import CountingBackend
from torchmetrics_async import AsyncMetricCollector

CLASSES = 5


class _Ops(TorchDispatchMode):
    """The names of the ATen ops dispatched inside the block."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        self.names.append(func.__name__)
        return func(*args, **(kwargs or {}))


def _members(make: Any) -> dict[str, Any]:
    return {
        "loss": make.MeanMetric(),
        "peak": make.MaxMetric(),
        "acc": make.classification.MulticlassAccuracy(num_classes=CLASSES, average="macro"),
        "f1": make.classification.MulticlassF1Score(num_classes=CLASSES),
    }


def _batch(step: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(step)
    return (
        torch.rand(8, generator=generator),
        torch.randn(8, CLASSES, generator=generator),
        torch.randint(0, CLASSES, (8,), generator=generator),
    )


def _update(collection: Any, step: int) -> None:
    values, logits, labels = _batch(step)
    for name, metric in collection.items():
        if name in ("loss", "peak"):
            metric.update(values)
        else:
            metric.update(logits, labels)


def _floats(values: dict[str, Any]) -> dict[str, float]:
    return {name: float(value) for name, value in values.items()}


def _expected(steps: range) -> dict[str, float]:
    reference = torchmetrics.MetricCollection(_members(torchmetrics), compute_groups=False)
    for step in steps:
        _update(reference, step)
    return _floats(reference.compute())


def _groups(collection: Any) -> int:
    """(device, dtype) pairs among the members' tensor states: the fused copies one snapshot or reset takes."""
    return len(
        {
            (value.device, value.dtype)
            for metric in collection.values(copy_state=False)
            for value in (getattr(metric, attr) for attr in metric._defaults)
            if isinstance(value, torch.Tensor)
        }
    )


def test_collection_reset_leaves_a_held_state_alone():
    collection = ta.MetricCollection(_members(ta), compute_groups=False)
    for window in range(2):
        _update(collection, window)
        held = collection["loss"].mean_value
        value = float(held)
        collection.reset()
        assert float(held) == value  # a fresh state, not the old one zeroed under the user
        assert collection["loss"].mean_value is not held
        assert float(collection["loss"].mean_value) == 0.0


def test_collector_schedule_leaves_a_held_state_alone():
    collection = ta.MetricCollection(_members(ta), compute_groups=False)
    collector = AsyncMetricCollector(collection)
    collector.bind()
    for window in range(2):
        _update(collection, window)
        held = collection["peak"].max_value
        value = float(held)
        collector.schedule_collection()
        assert float(held) == value
        assert collector.collect_results() == _expected(range(window, window + 1))


def test_collection_reset_is_one_fused_copy_per_dtype():
    collection = ta.MetricCollection(_members(ta), compute_groups=False)
    groups = _groups(collection)
    assert groups < sum(len(metric._defaults) for metric in collection.values())
    for window in range(2):
        _update(collection, window)
        with _Ops() as reset:
            collection.reset()
        assert reset.names.count("_foreach_copy_.default") == groups
        assert "clone.default" not in reset.names
        assert "copy_.default" not in reset.names


def test_collector_snapshot_and_reset_are_fused_copies():
    collection = ta.MetricCollection(_members(ta), compute_groups=False)
    collector = AsyncMetricCollector(collection)
    collector.bind()
    groups = _groups(collection)
    for window in range(2):
        _update(collection, window)
        with _Ops() as scheduled:
            collector.schedule_collection()
        assert scheduled.names.count("_foreach_copy_.default") == 2 * groups  # the snapshot, the live metrics' reset
        assert "clone.default" not in scheduled.names
        assert collector.collect_results() == _expected(range(window, window + 1))


def _scores(make: Any) -> Any:
    names = ("MulticlassAccuracy", "MulticlassPrecision", "MulticlassRecall")
    return make.MetricCollection({name: getattr(make.classification, name)(num_classes=CLASSES) for name in names})


def test_compute_groups_across_fused_resets_match_torchmetrics():
    collection = _scores(ta)
    collector_collection = _scores(ta)
    collector = AsyncMetricCollector(collector_collection)
    collector.bind()
    for window in range(3):
        reference = _scores(torchmetrics)
        for step in (2 * window, 2 * window + 1):
            _, logits, labels = _batch(step)
            for target in (collection, collector_collection, reference):
                target.update(logits, labels)
        expected = _floats(reference.compute())
        assert _floats(collection.compute()) == expected
        collection.reset()
        collector.schedule_collection()
        assert collector.collect_results() == expected
    assert len(collection._groups) == 1  # the group formed; reset re-linked the followers to the leader's states


def test_pickles_and_deep_copies_after_resets_are_independent():
    collection = ta.MetricCollection(_members(ta), compute_groups=False)
    _update(collection, 0)
    collection.reset()
    _update(collection, 1)
    for twin in (pickle.loads(pickle.dumps(collection)), copy.deepcopy(collection)):
        _update(twin, 2)
        assert _floats(twin.compute()) == _expected(range(1, 3))
    assert _floats(collection.compute()) == _expected(range(1, 2))


def test_compiled_updates_across_fused_resets_one_graph():
    def scores(make: Any) -> Any:
        names = ("MulticlassAccuracy", "MulticlassF1Score")
        members = {name: getattr(make.classification, name)(num_classes=CLASSES, average="macro") for name in names}
        return make.MetricCollection(members, compute_groups=False)

    compiled, eager = scores(ta), scores(torchmetrics)
    torch._dynamo.reset()
    counting = CountingBackend("eager")
    update = torch.compile(compiled.update, fullgraph=True, backend=counting)
    with torch._dynamo.config.patch(error_on_recompile=True):
        for index in range(6):
            if index in (2, 4):  # a window ends: every state is a fresh tensor now
                assert _floats(compiled.compute()) == _floats(eager.compute())
                compiled.reset()
                eager.reset()
            batch = _batch(index)[1:]
            update(*batch)
            eager.update(*batch)
    assert counting.graphs == 1
    assert _floats(compiled.compute()) == _floats(eager.compute())
