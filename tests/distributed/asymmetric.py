"""What every rank runs for the rank-asymmetric cases: ranks whose data differ, plans that must not.

Each scenario feeds torchmetrics and torchmetrics-async the same per-rank data and returns both values; the parent
asserts they are equal on every rank. The last scenarios build deliberately different collections per rank and return
the error each rank raised.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch
import torchmetrics

import torchmetrics_async as tma
from tests.distributed.harness import count_collectives, run_scenarios
from tests.examples import example_for
from torchmetrics_async import distributed as fused
from torchmetrics_async.accelerate import registry


def _quiet(fn: Callable[[], Any]) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # compute() before update() on the idle rank
        return fn()


def _pair(make: Callable[[], dict[str, torchmetrics.Metric]], **kwargs: Any) -> tuple[Any, Any]:
    theirs = torchmetrics.MetricCollection(make(), **kwargs)
    ours = tma.accelerate(torchmetrics.MetricCollection(make(), **kwargs))
    return theirs, ours


def _compute(theirs: Any, ours: Any) -> dict[str, Any]:
    expected = _quiet(theirs.compute)
    with count_collectives() as count:
        got = _quiet(ours.compute)
    return {"theirs": expected, "ours": got, "count": count.as_dict()}


def _acc_f1() -> dict[str, torchmetrics.Metric]:
    return {
        "acc": torchmetrics.Accuracy(task="multiclass", num_classes=3),
        "f1": torchmetrics.F1Score(task="multiclass", num_classes=3),
    }


def idle_rank(rank: int, world_size: int) -> dict[str, Any]:
    """(a) Uneven eval sharding: rank 0 gets no batch; rank 1's updates merge Accuracy and F1 into a compute group."""
    theirs, ours = _pair(_acc_f1)
    if rank == 1:
        for collection in (theirs, ours):
            collection.update(torch.tensor([0, 1]), torch.tensor([0, 2]))
    out = _compute(theirs, ours)
    out["groups"] = ours.compute_groups
    return out


def forward_only(rank: int, world_size: int) -> dict[str, Any]:
    """(b) Rank 0 only calls forward() (no compute groups merge there), rank 1 calls update()."""
    theirs, ours = _pair(_acc_f1)
    preds, target = torch.tensor([0, 1, 2, 2]), torch.tensor([0, 2, 2, 1])
    for collection in (theirs, ours):
        if rank == 0:
            collection(preds, target)
        else:
            collection.update(preds, target)
    return _compute(theirs, ours)


def data_dependent_groups(rank: int, world_size: int) -> dict[str, Any]:
    """(c) Thresholds 0.5 and 0.7: equal states (one compute group) on rank 0, different states on rank 1."""

    def make() -> dict[str, torchmetrics.Metric]:
        return {
            "at_05": torchmetrics.classification.BinaryAccuracy(threshold=0.5),
            "at_07": torchmetrics.classification.BinaryAccuracy(threshold=0.7),
        }

    theirs, ours = _pair(make)
    preds = torch.tensor([0.1, 0.9, 0.2, 0.8]) if rank == 0 else torch.tensor([0.6, 0.65, 0.9, 0.1])
    target = torch.tensor([0, 1, 1, 1])
    for collection in (theirs, ours):
        collection.update(preds, target)
    out = _compute(theirs, ours)
    out["groups"] = ours.compute_groups
    # a second window on the same collections: groups were formed at the first update and stay
    for collection in (theirs, ours):
        collection.reset()
        collection.update(preds.flip(0), target)
    out["second window"] = _compute(theirs, ours)
    return out


def cached_on_one_rank(rank: int, world_size: int) -> dict[str, Any]:
    """A member with a cached value on rank 0 only (rank 1 updated since the last compute) still takes part."""
    ours = tma.accelerate(
        torchmetrics.MetricCollection({"mean": torchmetrics.MeanMetric(), "sum": torchmetrics.SumMetric()})
    )
    ours.update(torch.tensor([1.0 + rank]))
    first = ours.compute()
    if rank == 1:
        ours.update(torch.tensor([10.0]))
    second = ours.compute()
    return {"first": first, "second": second}


def _registered() -> list[tuple[str, type, type]]:
    return sorted(
        ((origin.__name__, origin, accelerated) for origin, accelerated in registry().items()),
        key=lambda item: (item[1].__module__, item[0]),
    )


def _local(metric: torchmetrics.Metric) -> torchmetrics.Metric:
    """``metric`` with ``sync_on_compute=False`` on it and every metric it holds (a wrapper's ``__init__``, such as
    ``Running``'s, does not take the keyword: its base metric computes, and would sync, inside its ``compute()``)."""
    for module in metric.modules():
        if isinstance(module, torchmetrics.Metric):
            module.sync_on_compute = module._to_sync = False
    return metric


# Its compute() fails on a rank without updates before any collective, so the other rank would wait in the sync:
# RMSE-SW keeps its map outside the states (an AssertionError in torchmetrics too).
_NO_EMPTY_COMPUTE = {"RootMeanSquaredErrorUsingSlidingWindow"}


