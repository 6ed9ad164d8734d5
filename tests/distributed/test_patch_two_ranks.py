"""On 2 gloo ranks: a ``MetricCollection`` built after ``patch()`` from names bound before it syncs in one fused round.

The Hydra/Lightning way (issue 29): the names are imported at the top of a module, ``patch()`` runs later, and the
collection is built after it. It must count the collectives of ``accelerate(collection)`` and give torchmetrics' values.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torchmetrics import MetricCollection  # bound before patch()
from torchmetrics.aggregation import CatMetric, MaxMetric, MeanMetric, SumMetric  # bound before patch()

import torchmetrics_async as tma
from tests.distributed import harness
from tests.parity import assert_same

pytestmark = pytest.mark.skipif(
    not torch.distributed.is_available() or not torch.distributed.is_gloo_available(), reason="needs gloo"
)


def _members() -> dict[str, Any]:
    return {"mean": MeanMetric(), "sum": SumMetric(), "max": MaxMetric(), "cat": CatMetric()}


def _computed(collection: Any, rank: int) -> tuple[Any, dict[str, int]]:
    g = torch.Generator().manual_seed(rank)
    for size in (3, 2 + rank):
        collection.update(torch.randn(size, generator=g))
    with harness.count_collectives() as counted:
        values = collection.compute()
    return values, counted.as_dict()


def patched_collection(rank: int, world_size: int) -> dict[str, Any]:
    with tma.patch():
        patched = MetricCollection(_members())
    return {
        "type": type(patched).__module__,
        "patched": _computed(patched, rank),
        "accelerated": _computed(tma.accelerate(MetricCollection(_members())), rank),
        "torchmetrics": _computed(MetricCollection(_members()), rank),
    }


def test_collection_built_after_patch_syncs_as_accelerate_does() -> None:
    for rank, result in enumerate(harness.run(patched_collection, world_size=2)):
        assert result["type"] == tma.MetricCollection.__module__
        (patched, patched_count), (accelerated, accelerated_count) = result["patched"], result["accelerated"]
        theirs, their_count = result["torchmetrics"]
        assert patched_count == accelerated_count
        assert sum(patched_count.values()) < sum(their_count.values())
        assert_same(patched, theirs, where=f"rank {rank}", exact=True)
        assert_same(accelerated, theirs, where=f"rank {rank}", exact=True)
