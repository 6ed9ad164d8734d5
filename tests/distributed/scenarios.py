"""What every rank runs: torchmetrics and torchmetrics-async side by side on the same per-rank data, in one process.

Each scenario returns plain values (tensors, numbers, strings); the parent asserts on them. Data is a function of the
rank, so every rank can also build what the *whole* world fed and return the expected values for cases where
torchmetrics itself cannot sync (2-D list states with an empty rank).
"""

from __future__ import annotations

import copy
import math
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torchmetrics
import torchmetrics.audio
import torchmetrics.image
from torch import Tensor
from torchmetrics import Metric
from torchmetrics.utilities.distributed import gather_all_tensors

import torchmetrics_async as tma
from tests.distributed.harness import count_collectives, run_scenarios
from torchmetrics_async import distributed as fused
from torchmetrics_async.testing import count_host_syncs

AGGREGATORS = ("MeanMetric", "SumMetric", "MaxMetric", "MinMetric", "CatMetric")


def batches(rank: int, counts: tuple[int, ...] = (3, 1), seed: int = 0) -> list[Tensor]:
    """Uneven updates: ``counts[rank]`` batches of different lengths (a 0-dim one among them)."""
    generator = torch.Generator().manual_seed(1000 * seed + rank)
    out = []
    for index in range(counts[rank]):
        if index == 2:
            out.append(torch.randn((), generator=generator))
        else:
            out.append(torch.randn(4 - index + rank, generator=generator))
    return out


