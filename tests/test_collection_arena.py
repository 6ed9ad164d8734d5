"""The state arena of an accelerated MetricCollection on one process: reset by group, plans, copies, pickles, .to().

The 2-rank behaviour (the planned all_reduce of ``compute()``) is in tests/distributed/test_arena_two_ranks.py.
"""

from __future__ import annotations

import copy
import io
import pickle
from typing import Any

import torch
import torchmetrics

import torchmetrics_async as ta
from tests._compile import CountingBackend
from tests.test_state_arena import _batch, _members, _Ops, _update
from torchmetrics_async import AsyncMetricCollector
from torchmetrics_async.distributed.collection_arena import collection_arena
from torchmetrics_async.testing import count_host_syncs


def _collection(make: Any = ta, compute_groups: bool = False) -> Any:
    return make.MetricCollection(_members(make), compute_groups=compute_groups)


def _floats(values: dict[str, Any]) -> dict[str, float]:
    return {name: float(value) for name, value in values.items()}


def _expected(steps: range) -> dict[str, float]:
    reference = _collection(torchmetrics)
    for step in steps:
        _update(reference, step)
    return _floats(reference.compute())


def _views_held(holder: Any) -> bool:
    return all(slot.metric.__dict__[slot.attr] is slot.view for slot in holder.arena.slots if slot.alias is None)


def test_reset_is_one_copy_per_group_and_keeps_the_views():
    collection = _collection()
    collection.reset()  # plans
    holder = collection_arena(collection)
    assert holder.plans == 1
    assert len(holder.arena.metrics) == len(collection)
    groups = len(holder.arena.groups)
    assert groups < len(holder.arena.slots)
    for window in range(3):
        _update(collection, window)
        with _Ops() as reset:
            collection.reset()
        assert reset.names.count("copy_.default") == groups  # the groups, nothing state by state
        assert "clone.default" not in reset.names
        assert _views_held(holder)
    assert holder.plans == 1


def test_windows_after_arena_resets_match_torchmetrics():
    collection = _collection()
    for window in range(3):
        steps = range(2 * window, 2 * window + 2)
        for step in steps:
            _update(collection, step)
        assert _floats(collection.compute()) == _expected(steps)
        collection.reset()
    assert collection_arena(collection).plans == 1


def test_single_process_compute_plans_nothing_and_reads_as_before():
    planned, unplanned = _collection(), _collection()
    planned.reset()  # the arena: states are views
    for collection in (planned, unplanned):
        _update(collection, 0)
    counts = []
    for collection in (planned, unplanned):
        with count_host_syncs() as syncs:
            collection.compute()
        counts.append(syncs.total)
    assert counts[0] == counts[1]
    assert collection_arena(planned).plans == 1
    assert collection_arena(unplanned).arena is None  # compute() alone plans nothing when not distributed


def test_a_replaced_state_is_planned_again_and_not_written_through():
    collection = _collection()
    collection.reset()
    mine = torch.tensor(10.0)
    collection["peak"].max_value = mine
    _update(collection, 0)
    collection.reset()
    holder = collection_arena(collection)
    assert holder.plans == 2
    assert float(mine) == 10.0  # the metric copies it before writing; the arena never resets it
    _update(collection, 1)
    assert _floats(collection.compute()) == _expected(range(1, 2))
    assert _views_held(holder)


def test_members_added_or_removed_plan_again():
    collection = _collection()
    collection.reset()
    holder = collection_arena(collection)
    first = holder.arena
    collection.add_metrics({"low": ta.MinMetric()})
    collection.reset()
    assert holder.arena is not first
    assert len(holder.arena.metrics) == len(_members(ta)) + 1
    second = holder.arena
    del collection["low"]
    collection.reset()
    assert holder.arena is not second
    assert len(holder.arena.metrics) == len(_members(ta))
    assert holder.plans == 3
    _update(collection, 4)
    assert _floats(collection.compute()) == _expected(range(4, 5))


