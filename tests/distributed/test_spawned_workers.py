"""Metrics handed to spawned workers: their states arrive in shared memory (``mp.spawn``, Lightning's ``ddp_spawn``).

Pickling a metric into a spawned process moves its state tensors into shared memory, so the parent and every worker
would update the same storage in place. Each worker here receives every registered class from the parent (fresh, or
with one update already made in the parent), updates it with its own shard and computes the synced value: it must
equal the value of the same metric built in the worker itself, and that of the torchmetrics class built there, and
the parent's metrics must be left exactly as they were.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
import torch

from tests.distributed.harness import run
from tests.examples import example_for
from torchmetrics_async.accelerate import registry
from torchmetrics_async.registry import torchmetrics_origin

CLASSES = sorted(registry().values(), key=lambda cls: cls.__name__)
PARENT_SEED = 100


def _build(cls: type, pre_update: bool) -> Any:
    example = example_for(cls)
    metric = cls(**example.init)
    if pre_update:
        metric.update(*example_for(cls, seed=PARENT_SEED).inputs)
    return metric


def _worker(received: dict[str, Any], pre_update: bool, rank: int, world_size: int) -> dict[str, Any]:
    classes = {cls.__name__: cls for cls in CLASSES}  # a task wrapper's instance is of its task's class
    out = {}
    for name, metric in received.items():
        cls = classes[name]
        shard = example_for(cls, seed=rank + 1).inputs
        own, theirs = _build(cls, pre_update), _build(torchmetrics_origin(cls), pre_update)
        values = []
        for each in (metric, own, theirs):
            each.update(*shard)
            values.append(each.compute())
        out[name] = values
    return out


def _snapshot(metrics: dict[str, Any]) -> dict[str, Any]:
    return {
        name: {key: (value.clone() if isinstance(value, torch.Tensor) else [v.clone() for v in value])
               for key, value in metric.metric_state.items()}
        for name, metric in metrics.items()
    }  # fmt: skip


@pytest.mark.parametrize("pre_update", [False, True], ids=["fresh", "updated-in-parent"])
def test_spawned_workers_compute_their_own_values_and_leave_the_parent_alone(pre_update: bool) -> None:
    metrics = {cls.__name__: _build(cls, pre_update) for cls in CLASSES}
    before = _snapshot(metrics)
    results = run(functools.partial(_worker, metrics, pre_update))
    for rank, result in enumerate(results):
        for name, (received, own, theirs) in result.items():
            torch.testing.assert_close(
                received, own, equal_nan=True, msg=f"rank {rank} {name}: received vs built in the worker"
            )
            torch.testing.assert_close(received, theirs, equal_nan=True, msg=f"rank {rank} {name}: vs torchmetrics")
    after = _snapshot(metrics)
    torch.testing.assert_close(after, before, rtol=0, atol=0, msg="the parent's metrics changed")
    for cls in CLASSES:  # and they go on as their own
        metrics[cls.__name__].update(*example_for(cls).inputs)