def zero_updates_every_family(rank: int, world_size: int) -> dict[str, Any]:
    """Every registered class: rank 0 never updates; alone (its own compute) and all together in one collection.

    The expected values are torchmetrics' on all the data in one process (``sync_on_compute=False``): torchmetrics'
    own distributed compute aborts the process here (gloo: "Received data size doesn't match expected size") for list
    states whose dtype is not the metric's (integer targets of the unbinned curves): a rank without updates sends an
    empty tensor of the metric's dtype.
    """
    out: dict[str, Any] = {}
    theirs_all, ours_all = {}, {}
    for name, origin, accelerated in _registered():
        if name in _NO_EMPTY_COMPUTE:
            continue
        example = example_for(origin, seed=1)  # rank 1's batch; rank 0 has none
        theirs = _local(origin(**example.init))
        ours = accelerated(**example.init)
        theirs_all[name], ours_all[name] = _local(origin(**example.init)), origin(**example.init)
        theirs.update(*example.inputs)
        theirs_all[name].update(*example.inputs)
        if rank == 1:
            ours.update(*example.inputs)
            ours_all[name].update(*example.inputs)
        try:
            expected = _quiet(theirs.compute)
        except Exception as err:
            expected = f"{type(err).__name__}: {err}"
        try:
            got = _quiet(ours.compute)
        except Exception as err:
            got = f"{type(err).__name__}: {err}"
        out[name] = {"theirs": expected, "ours": got}
    theirs = torchmetrics.MetricCollection(theirs_all)
    ours = tma.accelerate(torchmetrics.MetricCollection(ours_all))
    out["<collection>"] = _compute(theirs, ours)
    return out


def _mismatch(build: Callable[[int], Any], call: Callable[[Any], Any]) -> Callable[[int, int], dict[str, Any]]:
    def run(rank: int, world_size: int) -> dict[str, Any]:
        metrics = build(rank)
        error = None
        with count_collectives() as count:
            try:
                call(metrics)
            except fused.PlanMismatchError as err:
                error = str(err)
        # the ranks are still in step: one more collective works
        after = fused.reduce_sum({"one": torch.ones(())})["one"]
        return {"error": error, "after": after, "count": count.as_dict()}

    return run


def _updated(members: dict[str, torchmetrics.Metric]) -> Any:
    """An accelerated collection of ``members`` (no compute groups), each updated once."""
    collection = tma.accelerate(torchmetrics.MetricCollection(members, compute_groups=False))
    for metric in members.values():
        if isinstance(metric, torchmetrics.classification.MulticlassAccuracy):
            metric.update(torch.tensor([0, 1]), torch.tensor([0, 2]))
        else:
            metric.update(torch.tensor([1.0, 2.0]))
    return collection


def _order(rank: int) -> Any:
    # torchmetrics sorts members by name: swap the names to swap the order
    acc, mean = torchmetrics.Accuracy(task="multiclass", num_classes=3), torchmetrics.MeanMetric()
    return _updated({"a": acc, "b": mean} if rank == 0 else {"a": mean, "b": acc})


def _missing(rank: int) -> Any:
    members = {"a": torchmetrics.Accuracy(task="multiclass", num_classes=3), "b": torchmetrics.MeanMetric()}
    if rank == 1:
        del members["b"]
    return _updated(members)


def _shape(rank: int) -> Any:
    # a per-class state: 3 classes on rank 0, 4 on rank 1 (a bucket of another size)
    acc = torchmetrics.Accuracy(task="multiclass", num_classes=3 + rank, average="macro")
    return _updated({"a": acc, "b": torchmetrics.MeanMetric()})


def _dtype(rank: int) -> Any:
    total = torchmetrics.SumMetric()
    if rank == 1:
        total.set_dtype(torch.float64)  # a float64 bucket of its own on rank 1
    return _updated({"a": torchmetrics.Accuracy(task="multiclass", num_classes=3), "b": total})


def _order_with_lists(rank: int) -> Any:
    cat, low, high = torchmetrics.CatMetric(), torchmetrics.MinMetric(), torchmetrics.MaxMetric()
    members = {"a": cat, "b": low, "c": high} if rank == 0 else {"a": cat, "b": high, "c": low}
    collection = tma.accelerate(torchmetrics.MetricCollection(members, compute_groups=False))
    collection.update(torch.tensor([1.0, 2.0 + rank]))
    return collection


def _missing_list(rank: int) -> Any:
    members = {"a": torchmetrics.CatMetric(), "b": torchmetrics.CatMetric(), "c": torchmetrics.SumMetric()}
    if rank == 1:
        del members["b"]  # a shape exchange of another size
    collection = tma.accelerate(torchmetrics.MetricCollection(members, compute_groups=False))
    collection.update(torch.tensor([1.0, 2.0 + rank]))
    return collection


def _sync_context(collection: Any) -> None:
    with fused.sync_context(collection):
        collection.compute()


