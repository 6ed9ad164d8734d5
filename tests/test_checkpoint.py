"""The per-rank checkpoint layout on one process: torch.save and DCP round trips, list states, refusals.

The 2-rank round trips (each rank its own window) are in tests/distributed/test_checkpoint_two_ranks.py.
"""

from __future__ import annotations

import copy
import io
import warnings

import pytest
import torch
import torchmetrics

import torchmetrics_async as ta
from torchmetrics_async import AsyncMetricCollector
from torchmetrics_async.checkpoint import PerRankState, rank_key


def _metrics() -> dict:
    return {"cat": ta.CatMetric(), "sum": ta.SumMetric(), "plain": torchmetrics.CatMetric()}


def _feed(metrics: dict, seed: int) -> None:
    for metric in metrics.values():
        metric.update(torch.arange(3.0) + seed)


def _computed(metrics: dict) -> dict:
    return {name: metric.compute().tolist() for name, metric in metrics.items()}


def test_list_states_are_tuples_under_this_ranks_key():
    metrics = _metrics()
    _feed(metrics, 0)
    state = PerRankState(metrics).state_dict()
    assert sorted(state) == [rank_key(), "world_size"]
    assert isinstance(state["rank0"]["cat"]["states"]["value"], tuple)  # DCP: one object, whatever its length
    assert isinstance(state["rank0"]["sum"]["states"]["sum_value"], torch.Tensor)


@pytest.mark.parametrize("via", ["torch.save", "dcp"])
def test_round_trip_into_fresh_metrics_with_empty_lists(via, tmp_path):
    metrics, reference = _metrics(), _metrics()
    for seed in range(2):
        _feed(metrics, seed)
        _feed(reference, seed)
    fresh = _metrics()
    if via == "dcp":
        dcp = pytest.importorskip("torch.distributed.checkpoint")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # DCP runs without a process group
            dcp.save({"metrics": PerRankState(metrics)}, checkpoint_id=str(tmp_path))
            dcp.load({"metrics": PerRankState(fresh)}, checkpoint_id=str(tmp_path))
    else:
        buffer = io.BytesIO()
        torch.save(PerRankState(metrics).state_dict(), buffer)
        buffer.seek(0)
        PerRankState(fresh).load_state_dict(torch.load(buffer, weights_only=True))
    _feed(fresh, 2)
    _feed(reference, 2)
    assert _computed(fresh) == _computed(reference)
    assert {n: m._update_count for n, m in fresh.items()} == {n: m._update_count for n, m in reference.items()}


def test_collector_dcp_with_a_list_state_in_flight(tmp_path):
    dcp = pytest.importorskip("torch.distributed.checkpoint")
    live = ta.MetricCollection({"cat": ta.CatMetric(), "sum": ta.SumMetric()})
    collector = AsyncMetricCollector(live)
    collector.bind()
    live.update(torch.tensor([1.0, 2.0]))
    collector.schedule_collection()
    live.update(torch.tensor([5.0]))
    fresh_live = ta.MetricCollection({"cat": ta.CatMetric(), "sum": ta.SumMetric()})
    fresh = AsyncMetricCollector(fresh_live)
    fresh.bind()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save({"collector": collector}, checkpoint_id=str(tmp_path))
        dcp.load({"collector": fresh}, checkpoint_id=str(tmp_path))
    assert fresh.collect_results() == collector.collect_results()
    collector.schedule_collection()
    fresh.schedule_collection()
    assert fresh.collect_results() == collector.collect_results()


def test_one_ranks_entry_loads_on_purpose_and_other_layouts_are_refused():
    metric = ta.SumMetric()
    metric.update(torch.tensor(4.0))
    state = PerRankState(metric).state_dict()
    fresh = ta.SumMetric()
    PerRankState(fresh).load_state_dict(state["rank0"])  # a rank's entry, chosen by the caller
    assert fresh.compute() == metric.compute()
    with pytest.raises(ValueError, match="saved by 2 processes and is loaded by 1"):
        PerRankState(ta.SumMetric()).load_state_dict({**state, "world_size": 2})
    with pytest.raises(KeyError, match="no entry 'rank0' for this rank"):
        PerRankState(ta.SumMetric()).load_state_dict({"world_size": 1, "rank1": state["rank0"]})
    collector_state = AsyncMetricCollector(metric).state_dict()
    restored = AsyncMetricCollector(ta.SumMetric())
    restored.load_state_dict(collector_state["rank0"])
    assert restored.state_dict()["rank0"]["metrics"]["metric"]["update_count"] == 1
    with pytest.raises(TypeError, match="PerRankState expects"):
        PerRankState([metric])


