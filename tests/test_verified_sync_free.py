"""Sync-free as it is, verified: every class of ``VERIFIED_SYNC_FREE`` runs ``update()`` twice and ``forward()`` under
``no_host_sync()``, on CPU and on the meta device (which stands in for an accelerator: a host-to-device copy is
reported there too). Every torchmetrics class that is not accelerated has exactly one status and reason, so
the coverage listing's numbers come from this file.
"""

import warnings
from typing import Any

import pytest
import torch
import torchmetrics
import torchmetrics.functional.audio

from tests.parity import assert_same
from tests.sync_free_examples import example_for_unaccelerated
from tools.coverage import (
    EXPLAINED,
    NOT_SYNC_FREE,
    SYNC_FREE_AS_IS,
    VERIFIED_SYNC_FREE,
    CoverageRow,
    accelerated_coverage,
)
from torchmetrics_async import AsyncMetricCollector, accelerate
from torchmetrics_async.registry import registry
from torchmetrics_async.testing import count_host_syncs, no_host_sync

DEVICES = ["cpu", "meta"]
VERIFIED = sorted(VERIFIED_SYNC_FREE, key=lambda cls: (cls.__module__, cls.__name__))


def _name(cls: type) -> str:
    return f"{cls.__module__.removeprefix('torchmetrics.')}.{cls.__name__}"


def _build(cls: type, device: str) -> tuple[Any, tuple[Any, ...]]:
    example = example_for_unaccelerated(cls)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the deprecated top-level aliases warn
        return cls(**example.init).to(device), example.to(device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("cls", VERIFIED, ids=_name)
def test_verified_class_makes_no_host_sync_in_update_and_forward(cls: type, device: str) -> None:
    metric, inputs = _build(cls, device)
    with no_host_sync():
        metric.update(*inputs)
        metric.update(*inputs)
        metric(*inputs)


@pytest.mark.parametrize("cls", VERIFIED, ids=_name)
def test_verified_class_in_an_accelerated_collection_is_collected_as_torchmetrics_computes_it(cls: type) -> None:
    metric, inputs = _build(cls, "cpu")
    reference, _ = _build(cls, "cpu")
    collection = accelerate(torchmetrics.MetricCollection({"verified": metric, "mean": torchmetrics.MeanMetric()}))
    collector = AsyncMetricCollector(collection)
    collector.bind()
    for target in (metric, reference):
        target.update(*inputs)
        target.update(*inputs)
    collection["mean"].update(torch.ones(2))
    collector.schedule_collection()
    got = collector.collect_results()["verified"]
    assert_same(torch.tensor(got), reference.compute(), where=_name(cls))


def test_the_tables_hold_only_torchmetrics_classes_that_are_not_accelerated() -> None:
    tables = (set(VERIFIED_SYNC_FREE), set(EXPLAINED))
    assert not any(a & b for i, a in enumerate(tables) for b in tables[i + 1 :]), "a class in two tables"
    for table in tables:
        assert not table & set(registry()), "an accelerated class: take it out of the coverage tables"
        assert all(cls.__module__.split(".")[0] == "torchmetrics" for cls in table)


@pytest.fixture(scope="module")
def rows() -> list[CoverageRow]:
    return accelerated_coverage()


def test_every_class_that_is_not_accelerated_has_a_status_and_a_reason(rows: list[CoverageRow]) -> None:
    listed = set(VERIFIED_SYNC_FREE) | set(EXPLAINED)
    for row in rows:
        if row.accelerated:
            continue
        assert row.reason, row
        if row.torchmetrics_class in VERIFIED_SYNC_FREE:
            assert row.status == SYNC_FREE_AS_IS
            assert row.reason.startswith(SYNC_FREE_AS_IS)
            continue
        assert row.status == NOT_SYNC_FREE
        if row.torchmetrics_class not in listed:  # only base classes, task wrappers and wrappers keep their reason
            assert row.reason.startswith(("a base class", "a task wrapper", "a wrapper")), row
        assert "not yet accelerated" not in row.reason, row


# Listed in EXPLAINED: its first update() per process copies a cached table to the device (not measurable alike in every
# test order); after that, update() and forward() make no host sync.
_SYNC_ONCE = [cls for cls in EXPLAINED if issubclass(cls, torchmetrics.audio.PermutationInvariantTraining)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("cls", _SYNC_ONCE, ids=_name)
def test_a_class_that_syncs_once_makes_no_host_sync_after_its_first_update(cls: type, device: str) -> None:
    metric, inputs = _build(cls, device)
    metric.update(*inputs)
    with no_host_sync():
        metric.update(*inputs)
        metric(*inputs)


def test_the_reason_of_a_class_that_takes_strings_says_what_to_do(rows: list[CoverageRow]) -> None:
    by_class = {row.torchmetrics_class: row for row in rows}
    assert by_class[torchmetrics.text.WordErrorRate].reason.startswith("takes strings")
    assert "keep it out of the training step" in by_class[torchmetrics.text.WordErrorRate].reason


def test_pit_with_three_speakers_syncs_in_every_update_as_explained() -> None:
    """scipy's assignment runs on the host: the number in the explained reason."""
    pit = torchmetrics.audio.PermutationInvariantTraining
    metric = pit(torchmetrics.functional.audio.scale_invariant_signal_noise_ratio, eval_func="max")
    preds = torch.randn(4, 3, 50, generator=torch.Generator().manual_seed(0))
    metric.update(preds, preds.flip(1))
    with count_host_syncs() as syncs:
        metric.update(preds, preds.flip(1))
    assert f"({syncs.total} host syncs per update() measured with 3 speakers" in EXPLAINED[pit], syncs.summary()