def _own_sync(collection: Any) -> None:
    collection["a"].sync()  # a metric alone: torchmetrics' sync(), our fused _sync_dist


def _own_compute(collection: Any) -> None:
    collection["a"].compute()


def _collector(collection: Any) -> None:
    collector = tma.AsyncMetricCollector(collection)
    collector.bind()
    try:
        collector.schedule_collection()
        collector.collect_results()
    finally:
        collector.unbind()


#: every way the ranks' plans differ, through every sync entry point (each rank must raise PlanMismatchError)
MISMATCHES: dict[str, Callable[[int, int], Any]] = {
    "member order: compute": _mismatch(_order, lambda collection: collection.compute()),
    "member order: sync_metrics": _mismatch(_order, fused.sync_metrics),
    "member order, list states: compute": _mismatch(_order_with_lists, lambda collection: collection.compute()),
    "member missing: compute": _mismatch(_missing, lambda collection: collection.compute()),
    "member missing: sync_metrics": _mismatch(_missing, fused.sync_metrics),
    "member missing: sync_context": _mismatch(_missing, _sync_context),
    "member missing: collector": _mismatch(_missing, _collector),
    "list member missing: compute": _mismatch(_missing_list, lambda collection: collection.compute()),
    "list member missing: collector": _mismatch(_missing_list, _collector),
    "state shape: compute": _mismatch(_shape, lambda collection: collection.compute()),
    "state shape: a metric's sync()": _mismatch(_shape, _own_sync),
    "state shape: a metric's compute()": _mismatch(_shape, _own_compute),
    "state shape: collector": _mismatch(_shape, _collector),
    "state dtype: compute": _mismatch(_dtype, lambda collection: collection.compute()),
    "state dtype: sync_metrics": _mismatch(_dtype, fused.sync_metrics),
}


def _window(collector: Any, collection: Any) -> dict[str, Any]:
    """One collector window of ``collection`` (updated first); where a PlanMismatchError was raised, the collectives."""
    collection.update(torch.tensor([1.0, 2.0]))
    out: dict[str, Any] = {"raised at": None, "values": None}
    with count_collectives() as count:
        try:
            collector.schedule_collection()
        except fused.PlanMismatchError as err:
            out["raised at"], out["error"] = "schedule", str(err)
    if out["raised at"] is None:
        try:
            out["values"] = collector.collect_results()
        except fused.PlanMismatchError as err:
            out["raised at"], out["error"] = "collect", str(err)
    out["count"] = count.as_dict()
    return out


def plan_changed(rank: int, world_size: int) -> dict[str, Any]:
    """A collector's plan, agreed at its first window, changes before the second: on one rank, then on every rank."""
    out: dict[str, Any] = {}
    for case, changes in (("one rank", rank == 1), ("one rank, list states", rank == 1), ("every rank", True)):
        first_kind = torchmetrics.CatMetric if "list" in case else torchmetrics.MeanMetric  # + a shape exchange
        members = {"first": first_kind(), "sum": torchmetrics.SumMetric()}
        collection = tma.accelerate(torchmetrics.MetricCollection(members, compute_groups=False))
        reference = torchmetrics.MetricCollection(
            {"first": first_kind(), "sum": torchmetrics.SumMetric()}, compute_groups=False
        )
        collector = tma.AsyncMetricCollector(collection)
        collector.bind()
        first = _window(collector, collection)
        if changes:  # the sum's state becomes float64: a bucket of its own, a plan of other sizes
            collection["sum"].set_dtype(torch.float64)
        if case == "every rank":  # (torchmetrics' own sync of states that differ would abort)
            reference["sum"].set_dtype(torch.float64)
        second = _window(collector, collection)
        third = _window(collector, collection)  # the ranks are still in step, and still differ (or still agree)
        collector.unbind()
        reference.update(torch.tensor([1.0, 2.0]))
        expected = {name: value.tolist() for name, value in reference.compute().items()}
        after = fused.reduce_sum({"one": torch.ones(())})["one"]
        out[case] = {"windows": [first, second, third], "theirs": expected, "after": after}
    return out


SCENARIOS: dict[str, Callable[[int, int], Any]] = {
    "idle_rank": idle_rank,
    "forward_only": forward_only,
    "data_dependent_groups": data_dependent_groups,
    "cached_on_one_rank": cached_on_one_rank,
    "zero_updates_every_family": zero_updates_every_family,
}


def run_all(rank: int, world_size: int) -> dict[str, Any]:
    """The entry point every rank runs (importable by name, as spawn requires)."""
    torch.manual_seed(0)
    return run_scenarios(SCENARIOS, rank, world_size)


def run_mismatches(rank: int, world_size: int) -> dict[str, Any]:
    """The mismatched plans, in a spawn of their own (a regression that aborts a rank must not hide the others)."""
    return run_scenarios({**MISMATCHES, "plan changed": plan_changed}, rank, world_size)


__all__ = ["MISMATCHES", "SCENARIOS", "run_all", "run_mismatches"]
