"""AsyncMetricCollector on 2 real gloo ranks: uneven updates, updates while a window is in flight, collectives counted.

One spawn for the module; every rank runs :func:`run_all` (the scenarios below) and each test checks one scenario.
The expected values are torchmetrics' own: the same per-rank data fed to torchmetrics' classes, computed with
torchmetrics' sync, window by window.
"""

from __future__ import annotations

import contextlib
import math
import time
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torchmetrics

import torchmetrics_async as ta
from tests.distributed import harness
from tests.distributed.harness import scenario
from tests.parity import torchmetrics_text
from torchmetrics_async import AsyncMetricCollector
from torchmetrics_async.sync import metrics as sync_metrics_module
from torchmetrics_async.testing import count_host_syncs

try:
    from torchmetrics_async.classification import MulticlassAccuracy
except ImportError:  # classification is being finished elsewhere
    MulticlassAccuracy = None

pytestmark = pytest.mark.skipif(
    not torch.distributed.is_available() or not torch.distributed.is_gloo_available(), reason="needs gloo"
)

CLASSES = 4


# --------------------------------------------------------------------------------------------------------------------
# What every rank runs
# --------------------------------------------------------------------------------------------------------------------


def _data(rank: int, window: int, batches: int) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(100 * window + rank)
    return [
        (
            torch.randn(3 + rank + i, generator=generator),
            torch.randint(0, CLASSES, (5,), generator=generator),
            torch.randint(0, CLASSES, (5,), generator=generator),
        )
        for i in range(batches)
    ]


def _members(module: Any) -> dict[str, Any]:
    members = {"mean": module.MeanMetric(), "sum": module.SumMetric(), "max": module.MaxMetric()}
    if MulticlassAccuracy is not None:
        classes = torchmetrics.classification if module is torchmetrics else ta.classification
        members["acc"] = classes.MulticlassAccuracy(num_classes=CLASSES)
    return members


