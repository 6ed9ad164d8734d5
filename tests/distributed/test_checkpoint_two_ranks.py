"""torch.distributed.checkpoint (DCP) on 2 real gloo ranks: every rank gets its own window back, list states too.

Each rank feeds different data (different lengths of list states too), so a checkpoint that handed every rank one
rank's window (DCP's treatment of plain tensors saved under the same key) would change the results. The expected
values are those of the same run without the checkpoint.
"""

from __future__ import annotations

import shutil
import tempfile
import warnings
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torchmetrics

import torchmetrics_async as ta
from tests.distributed import harness
from tests.distributed.harness import scenario
from torchmetrics_async import AsyncMetricCollector
from torchmetrics_async.checkpoint import PerRankState

try:
    from torchmetrics_async.classification import MulticlassAccuracy
except ImportError:  # classification is being finished elsewhere
    MulticlassAccuracy = None

pytestmark = pytest.mark.skipif(
    not torch.distributed.is_available() or not torch.distributed.is_gloo_available(), reason="needs gloo"
)

dcp = pytest.importorskip("torch.distributed.checkpoint")

CLASSES = 3


# --------------------------------------------------------------------------------------------------------------------
# What every rank runs
# --------------------------------------------------------------------------------------------------------------------


def _members(module: Any) -> dict[str, Any]:
    members = {
        "cat": module.CatMetric(),
        "sum": module.SumMetric(),
        "mean": module.MeanMetric(),
        "max": module.MaxMetric(),
    }
    if MulticlassAccuracy is not None:
        classes = torchmetrics.classification if module is torchmetrics else ta.classification
        members["acc"] = classes.MulticlassAccuracy(num_classes=CLASSES)
    return members


def _step(live: Any, rank: int, seed: int) -> None:
    """One batch; rank-dependent values and lengths (rank 1's list state grows faster)."""
    generator = torch.Generator().manual_seed(1000 * rank + seed)
    x = torch.randn(2 + 2 * rank, generator=generator) + 10 * rank
    preds = torch.randint(0, CLASSES, (4,), generator=generator)
    target = torch.randint(0, CLASSES, (4,), generator=generator)
    for name, metric in live.items(keep_base=True, copy_state=False):
        if name == "acc":
            metric.update(preds, target)
        else:
            metric.update(x)


# Actions of a run; a checkpoint is taken after ``cut`` actions.
_SCRIPT = ["update", "bind", "update", "schedule", "update", "update", "collect", "update", "schedule", "collect"]
_POINTS = {"not bound": 1, "mid-window": 3, "window in flight": 5, "after collect": 7}


def _run(collector: AsyncMetricCollector, live: Any, rank: int, actions: list[str], first: int) -> list[Any]:
    results = []
    for index, action in enumerate(actions, start=first):
        if action == "update":
            _step(live, rank, index)
        elif action == "bind":
            collector.bind()
        elif action == "schedule":
            collector.schedule_collection()
        else:
            results.append(collector.collect_results())
    return results