def compute_pair(name: str, rank: int, counts: tuple[int, ...], **kwargs: Any) -> dict[str, Any]:
    """The same updates into torchmetrics' class and ours; both computed with their own sync, collectives counted."""
    theirs, ours = getattr(torchmetrics, name)(**kwargs), getattr(tma, name)(**kwargs)
    for batch in batches(rank, counts):
        theirs.update(batch)
        ours.update(batch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # compute() before update() on the rank that saw nothing
        with count_collectives() as tm_count:
            expected = theirs.compute()
        with count_collectives() as our_count:
            got = ours.compute()
    return {"theirs": expected, "ours": got, "tm_count": tm_count.as_dict(), "our_count": our_count.as_dict()}


def aggregation_parity(rank: int, world_size: int) -> dict[str, Any]:
    out = {}
    for name in AGGREGATORS:
        out[name] = compute_pair(name, rank, (3, 1))
        out[f"{name}/rank 1 without update"] = compute_pair(name, rank, (2, 0))
    out["RunningMean"] = compute_pair("RunningMean", rank, (3, 1), window=2)
    out["RunningSum"] = compute_pair("RunningSum", rank, (3, 1), window=2)
    out["MeanMetric/float64"] = compute_pair("MeanMetric", rank, (3, 1))
    # A second window: compute() restored the local states (unsync), so accumulation goes on.
    theirs, ours = torchmetrics.SumMetric(), tma.SumMetric()
    for metric in (theirs, ours):
        for batch in batches(rank):
            metric.update(batch)
        metric.compute()
        metric.update(torch.tensor([float(rank + 1)]))
    out["SumMetric/second window"] = {"theirs": theirs.compute(), "ours": ours.compute()}
    return out


def cat_shapes(rank: int, world_size: int) -> dict[str, Any]:
    """List states of different lengths per rank, 1-D and 2-D elements, a rank without elements."""

    def rows(r: int, n: int) -> Tensor:
        return torch.arange(n * 3, dtype=torch.float32).view(n, 3) + 100 * r

    out: dict[str, Any] = {}
    # 2-D, both ranks non-empty, different lengths: torchmetrics can do it too.
    theirs, ours = torchmetrics.CatMetric(), tma.CatMetric()
    for metric in (theirs, ours):
        for n in (2, 1) if rank == 0 else (4,):
            metric.update(rows(rank, n))
    out["2-D"] = {"theirs": theirs.compute(), "ours": ours.compute()}
    # 2-D with rank 1 empty: torchmetrics' gather_all_tensors cannot (shape tensors of different lengths); the
    # expected value is rank 0's rows, built here from the known data.
    ours = tma.CatMetric()
    if rank == 0:
        ours.update(rows(0, 2))
        ours.update(rows(0, 3))
    with count_collectives() as count:
        got = ours.compute()
    out["2-D, rank 1 empty"] = {"ours": got, "expected": torch.cat([rows(0, 2), rows(0, 3)]), "count": count.as_dict()}
    # 1-D with rank 0 empty (torchmetrics can: its placeholder is 1-D).
    theirs, ours = torchmetrics.CatMetric(), tma.CatMetric()
    for metric in (theirs, ours):
        if rank == 1:
            metric.update(torch.tensor([1.0, 2.0]))
            metric.update(3.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out["1-D, rank 0 empty"] = {"theirs": theirs.compute(), "ours": ours.compute()}
    # No rank has anything: torchmetrics gives an empty tensor of the metric's dtype.
    theirs, ours = torchmetrics.CatMetric(), tma.CatMetric()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out["all empty"] = {"theirs": theirs.compute(), "ours": ours.compute()}
    return out


class Mixed(Metric):
    """Every kind of state: dtypes, reductions, shapes, list states, custom and None reductions."""

    full_state_update = False

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.add_state("h_sum", torch.zeros(3, dtype=torch.float16), dist_reduce_fx="sum")
        self.add_state("f_mean", torch.zeros(2, 2), dist_reduce_fx="mean")
        self.add_state("d_max", torch.zeros((), dtype=torch.float64), dist_reduce_fx="max")
        self.add_state("f_min", torch.zeros(3), dist_reduce_fx="min")
        self.add_state("i_sum", torch.zeros(2, dtype=torch.int32), dist_reduce_fx="sum")
        self.add_state("l_min", torch.zeros((), dtype=torch.int64), dist_reduce_fx="min")
        self.add_state("b_max", torch.zeros((), dtype=torch.bool), dist_reduce_fx="max")
        self.add_state("b_min", torch.zeros(2, dtype=torch.bool), dist_reduce_fx="min")
        self.add_state("b_sum", torch.zeros(2, dtype=torch.bool), dist_reduce_fx="sum")
        self.add_state("bf_mean", torch.zeros(2, dtype=torch.bfloat16), dist_reduce_fx="mean")
        self.add_state("custom", torch.zeros(2), dist_reduce_fx=lambda stacked: stacked.sum(0) * 10)
        self.add_state("stacked", torch.zeros(2, dtype=torch.float64), dist_reduce_fx=None)
        self.add_state("cat_h", [], dist_reduce_fx="cat")
        self.add_state("cat_l", [], dist_reduce_fx="cat")

    def fill(self, rank: int) -> None:
        r = float(rank)
        self.h_sum += torch.tensor([0.1, 1000.0, -2.5], dtype=torch.float16) * (r + 1)
        self.f_mean += torch.tensor([[1.0, 2.0], [3.0, 4.0]]) * (r + 1)
        self.d_max += 1.0 / 3.0 + r
        self.f_min += torch.tensor([5.0, math.nan if rank == 1 else 1.0, -r])
        self.i_sum += torch.tensor([2**30, 7], dtype=torch.int32)
        self.l_min += 10 - rank
        self.b_max.fill_(rank == 1)
        self.b_min.copy_(torch.tensor([True, rank == 0]))
        self.b_sum.copy_(torch.tensor([True, rank == 0]))
        self.bf_mean += torch.tensor([1.5, 3.25], dtype=torch.bfloat16) * (r + 1)
        self.custom += torch.tensor([1.0, 2.0]) + r
        self.stacked += torch.tensor([r, -r], dtype=torch.float64)
        self.cat_h.append(torch.tensor([1.5, 2.5], dtype=torch.float16) + r)
        if rank == 0:
            self.cat_h.append(torch.tensor(7.0, dtype=torch.float16))  # 0-dim element
        self.cat_l.extend(torch.arange(2 * n, dtype=torch.int64).view(n, 2) + 100 * rank for n in range(1, 3 + rank))

    def update(self) -> None:
        pass

    def compute(self) -> Tensor:
        return self.f_mean


def _states(metric: Metric) -> dict[str, Any]:
    return {attr: getattr(metric, attr) for attr in metric._defaults}


def mixed_states(rank: int, world_size: int) -> dict[str, Any]:
    theirs, ours = Mixed(), Mixed()
    theirs.fill(rank)
    ours.fill(rank)
    with count_collectives() as tm_count:
        theirs.sync()
    with count_collectives() as our_count:
        fused.sync_metrics(ours)
    out = {"theirs": _states(theirs), "ours": _states(ours), "tm_count": tm_count.as_dict()}
    out["our_count"] = our_count.as_dict()
    ours.unsync()
    out["unsynced"] = _states(ours)
    fresh = Mixed()
    fresh.fill(rank)
    out["local"] = _states(fresh)
    # An integer mean: torchmetrics' torch.mean refuses it at sync; so does the fused sync, with the same error.
    errors = []
    for sync in (lambda m: m.sync(), fused.sync_metrics):
        metric = Mixed()
        metric.add_state("i_mean", torch.ones(2, dtype=torch.int64), dist_reduce_fx="mean")
        try:
            sync(metric)
            errors.append(None)
        except RuntimeError as err:
            errors.append(str(err))
    out["int mean errors"] = errors
    # int16: gloo has no int16 collectives, so torchmetrics' gather fails ("Invalid scalar type"); the fused max
    # widens it to int32 (exact) and the byte-packed gather does not care about dtypes.
    metric = Mixed()
    metric.add_state("s_max", torch.tensor([rank, -rank], dtype=torch.int16), dist_reduce_fx="max")
    metric.add_state("s_cat", [], dist_reduce_fx="cat")
    metric.s_cat.append(torch.tensor([rank] * (rank + 1), dtype=torch.int16))
    fused.sync_metrics(metric)
    out["int16"] = {"s_max": metric.s_max, "s_cat": metric.s_cat}
    return out


class ListOfStacks(Metric):
    """A list state with a None reduction: torchmetrics' own path (gather per element, flatten)."""

    def __init__(self) -> None:
        super().__init__()
        self.add_state("items", [], dist_reduce_fx=None)
        self.add_state("total", torch.zeros(()), dist_reduce_fx="sum")

    def update(self, x: Tensor) -> None:
        self.items.append(x)
        self.total += x.sum()

    def compute(self) -> Any:
        return self.items, self.total


def fallback_states(rank: int, world_size: int) -> dict[str, Any]:
    theirs, ours = ListOfStacks(), tma.sync_free(ListOfStacks)()
    for metric in (theirs, ours):
        metric.update(torch.tensor([1.0, 2.0]) + rank)
        metric.update(torch.tensor([3.0]) + rank)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        with count_collectives() as count:
            got = ours.compute()
    expected = theirs.compute()
    return {
        "theirs": expected,
        "ours": got,
        "count": count.as_dict(),
        "warnings": [str(w.message) for w in record if "fused sync" in str(w.message)],
    }


def _collection(accelerated: bool, **extra: Metric) -> torchmetrics.MetricCollection:
    collection = torchmetrics.MetricCollection(
        {
            "mean": torchmetrics.MeanMetric(),
            "sum": torchmetrics.SumMetric(),
            "max": torchmetrics.MaxMetric(),
            "cat": torchmetrics.CatMetric(),
            **extra,
        },
        compute_groups=False,
    )
    return tma.accelerate(collection) if accelerated else collection


def collection(rank: int, world_size: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    theirs, ours = _collection(False), _collection(True)
    out["type"] = type(ours).__name__, type(ours).__module__
    for batch in batches(rank):
        theirs.update(batch)
        ours.update(batch)
    with count_collectives() as tm_count:
        expected = theirs.compute()
    with count_collectives() as our_count, count_host_syncs() as host_syncs:
        got = ours.compute()
    out["four"] = {"theirs": expected, "ours": got, "tm_count": tm_count.as_dict(), "our_count": our_count.as_dict()}
    out["four"]["host_syncs"] = host_syncs.by_op
    out["four"]["synced after"] = [m._is_synced for m in ours.values()]
    # Second window: the local states came back after compute.
    for metric in (theirs, ours):
        metric.update(torch.tensor([10.0 * (rank + 1)]))
    out["second window"] = {"theirs": theirs.compute(), "ours": ours.compute()}
    # Everything: Min, RunningMean (a wrapper: its base metric syncs in its own compute), compute groups.
    extra = {"min": torchmetrics.MinMetric(), "running": torchmetrics.RunningMean(window=2)}
    theirs = torchmetrics.MetricCollection({**_collection(False), **extra})
    extra = {"min": torchmetrics.MinMetric(), "running": torchmetrics.RunningMean(window=2)}
    ours = tma.accelerate(torchmetrics.MetricCollection({**_collection(False), **extra}))
    for batch in batches(rank, (3, 2)):
        theirs.update(batch)
        ours.update(batch)
    with count_collectives() as tm_count:
        expected = theirs.compute()
    with count_collectives() as our_count:
        got = ours.compute()
    out["all"] = {"theirs": expected, "ours": got, "tm_count": tm_count.as_dict(), "our_count": our_count.as_dict()}
    # Compute groups: two members with the same states share them; the fused sync sends them once.
    theirs = torchmetrics.MetricCollection({"a": torchmetrics.MeanMetric(), "b": torchmetrics.MeanMetric()})
    ours = tma.accelerate(
        torchmetrics.MetricCollection({"a": torchmetrics.MeanMetric(), "b": torchmetrics.MeanMetric()})
    )
    for batch in batches(rank):
        theirs.update(batch)
        ours.update(batch)
    with count_collectives() as our_count:
        got = ours.compute()
    out["compute groups"] = {"theirs": theirs.compute(), "ours": got, "our_count": our_count.as_dict()}
    out["compute groups"]["groups"] = ours.compute_groups
    # Options: sync_on_compute=False keeps the local value; a user's dist_sync_fn is used as torchmetrics uses it.
    calls = []

    def my_gather(tensor: Tensor, group: Any = None) -> list[Tensor]:
        calls.append(tuple(tensor.shape))
        return gather_all_tensors(tensor, group)

    ours = tma.accelerate(
        torchmetrics.MetricCollection(
            {
                "local": torchmetrics.SumMetric(sync_on_compute=False),
                "custom": torchmetrics.SumMetric(dist_sync_fn=my_gather),
                "fused": torchmetrics.SumMetric(),
            },
            compute_groups=False,
        )
    )
    ours.update(torch.tensor(float(rank + 1)))
    with count_collectives() as our_count:
        out["options"] = {"ours": ours.compute(), "calls": calls, "our_count": our_count.as_dict()}
    # A plain dict of metrics: fused.sync_context syncs them in one round for the computes inside.
    metrics = {"mean": tma.MeanMetric(), "cat": tma.CatMetric(), "max": torchmetrics.MaxMetric()}
    twins = {"mean": torchmetrics.MeanMetric(), "cat": torchmetrics.CatMetric(), "max": torchmetrics.MaxMetric()}
    for batch in batches(rank):
        for metric in (*metrics.values(), *twins.values()):
            metric.update(batch)
    with count_collectives() as our_count, fused.sync_context(metrics):
        got = {name: metric.compute() for name, metric in metrics.items()}
    out["dict"] = {
        "ours": got,
        "theirs": {name: metric.compute() for name, metric in twins.items()},
        "our_count": our_count.as_dict(),
        "synced after": [metric._is_synced for metric in metrics.values()],
    }
    return out


def nan_error(rank: int, world_size: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    metric = tma.SumMetric(nan_strategy="error")
    metric.update(torch.tensor([1.0, math.nan if rank == 0 else 2.0]))
    try:
        metric.compute()
        out["metric"] = None
    except RuntimeError as err:
        out["metric"] = str(err)
    out["metric synced after"] = metric._is_synced
    collection = tma.accelerate(
        torchmetrics.MetricCollection(
            {"sum": torchmetrics.SumMetric(nan_strategy="error"), "mean": torchmetrics.MeanMetric()},
            compute_groups=False,
        )
    )
    collection.update(torch.tensor([1.0, math.nan if rank == 1 else 2.0]))
    try:
        collection.compute()
        out["collection"] = None
    except RuntimeError as err:
        out["collection"] = str(err)
    out["collection synced after"] = [m._is_synced for m in collection.values()]
    out["local sum after"] = collection["mean"].mean_value
    return out


def process_groups(rank: int, world_size: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    only_zero = dist.new_group([0])  # every rank creates every group, in the same order
    both = dist.new_group([0, 1])
    metric = tma.SumMetric(process_group=only_zero)
    metric.update(torch.tensor(float(rank + 1)))
    with count_collectives() as count:
        out["only rank 0"] = {"value": metric.compute(), "count": count.as_dict()}
    metric = tma.MeanMetric(process_group=both)
    metric.update(torch.tensor([float(rank + 1), 3.0]))
    with count_collectives() as count:
        value = metric.compute()
    out["both"] = {
        "value": value,
        "count": count.as_dict(),
        "groups are the subgroup": [group is both for _, group in count.groups],
    }
    # sync_metrics(process_group=...) overrides each metric's own group, as sync(process_group=...) does.
    metric = tma.SumMetric(process_group=only_zero)
    metric.update(torch.tensor(float(rank + 1)))
    with count_collectives() as count:
        fused.sync_metrics(metric, process_group=both)
    out["override"] = {"value": metric.sum_value.clone(), "groups": [group is both for _, group in count.groups]}
    metric.unsync()
    # A collection whose members sit on two groups: one fused round per group.
    collection = tma.accelerate(
        torchmetrics.MetricCollection(
            {"world": torchmetrics.SumMetric(), "sub": torchmetrics.SumMetric(process_group=only_zero)},
            compute_groups=False,
        )
    )
    collection.update(torch.tensor(float(rank + 1)))
    with count_collectives() as count:
        out["two groups"] = {"value": collection.compute(), "count": count.as_dict()}
    return out


def functional(rank: int, world_size: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    values = {
        "f": torch.tensor([1.0, 2.0]) * (rank + 1),
        "h": torch.tensor([0.5, 1.5], dtype=torch.float16) * (rank + 1),
        "d": torch.tensor(1.0 / 3.0, dtype=torch.float64) + rank,
        "i": torch.tensor([3, -4], dtype=torch.int32) * (rank + 1),
        "nan": torch.tensor([math.nan if rank == 0 else 1.0, 2.0 + rank]),
        "x": 2.5 + rank,
        "tag": "train",
        "nothing": None,
    }
    floats = {key: value for key, value in values.items() if key != "i"}
    for name in ("sum", "max", "min"):
        with count_collectives() as count:
            out[name] = getattr(fused, f"reduce_{name}")(values)
        out[f"{name} count"] = count.as_dict()
    with count_collectives() as count:
        out["mean"] = fused.reduce_mean(floats)
    out["mean count"] = count.as_dict()
    try:
        fused.reduce_mean(values)
        out["mean of ints"] = None
    except TypeError as err:
        out["mean of ints"] = str(err)
    ops = {"f": "sum", "h": "max", "i": "min", "nan": "max", "flag": "max", "x": None}
    with count_collectives() as count:
        out["custom"] = fused.reduce_custom({**values, "flag": torch.tensor(rank == 1)}, ops)
    out["custom count"] = count.as_dict()
    handle = fused.reduce_custom(values, {"d": "max", "i": "sum", "h": "sum"}, async_op=True)
    out["async"] = handle.wait()
    out["async again"] = handle.wait() is out["async"]
    # all_gather
    gathered_in = {"v": torch.arange(3.0) + rank, "m": torch.full((2, 2), rank, dtype=torch.int64), "n": rank, "s": "x"}
    with count_collectives() as count:
        out["all_gather"] = fused.all_gather(gathered_in)
    out["all_gather count"] = count.as_dict()
    handle = fused.all_gather(gathered_in, async_op=True)
    out["all_gather async pending"] = handle.is_completed()
    out["all_gather async"] = handle.wait()
    out["all_gather async completed"] = handle.is_completed()
    try:
        fused.all_gather({"ok": torch.ones(2), "ragged": torch.ones(2 + rank)})
        out["all_gather ragged"] = None
    except ValueError as err:
        out["all_gather ragged"] = str(err)
    # after the error both ranks are still in step: one more collective works
    out["after error"] = fused.reduce_sum({"one": torch.ones(())})["one"]
    return out


def sync_unsync(rank: int, world_size: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    metric = tma.MeanMetric()
    metric.update(torch.tensor([1.0, 2.0]) * (rank + 1))
    with count_collectives() as count, count_host_syncs() as host_syncs:
        metric.sync()
    out["synced"] = (metric.mean_value.clone(), metric.weight.clone(), metric._is_synced)
    out["count"] = count.as_dict()
    out["host syncs"] = host_syncs.by_op
    metric.unsync()
    out["unsynced"] = (metric.mean_value.clone(), metric.weight.clone(), metric._is_synced)
    with metric.sync_context():
        out["in context"] = metric.mean_value.clone()
    out["after context"] = metric.mean_value.clone()
    try:
        fused.sync_metrics(metric)
        fused.sync_metrics(metric)
        out["twice"] = None
    except Exception as err:
        out["twice"] = type(err).__name__ + ": " + str(err)
    metric.unsync()
    # Asynchronous: both rounds in flight, then finished.
    a, b = tma.SumMetric(), tma.CatMetric()
    a.update(torch.tensor(float(rank + 1)))
    b.update(torch.arange(2.0 + rank))
    handle = fused.sync_metrics([a, b], async_op=True)
    out["async before wait"] = (a._is_synced, b._is_synced, handle.is_completed())
    handle.wait()
    out["async"] = (a.sum_value.clone(), b.value.clone(), a._is_synced, b._is_synced)
    # Every sync has a second phase (the plan check read, then the all_reduce): once it is launched, is_completed()
    # turns True when the all_reduce is done.
    e = tma.MeanMetric()
    e.update(torch.tensor(float(rank)))
    handle = fused.sync_metrics(e, async_op=True)
    out["async pending"] = handle.is_completed()
    handle.launch_remaining()
    deadline = time.monotonic() + 10
    while not handle.is_completed() and time.monotonic() < deadline:
        time.sleep(0.001)
    out["async completes"] = (handle.is_completed(), e._is_synced)
    handle.wait()
    out["async completed"] = (e.mean_value.clone(), e._is_synced)
    # With a cat state the plan check and the shape exchange are read on the host: two host syncs.
    c = tma.CatMetric()
    c.update(torch.arange(2.0 + rank))
    with count_host_syncs() as host_syncs:
        c.sync()
    out["cat host syncs"] = host_syncs.by_op
    # A metric with a deepcopy: states and results independent of the original.
    d = copy.deepcopy(c)
    out["deepcopy synced"] = d._is_synced
    return out


def verified_members(rank: int, world_size: int) -> dict[str, Any]:
    """Members that are sync-free as they are (torchmetrics' own classes) in an accelerated collection: fused sync."""

    def members() -> dict[str, Metric]:
        return {
            "mean": torchmetrics.MeanMetric(),
            "psnr": torchmetrics.image.PeakSignalNoiseRatio(data_range=1.0),
            "snr": torchmetrics.audio.SignalNoiseRatio(),
        }

    theirs = torchmetrics.MetricCollection(members(), compute_groups=False)
    ours = tma.accelerate(torchmetrics.MetricCollection(members(), compute_groups=False))
    generator = torch.Generator().manual_seed(rank)
    for _ in range(rank + 1):
        images = torch.rand(2, 3, 8, 8, generator=generator), torch.rand(2, 3, 8, 8, generator=generator)
        signals = torch.randn(2, 50, generator=generator), torch.randn(2, 50, generator=generator)
        for collection in (theirs, ours):
            collection["mean"].update(images[0])
            collection["psnr"].update(*images)
            collection["snr"].update(*signals)
    with count_collectives() as tm_count:
        expected = theirs.compute()
    with count_collectives() as our_count:
        got = ours.compute()
    types = [type(member).__module__ for member in ours.values()]
    out = {"theirs": expected, "ours": got, "types": types}
    return {**out, "tm_count": tm_count.as_dict(), "our_count": our_count.as_dict()}


SCENARIOS: dict[str, Callable[[int, int], Any]] = {
    "verified_members": verified_members,
    "aggregation_parity": aggregation_parity,
    "cat_shapes": cat_shapes,
    "mixed_states": mixed_states,
    "fallback_states": fallback_states,
    "collection": collection,
    "nan_error": nan_error,
    "process_groups": process_groups,
    "functional": functional,
    "sync_unsync": sync_unsync,
}


def run_all(rank: int, world_size: int) -> dict[str, Any]:
    """The entry point every rank runs (importable by name, as spawn requires)."""
    torch.manual_seed(0)
    return run_scenarios(SCENARIOS, rank, world_size)