# --- issue 19, item 9b: a door is not an update: "compute before update" warns as torchmetrics warns -------------

_BEFORE_UPDATE = "was called before the ``update`` method"


def _before_update_warnings(metric) -> tuple[list[str], torch.Tensor]:
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        value = metric.compute()
    return [str(w.message) for w in record if _BEFORE_UPDATE in str(w.message)], value


# torchmetrics refuses merge_state for Running (full_state_update): RunningMean arrives by loading only.
_ARRIVALS = [
    (name, door)
    for name in ("MeanMetric", "SumMetric", "CatMetric", "RunningMean")
    for door in ("load_state_dict", "merge_state")
    if (name, door) != ("RunningMean", "merge_state")
]


@pytest.mark.parametrize("receiver", ["fresh", "updated", "computed"])
@pytest.mark.parametrize(("name", "door"), _ARRIVALS)
def test_torchmetrics_state_arriving_warns_compute_before_update_as_torchmetrics(name, door, receiver):
    source = getattr(torchmetrics, name)()
    source.update(torch.tensor([1.0, 2.0]))
    source.persistent(True)
    results = []
    for cls in (getattr(torchmetrics, name), getattr(ta, name)):
        metric = cls()
        metric.persistent(True)
        if receiver != "fresh":
            metric.update(torch.tensor(5.0))
        if receiver == "computed":
            metric.compute()
        if door == "load_state_dict":
            metric.load_state_dict(source.state_dict())
        else:
            metric.merge_state(source.state_dict() if cls.__module__.startswith("torchmetrics.") else source)
        results.append(_before_update_warnings(metric)[0])
    expected, got = results
    assert got == expected
    assert bool(expected) == (receiver == "fresh")


# --- issue 29, item 1: checkpoints load both ways, whatever persistent() says, before or after accelerate() --------


def _plain_collection() -> torchmetrics.MetricCollection:
    return torchmetrics.MetricCollection(
        {
            "acc": torchmetrics.classification.MulticlassAccuracy(num_classes=3),
            "f1": torchmetrics.classification.MulticlassF1Score(num_classes=3),  # a compute group with acc
            "loss": torchmetrics.MeanMetric(nan_strategy="error"),
            "seen": torchmetrics.CatMetric(nan_strategy="warn"),
        }
    )


def _feed_collection(collection, step: int) -> None:
    preds, target = torch.tensor([0, 1, 2, step % 3]), torch.tensor([0, 1, 1, 2])
    for name, metric in collection.items(keep_base=True, copy_state=False):
        if name in ("acc", "f1"):
            metric.update(preds, target)
        else:
            metric.update(torch.tensor([float(step), float("nan") if name == "seen" else 0.5]))


def _values(collection) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the "warn" NaN, and "compute before update" after a load into plain
        return {name: value.tolist() for name, value in collection.compute().items()}


@pytest.mark.parametrize("persistent_set", ["after", "before accelerate()"])
def test_a_collection_checkpoint_loads_strictly_into_plain_torchmetrics_and_back(persistent_set):
    ours, reference = _plain_collection(), _plain_collection()
    if persistent_set == "before accelerate()":
        ours.persistent(True)
    ta.accelerate(ours)
    ours.persistent(True)
    for step in range(3):
        _feed_collection(ours, step)
        _feed_collection(reference, step)
    buffer = io.BytesIO()
    torch.save(ours.state_dict(), buffer)  # a file, as Lightning writes it: the metadata travels
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)
    plain = _plain_collection()
    plain.persistent(True)
    plain.load_state_dict(copy.deepcopy(saved), strict=True)  # the plugin switched off: the same values
    assert _values(plain) == _values(reference) == _values(ours)
    # switched on again from the accelerated checkpoint: the window's update count and its NaN warning come back
    resumed = ta.accelerate(_plain_collection())
    resumed.persistent(True)
    resumed.load_state_dict(saved, strict=True)
    assert [m.update_count for m in resumed.values(copy_state=False)] == [3, 3, 3, 3]
    with pytest.warns(UserWarning, match="Encountered `nan` values"):
        resumed["seen"].compute()
    assert _values(resumed) == _values(reference)
    # and from the plain checkpoint of the switched-off run, after it went on
    _feed_collection(plain, 3)
    _feed_collection(reference, 3)
    again = ta.accelerate(_plain_collection())
    again.load_state_dict(plain.state_dict(), strict=True)
    assert _values(again) == _values(reference)