def _shared_dir() -> str:
    """A directory every rank writes into (rank 0 makes it)."""
    path = [tempfile.mkdtemp(prefix="tma-dcp-") if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(path, src=0)
    return path[0]


def _remove(path: str) -> None:
    dist.barrier()  # a test helper: every rank is done with the files
    if dist.get_rank() == 0:
        shutil.rmtree(path, ignore_errors=True)


def collector_dcp(rank: int, world_size: int) -> dict[str, Any]:
    """At each lifecycle point: DCP save, DCP load into a fresh collector, continue; equal to the uninterrupted run."""
    out: dict[str, Any] = {}
    for point, cut in _POINTS.items():
        reference_live = ta.MetricCollection(_members(ta))
        uninterrupted = _run(AsyncMetricCollector(reference_live), reference_live, rank, _SCRIPT, 0)

        live = ta.MetricCollection(_members(ta))
        collector = AsyncMetricCollector(live)
        before = _run(collector, live, rank, _SCRIPT[:cut], 0)
        saved = collector.state_dict()["rank" + str(rank)]
        path = _shared_dir()
        dcp.save({"collector": collector}, checkpoint_id=path)

        fresh_live = ta.MetricCollection(_members(ta))
        fresh = AsyncMetricCollector(fresh_live)
        if collector.is_bound:
            fresh.bind()
        dcp.load({"collector": fresh}, checkpoint_id=path)
        loaded = fresh.state_dict()["rank" + str(rank)]
        after = _run(fresh, fresh_live, rank, _SCRIPT[cut:], cut)
        if collector.is_scheduled:
            collector.collect_results()  # the original's window in flight: every rank finishes it, then forgets it
        _remove(path)
        out[point] = {
            "uninterrupted": uninterrupted,
            "restored": before + after,
            "in flight": saved["in_flight"],
            "local sum": float(saved["metrics"]["metric.sum"]["states"]["sum_value"]),
            "local window cat": [p.tolist() for p in saved["window"]["metric.cat"]["states"]["value"]],
            "loaded window cat": [p.tolist() for p in loaded["window"]["metric.cat"]["states"]["value"]],
            "local cat": [p.tolist() for p in saved["metrics"]["metric.cat"]["states"]["value"]],
            "loaded cat": [p.tolist() for p in loaded["metrics"]["metric.cat"]["states"]["value"]],
        }
    return out


def metrics_dcp(rank: int, world_size: int) -> dict[str, Any]:
    """Metrics used directly, mid-window: DCP through PerRankState, then compute() (torchmetrics' sync) as without."""
    plain = {"plain cat": torchmetrics.CatMetric(), "plain sum": torchmetrics.SumMetric()}
    live = {"collection": ta.MetricCollection(_members(ta)), "alone": ta.CatMetric(), **plain}
    reference = {"collection": ta.MetricCollection(_members(ta)), "alone": ta.CatMetric()}
    reference.update({"plain cat": torchmetrics.CatMetric(), "plain sum": torchmetrics.SumMetric()})

    def feed(metrics: dict[str, Any], seed: int) -> None:
        _step(metrics["collection"], rank, seed)
        value = torch.arange(1.0 + rank) + 100 * rank + seed
        for name in ("alone", "plain cat", "plain sum"):
            metrics[name].update(value)

    for seed in range(2):
        feed(live, seed)
        feed(reference, seed)
    path = _shared_dir()
    dcp.save({"metrics": PerRankState(live)}, checkpoint_id=path)
    fresh = {"collection": ta.MetricCollection(_members(ta)), "alone": ta.CatMetric()}
    fresh.update({"plain cat": torchmetrics.CatMetric(), "plain sum": torchmetrics.SumMetric()})
    dcp.load({"metrics": PerRankState(fresh)}, checkpoint_id=path)
    _remove(path)
    feed(fresh, 2)
    feed(reference, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {
            "restored": {name: _python(metric.compute()) for name, metric in fresh.items()},
            "uninterrupted": {name: _python(metric.compute()) for name, metric in reference.items()},
            "restored update counts": {name: fresh[name]._update_count for name in ("alone", "plain cat")},
            "uninterrupted update counts": {name: reference[name]._update_count for name in ("alone", "plain cat")},
        }


def wrong_world_size(rank: int, world_size: int) -> dict[str, Any]:
    """A collector checkpoint saved by 2 processes refuses to load into one (as a single process would see it)."""
    state = AsyncMetricCollector(ta.SumMetric()).state_dict()
    state = {**state, "world_size": 1}
    try:
        AsyncMetricCollector(ta.SumMetric()).load_state_dict(state)
    except ValueError as err:
        return {"error": str(err), "keys": sorted(AsyncMetricCollector(ta.SumMetric()).state_dict())}
    return {"error": None}


def _python(tree: Any) -> Any:
    if isinstance(tree, torch.Tensor):
        return tree.tolist()
    if isinstance(tree, dict):
        return {key: _python(value) for key, value in tree.items()}
    return tree


def run_all(rank: int, world_size: int) -> dict[str, Any]:
    scenarios = {"collector_dcp": collector_dcp, "metrics_dcp": metrics_dcp, "wrong_world_size": wrong_world_size}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # DCP's own notices
        return harness.run_scenarios(scenarios, rank, world_size)


# --------------------------------------------------------------------------------------------------------------------
# The tests
# --------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ranks() -> list[dict[str, Any]]:
    return harness.run(run_all, world_size=2)


@pytest.mark.parametrize("point", list(_POINTS))
def test_collector_round_trips_through_dcp_per_rank(ranks, point):
    rank0, rank1 = (results[point] for results in scenario(ranks, "collector_dcp"))
    for rank, results in enumerate((rank0, rank1)):
        assert results["restored"] == results["uninterrupted"], f"rank {rank}"
        assert results["loaded cat"] == results["local cat"], f"rank {rank}: its own list state"
        assert results["loaded window cat"] == results["local window cat"], f"rank {rank}: its own window"
    # the ranks' windows differ, so one rank's window loaded everywhere would show
    assert rank0["local sum"] != rank1["local sum"]
    assert rank0["local cat"] != rank1["local cat"]
    assert rank0["in flight"] is rank1["in flight"] is (point == "window in flight")
    if point == "window in flight":
        assert rank0["local window cat"] != rank1["local window cat"]


def test_metrics_round_trip_through_dcp_with_per_rank_state(ranks):
    for rank, results in enumerate(scenario(ranks, "metrics_dcp")):
        assert results["restored"] == results["uninterrupted"], f"rank {rank}"
        assert results["restored update counts"] == results["uninterrupted update counts"], f"rank {rank}"


def test_a_checkpoint_of_another_world_size_is_refused(ranks):
    for rank, results in enumerate(scenario(ranks, "wrong_world_size")):
        assert "saved by 1 processes and is loaded by 2" in results["error"], f"rank {rank}"
        assert results["keys"] == [f"rank{rank}", "world_size"]
