"""The state arena under a bound collector: views, one copy per group, plans only on replacement, compact pickles."""

from __future__ import annotations

import copy
import io
import pickle
from typing import Any

import torch
import torchmetrics
from torch.utils._python_dispatch import TorchDispatchMode

import torchmetrics_async as ta
from torchmetrics_async import AsyncMetricCollector
from torchmetrics_async.collector import _reset_tree
from torchmetrics_async.state_arena import StateArena

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


def _bound(compute_groups: bool = False) -> tuple[Any, AsyncMetricCollector]:
    collection = ta.MetricCollection(_members(ta), compute_groups=compute_groups)
    collector = AsyncMetricCollector(collection)
    collector.bind()
    return collection, collector


def _expected(steps: range, compute_groups: bool = False) -> dict[str, float]:
    reference = torchmetrics.MetricCollection(_members(torchmetrics), compute_groups=compute_groups)
    for step in steps:
        _update(reference, step)
    return {name: float(value) for name, value in reference.compute().items()}


def test_live_states_are_views_of_one_buffer_per_group():
    _collection, collector = _bound()
    arena = collector._live_arena
    storages = {id(group): group.buffer.untyped_storage().data_ptr() for group in arena.groups}
    for slot in arena.slots:
        held = slot.metric.__dict__[slot.attr]
        assert held is slot.view
        assert held.untyped_storage().data_ptr() == storages[id(slot.group)]
    # sum (float), sum (int64: the stat scores), max (float), max (bool: the flags)...
    assert len(arena.groups) < len(arena.slots)


def test_snapshot_and_reset_are_one_copy_per_group():
    collection, collector = _bound()
    _update(collection, 0)
    groups = len(collector._live_arena.groups)
    with _Ops() as snapshot:
        collector._snapshot()
    # one per group, and one per metric for its compiled-update counter (copy_update_count)
    assert snapshot.names.count("copy_.default") == groups + len(collection)
    assert "clone.default" not in snapshot.names
    assert "cat.default" not in snapshot.names
    with _Ops() as reset:
        collector._live_arena.reset()
    assert reset.names == ["copy_.default"] * groups
    with _Ops() as rest:  # the metrics' own reset: counters, flags' first indices; no state is copied or cloned
        _reset_tree(collection)
    collector._live_arena.clear_reset_marks()
    assert "copy_.default" not in rest.names
    assert "clone.default" not in rest.names
    for slot in collector._live_arena.slots:
        assert slot.metric.__dict__[slot.attr] is slot.view  # reset in place: still the views


def test_windows_match_torchmetrics_and_plan_once():
    collection, collector = _bound()
    for window in range(3):
        for step in range(2 * window, 2 * window + 2):
            _update(collection, step)
        collector.schedule_collection()
        got = collector.collect_results()
        expected = _expected(range(2 * window, 2 * window + 2))
        assert got == {name: torch.tensor(value).item() for name, value in expected.items()}
    assert collector._live_arena.plans == 1
    assert collector._window_arena.plans == 1


def _scores(make: Any) -> Any:
    names = ("MulticlassAccuracy", "MulticlassPrecision", "MulticlassRecall")
    return make.MetricCollection({name: getattr(make.classification, name)(num_classes=CLASSES) for name in names})


def test_compute_groups_share_states_and_match_torchmetrics():
    collection = _scores(ta)
    collector = AsyncMetricCollector(collection)
    collector.bind()
    for window in range(3):
        _, logits, labels = _batch(window)
        collection.update(logits, labels)
        collector.schedule_collection()
        reference = _scores(torchmetrics)
        reference.update(logits, labels)
        assert collector.collect_results() == {k: float(v) for k, v in reference.compute().items()}
    assert len(collection._groups) == 1  # one compute group: the followers hold the leader's views
    assert collector._live_arena.aliased
    assert collector._live_arena.plans <= 2  # planned at bind, and again once the group formed (by deep copies)


def test_a_replaced_state_is_planned_again_not_written_through():
    collection, collector = _bound()
    _update(collection, 0)
    mine = torch.tensor(10.0)
    collection["peak"].max_value = mine  # the user's tensor: the metric must not write into it
    _update(collection, 1)
    collector.schedule_collection()
    got = collector.collect_results()
    assert collector._live_arena.plans == 2
    assert float(mine) == 10.0
    assert got["peak"] == 10.0
    _update(collection, 2)
    collector.schedule_collection()
    assert collector.collect_results() == _expected(range(2, 3))
    assert float(mine) == 10.0
    assert collector._live_arena.plans == 2


def test_set_dtype_replans_and_keeps_values():
    collection, collector = _bound()
    _update(collection, 0)
    collection["loss"].set_dtype(torch.float64)
    _update(collection, 1)
    collector.schedule_collection()
    got = collector.collect_results()
    reference = torchmetrics.MeanMetric()
    reference.update(_batch(0)[0])
    reference.set_dtype(torch.float64)
    reference.update(_batch(1)[0])
    assert got["loss"] == float(reference.compute())
    assert collection["loss"].mean_value.dtype == torch.float64
    assert any(group.dtype == torch.float64 for group in collector._live_arena.groups)


def _nbytes(obj: Any) -> int:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.tell()


def test_state_dict_pickle_and_deepcopy_hold_only_their_own_elements():
    big = 4096
    metrics = {f"acc{i}": ta.classification.MulticlassAccuracy(num_classes=big, average="macro") for i in range(4)}
    collector = AsyncMetricCollector(metrics)
    collector.bind()
    metric = metrics["acc0"]
    assert metric.tp.untyped_storage().nbytes() > metric.tp.numel() * metric.tp.element_size()  # a view
    for key, value in metric.state_dict().items():
        if isinstance(value, torch.Tensor):
            assert value.untyped_storage().nbytes() == value.numel() * value.element_size(), key
    alone = ta.classification.MulticlassAccuracy(num_classes=big, average="macro")
    assert len(pickle.dumps(metric)) < 1.1 * len(pickle.dumps(alone))
    assert _nbytes(metric.state_dict()) < 1.1 * _nbytes(alone.state_dict())
    twin = copy.deepcopy(metric)
    assert twin.tp.untyped_storage().nbytes() == twin.tp.numel() * twin.tp.element_size()
    twin.update(torch.tensor([1]), torch.tensor([1]))
    assert int(metric.tp.sum()) == 0  # the copy writes into its own storage


def test_list_states_keep_their_own_path():
    collection = ta.MetricCollection({"cat": ta.CatMetric(), "sum": ta.SumMetric()})
    collector = AsyncMetricCollector(collection)
    collector.bind()
    assert all(slot.attr != "value" for slot in collector._live_arena.slots)
    for window in range(2):
        collection.update(torch.tensor([1.0, 2.0]) + window)
        collector.schedule_collection()
        got = collector.collect_results()
        assert got == {"cat": [1.0 + window, 2.0 + window], "sum": 3.0 + 2 * window}


def test_plain_arena_reset_and_copy():
    source = [ta.SumMetric(), ta.MaxMetric()]
    twin = [copy.deepcopy(metric) for metric in source]  # before planning, as the collector's shadow is made
    arena = StateArena(source)
    other = StateArena(twin, like=arena)
    source[0].update(torch.tensor(3.0))
    source[1].update(torch.tensor(5.0))
    other.copy_from(arena)
    assert float(twin[0].compute()) == 3.0
    assert float(twin[1].compute()) == 5.0
    arena.reset()
    for metric in source:
        metric.reset()
    assert float(source[0].sum_value) == 0.0
    assert float(source[1].max_value) == float("-inf")
    assert arena.is_current()
    assert arena.plans == 1