@contextlib.contextmanager
def _count_calls(module: Any, name: str) -> Iterator[list[int]]:
    """Count calls of ``module.name`` inside the block (a one-element list: the count)."""
    count = [0]
    original = getattr(module, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        count[0] += 1
        return original(*args, **kwargs)

    setattr(module, name, counted)
    try:
        yield count
    finally:
        setattr(module, name, original)


def _update(collection: Any, batches: list) -> None:
    for x, preds, target in batches:
        for name, metric in collection.items(keep_base=True, copy_state=False):
            if name == "acc":
                metric.update(preds, target)
            else:
                metric.update(x)


def _python(tree: Any) -> Any:
    if isinstance(tree, torch.Tensor):
        return tree.tolist()
    if isinstance(tree, dict):
        return {key: _python(value) for key, value in tree.items()}
    return tree


def _torchmetrics_window(batches: list) -> Any:
    reference = torchmetrics.MetricCollection(_members(torchmetrics))
    _update(reference, batches)
    return _python(reference.compute())  # torchmetrics syncs inside compute()


# Uneven updates: batches per rank, per window (a rank may see nothing in a window).
_COUNTS = ((3, 1), (1, 2), (0, 2))


def windows(rank: int, world_size: int) -> dict[str, Any]:
    live = ta.MetricCollection(_members(ta))
    collector = AsyncMetricCollector(live)
    with harness.count_collectives() as bound, count_host_syncs() as syncs:
        collector.bind()
    data = [_data(rank, window, counts[rank]) for window, counts in enumerate(_COUNTS)]
    out: dict[str, Any] = {"ours": [], "theirs": [], "schedule": [], "collect": []}
    out["bind"] = {"collectives": bound.as_dict(), "host syncs": syncs.total}
    out.update({"schedule host syncs": [], "schedule waits": [], "collect host syncs": [], "planned": []})
    _update(live, data[0])
    for window in range(len(_COUNTS)):
        with (
            harness.count_collectives() as scheduled,
            count_host_syncs() as syncs,
            harness.count_waits() as waits,
            _count_calls(sync_metrics_module, "_plan_states") as planned,
        ):
            collector.schedule_collection()
        out["schedule"].append(scheduled.as_dict())
        out["planned"].append(planned[0])
        out["schedule host syncs"].append(syncs.total)
        out["schedule waits"].append(waits[0])
        if window + 1 < len(_COUNTS):
            _update(live, data[window + 1])  # the next window, while this one is in flight
        with harness.count_collectives() as collected, count_host_syncs() as syncs:
            out["ours"].append(collector.collect_results())
        out["collect"].append(collected.as_dict())
        out["collect host syncs"].append(syncs.total)
    for window in range(len(_COUNTS)):
        out["theirs"].append(_torchmetrics_window(data[window]))
    with harness.count_collectives() as theirs:
        _torchmetrics_window(data[0])
    out["torchmetrics count"] = theirs.as_dict()
    return out


def checkpoint(rank: int, world_size: int) -> dict[str, Any]:
    """A window in flight saved, loaded into a fresh collector, collected there: the same results."""
    live = ta.MetricCollection(_members(ta))
    collector = AsyncMetricCollector(live)
    collector.bind()
    _update(live, _data(rank, 7, 2 - rank))
    collector.schedule_collection()
    _update(live, _data(rank, 8, 1 + rank))
    state = collector.state_dict()
    fresh_live = ta.MetricCollection(_members(ta))
    fresh = AsyncMetricCollector(fresh_live)
    fresh.load_state_dict(state)
    fresh.bind()
    # every rank finishes the original window first, then the reloaded one: collectives in the same order
    first = collector.collect_results()
    reloaded = fresh.collect_results()
    collector.schedule_collection()
    fresh.schedule_collection()
    second = collector.collect_results()
    reloaded_second = fresh.collect_results()
    return {"first": first, "reloaded": reloaded, "second": second, "reloaded second": reloaded_second}


def list_states(rank: int, world_size: int) -> dict[str, Any]:
    """List states: the shape exchange, its host read and the data exchange at schedule; collect is local."""
    live = ta.MetricCollection({"cat": ta.CatMetric(), "sum": ta.SumMetric()})
    collector = AsyncMetricCollector(live)
    collector.bind()
    values = [torch.arange(3.0 + rank) + 10 * rank, torch.tensor([float(rank)])]
    for value in values[: 1 + rank]:
        live.update(value)
    with harness.count_collectives() as scheduled, count_host_syncs() as syncs:
        collector.schedule_collection()
    live.update(torch.tensor(99.0))
    with harness.count_collectives() as collected:
        ours = collector.collect_results()
    reference = torchmetrics.MetricCollection({"cat": torchmetrics.CatMetric(), "sum": torchmetrics.SumMetric()})
    for value in values[: 1 + rank]:
        reference.update(value)
    return {
        "ours": ours,
        "theirs": _python(reference.compute()),
        "schedule": scheduled.as_dict(),
        "collect": collected.as_dict(),
        "schedule host syncs": syncs.total,
    }


def nan_error(rank: int, world_size: int) -> dict[str, Any]:
    """A NaN on rank 1 only: the synced flag makes collect_results() raise on both ranks, torchmetrics' message."""
    live = ta.MetricCollection({"sum": ta.SumMetric(nan_strategy="error")})
    collector = AsyncMetricCollector(live)
    collector.bind()
    live.update(torch.tensor([1.0, math.nan if rank == 1 else 2.0]))
    collector.schedule_collection()
    try:
        collector.collect_results()
    except RuntimeError as err:
        return {"error": str(err)}
    return {"error": None}


def _logged_members(module: Any) -> dict[str, Any]:
    """List state, fused states, a wrapper computing (and syncing) through its own compute(), classification."""
    members = {
        "cat": module.CatMetric(),
        "sum": module.SumMetric(),
        "mean": module.MeanMetric(),
        "running": module.RunningMean(window=2),
    }
    if MulticlassAccuracy is not None:
        classes = torchmetrics.classification if module is torchmetrics else ta.classification
        members["acc"] = classes.MulticlassAccuracy(num_classes=CLASSES)
    return members


def _update_logged(collection: Any, batches: list) -> None:
    for x, preds, target in batches:
        for name, metric in collection.items(keep_base=True, copy_state=False):
            if name == "acc":
                metric.update(preds, target)
            else:
                metric.update(x)


# Batches per rank, per window; rank 0 does not collect window 2 either (the next schedule drops it there too).
_LOGGED = ((2, 1), (0, 3), (1, 1), (3, 0), (1, 2))
_NOT_COLLECTED = (2,)


def rank0_only(rank: int, world_size: int) -> dict[str, Any]:
    """``if rank == 0: log(collector.collect_results())``: rank 1 never collects, rank 0 collects late."""
    live = ta.MetricCollection(_logged_members(ta))
    collector = AsyncMetricCollector(live)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # RunningMean has its own compute(): said once
        collector.bind()
    data = [_data(rank, 20 + window, counts[rank]) for window, counts in enumerate(_LOGGED)]
    out: dict[str, Any] = {"ours": {}, "schedule": [], "collect": []}
    for window in range(len(_LOGGED)):
        _update_logged(live, data[window])
        with harness.count_collectives() as scheduled, warnings.catch_warnings():
            warnings.simplefilter("ignore")  # compute() before update() on a rank without batches
            collector.schedule_collection()
        out["schedule"].append(scheduled.as_dict())
        if rank == 0 and window not in _NOT_COLLECTED:
            time.sleep(0.2)  # rank 1 runs ahead into the next window meanwhile
            with harness.count_collectives() as collected, warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out["ours"][window] = collector.collect_results()
            out["collect"].append(collected.as_dict())
    out["still scheduled"] = collector.is_scheduled
    collector.unbind()  # drops rank 1's last window
    out["theirs"] = {}
    for window in range(len(_LOGGED)):
        reference = torchmetrics.MetricCollection(_logged_members(torchmetrics))
        _update_logged(reference, data[window])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out["theirs"][window] = _python(reference.compute())  # torchmetrics syncs inside compute()
    return out


def rank0_only_error(rank: int, world_size: int) -> dict[str, Any]:
    """A NaN recorded on rank 1, which never collects: rank 0 raises it; the next window is clean."""
    live = ta.MetricCollection({"sum": ta.SumMetric(nan_strategy="error"), "cat": ta.CatMetric()})
    collector = AsyncMetricCollector(live)
    collector.bind()
    out: dict[str, Any] = {"error": None}
    batches = [torch.tensor([1.0, math.nan if rank == 1 else 2.0]), torch.tensor([2.0 + rank, 5.0])]
    for window, batch in enumerate(batches):
        live.update(batch)
        collector.schedule_collection()
        if rank == 0:
            try:
                out[window] = collector.collect_results()
            except RuntimeError as err:
                out["error"] = str(err)
    reference = torchmetrics.MetricCollection({"sum": torchmetrics.SumMetric(), "cat": torchmetrics.CatMetric()})
    reference.update(batches[1])
    out["theirs"] = _python(reference.compute())
    return out


def run_all(rank: int, world_size: int) -> dict[str, Any]:
    scenarios = {
        "windows": windows,
        "checkpoint": checkpoint,
        "list_states": list_states,
        "nan_error": nan_error,
        "rank0_only": rank0_only,
        "rank0_only_error": rank0_only_error,
    }
    return harness.run_scenarios(scenarios, rank, world_size)


# --------------------------------------------------------------------------------------------------------------------
# The tests
# --------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ranks() -> list[dict[str, Any]]:
    return harness.run(run_all, world_size=2)


def _close(got: Any, expected: Any) -> bool:
    if isinstance(expected, dict):
        return isinstance(got, dict) and got.keys() == expected.keys() and all(_close(got[k], expected[k]) for k in got)
    return type(got) is type(expected) and got == pytest.approx(expected, rel=1e-6, abs=1e-6)


def test_windows_equal_torchmetrics_computing_the_same_windows(ranks):
    for rank, results in enumerate(scenario(ranks, "windows")):
        assert len(results["ours"]) == len(_COUNTS)
        for window, (ours, theirs) in enumerate(zip(results["ours"], results["theirs"], strict=True)):
            assert _close(ours, theirs), f"rank {rank} window {window}: {ours} != {theirs}"
    first, second = (results["ours"] for results in scenario(ranks, "windows"))
    assert first == second  # every rank gets the global values


def test_one_fused_round_per_schedule_without_barrier_and_nothing_at_collect(ranks):
    for results in scenario(ranks, "windows"):
        # f32 sums (mean value and weight, sum), f32 max (+ the bool NaN and value-check flags), int64 stat scores;
        # the plan check (agreed at bind()) rides in a sum bucket: no collective of its own
        expected = {"all_reduce": 3 if MulticlassAccuracy is not None else 2}
        assert results["schedule"] == [expected] * len(_COUNTS)
        assert results["collect"] == [{}] * len(_COUNTS)
        # bind() verified the plan on every rank: each window launches at once, without waiting for the other rank,
        # and its check is read with its results, in the one read of collect_results()
        assert results["bind"] == {"collectives": {"all_gather_single": 1}, "host syncs": 1}
        assert results["schedule host syncs"] == [0] * len(_COUNTS)
        assert results["schedule waits"] == [0] * len(_COUNTS)
        # bind() planned and packed the buckets: each window copies its states into them, and plans nothing
        assert results["planned"] == [0] * len(_COUNTS)
        assert results["collect host syncs"] == [1] * len(_COUNTS)
        assert results["torchmetrics count"]["barrier"] > 0  # torchmetrics: a barrier and gathers per state


def test_window_in_flight_survives_a_checkpoint(ranks):
    for rank, results in enumerate(scenario(ranks, "checkpoint")):
        assert results["reloaded"] == results["first"], f"rank {rank}"
        assert results["reloaded second"] == results["second"], f"rank {rank}"


def test_list_states_exchange_shapes_and_data_at_schedule_and_nothing_at_collect(ranks):
    for rank, results in enumerate(scenario(ranks, "list_states")):
        assert _close(results["ours"], results["theirs"]), f"rank {rank}"
        assert results["ours"]["cat"] == [0.0, 1.0, 2.0, 10.0, 11.0, 12.0, 13.0, 1.0]
        assert results["schedule"] == {"all_reduce": 1, "all_gather_single": 2}  # shapes, data; the check rides
        assert results["collect"] == {}
        assert results["schedule host syncs"] == 1  # the shapes (read to size the data exchange); bind() read the plan


def test_nan_on_one_rank_raises_at_collect_on_every_rank(ranks):
    for results in scenario(ranks, "nan_error"):
        assert torchmetrics_text(results["error"]) == "Encountered `nan` values in tensor"


def test_collecting_on_rank_0_only_over_windows_with_list_states(ranks):
    rank0, rank1 = scenario(ranks, "rank0_only")
    collected = [w for w in range(len(_LOGGED)) if w not in _NOT_COLLECTED]
    assert sorted(rank0["ours"]) == collected
    assert rank1["ours"] == {}
    for window in collected:
        expected = rank0["theirs"][window]
        assert expected == rank1["theirs"][window]  # torchmetrics' synced values: the same on both ranks
        assert _close(rank0["ours"][window], expected), f"window {window}: {rank0['ours'][window]} != {expected}"
    assert rank0["schedule"] == rank1["schedule"]  # every collective is issued by schedule_collection(), alike
    # shapes, data (the plan check rides in a sum bucket); RunningMean syncs inside its own compute(), with its own
    # plan check
    assert all(counts.get("all_gather_single") == 2 + 1 for counts in rank0["schedule"])
    assert rank0["collect"] == [{}] * len(collected)  # collecting is local
    assert rank0["still scheduled"] is False
    assert rank1["still scheduled"] is True  # its last window, dropped by unbind()


def test_an_error_recorded_on_a_rank_that_does_not_collect_is_raised_by_the_one_that_does(ranks):
    rank0, rank1 = scenario(ranks, "rank0_only_error")
    assert torchmetrics_text(rank0["error"]) == "Encountered `nan` values in tensor"
    assert _close(rank0[1], rank0["theirs"])
    assert rank1["error"] is None
    assert 1 not in rank1