def test_compute_groups_formed_later_share_the_leaders_views():
    collection = ta.MetricCollection(
        {name: getattr(ta.classification, name)(num_classes=5) for name in ("MulticlassPrecision", "MulticlassRecall")}
    )
    collection.reset()  # planned before the groups form: each member its own views
    holder = collection_arena(collection)
    _, logits, labels = _batch(0)
    collection.update(logits, labels)  # the group forms: the follower holds the leader's views
    assert len(collection._groups) == 1
    collection.reset()
    assert holder.plans == 2  # the groups changed: planned again, the follower aliased
    assert holder.arena.aliased
    for step in (1, 2):
        _, logits, labels = _batch(step)
        collection.update(logits, labels)
    reference = torchmetrics.MetricCollection(
        {n: getattr(torchmetrics.classification, n)(num_classes=5) for n in ("MulticlassPrecision", "MulticlassRecall")}
    )
    for step in (1, 2):
        _, logits, labels = _batch(step)
        reference.update(logits, labels)
    assert _floats(collection.compute()) == _floats(reference.compute())
    assert holder.plans == 2


def test_pickles_and_deep_copies_are_compact_and_leave_the_arena_behind():
    collection = _collection()
    collection.reset()
    _update(collection, 0)
    for clone in (pickle.loads(pickle.dumps(collection)), copy.deepcopy(collection)):
        assert "_collection_arena" not in clone.__dict__
        for metric in clone.values(copy_state=False):
            for attr in metric._defaults:
                value = getattr(metric, attr)
                assert value.untyped_storage().nbytes() == value.numel() * value.element_size()
        _update(clone, 1)
        assert _floats(clone.compute()) == _expected(range(2))
        clone.reset()
        assert collection_arena(clone).plans == 1
    buffer = io.BytesIO()
    torch.save(collection.state_dict(), buffer)
    assert _floats(collection.compute()) == _expected(range(1))


def test_to_releases_the_arena_and_the_next_reset_plans_again():
    collection = _collection()
    collection.reset()
    old = collection_arena(collection)
    collection.to(torch.float64)
    assert "_collection_arena" not in collection.__dict__
    collection.reset()
    holder = collection_arena(collection)
    assert holder is not old
    assert holder.plans == 1
    assert _views_held(holder)


def test_a_bound_collector_keeps_its_arena():
    collection = _collection()
    collection.reset()  # the collection's arena first
    collector = AsyncMetricCollector(collection)
    collector.bind()  # the collector's live arena takes the members
    for window in range(3):
        _update(collection, window)
        collector.schedule_collection()  # resets the collection: its arena must not take the members back
        assert collector.collect_results() == _expected(range(window, window + 1))
    assert collector._live_arena.plans == 1
    assert collection_arena(collection).arena is None
    collector.unbind()
    collection.reset()  # unbound: the collection plans its own again
    assert collection_arena(collection).arena is not None
    _update(collection, 5)
    assert _floats(collection.compute()) == _expected(range(5, 6))


def test_compiled_updates_write_into_the_views_across_an_in_place_reset():
    def scores(make: Any) -> Any:
        names = ("MulticlassAccuracy", "MulticlassF1Score")
        members = {name: getattr(make.classification, name)(num_classes=5, average="macro") for name in names}
        return make.MetricCollection(members, compute_groups=False)

    compiled, eager = scores(ta), scores(torchmetrics)
    compiled.reset()  # the arena: the compiled update writes into its views
    holder = collection_arena(compiled)
    torch._dynamo.reset()
    counting = CountingBackend("eager")
    update = torch.compile(compiled.update, fullgraph=True, backend=counting)
    batches = [_batch(step)[1:] for step in range(6)]
    with torch._dynamo.config.patch(error_on_recompile=True):
        for index, batch in enumerate(batches):
            if index == 3:  # a window ends: reset in place, the views stay
                assert _floats(compiled.compute()) == _floats(eager.compute())
                compiled.reset()
                eager.reset()
            update(*batch)
            eager.update(*batch)
    assert counting.graphs == 1
    assert _views_held(holder)
    assert holder.plans == 1
    assert _floats(compiled.compute()) == _floats(eager.compute())
