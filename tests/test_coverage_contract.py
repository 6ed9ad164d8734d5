"""Accelerated means sync-free: every registered class runs ``update()`` and ``forward()`` under ``no_host_sync()``.

Parametrized over the registry, with inputs from ``tests/examples.py`` (by class family), so a newly registered class
is checked without editing this file, and fails here if its family has no example. Also: ``accelerated_coverage()``
lists exactly the registered classes as accelerated and gives every other torchmetrics class a status and a reason
(``tests/test_verified_sync_free.py`` checks the classes listed as sync-free as they are and the measured numbers).
"""

import importlib
import warnings
from typing import Any

import pytest
import torch
import torchmetrics
import torchmetrics.classification as tmc

import torchmetrics_async as tma
from tests.examples import Example, example_for
from tools.coverage import (
    ACCELERATED,
    FORWARD_CAVEATS,
    NOT_SYNC_FREE,
    SYNC_FREE_AS_IS,
    CoverageRow,
    accelerated_coverage,
    why_not_accelerated,
)
from torchmetrics_async.accelerate import patch, registry, unpatch
from torchmetrics_async.metric import SyncFreeMixin
from torchmetrics_async.registry import SYNCING_ARGUMENTS, is_deprecated_alias
from torchmetrics_async.testing import HostSyncError, no_host_sync

ACCELERATE_MODULE = importlib.import_module("torchmetrics_async.accelerate")  # the package attribute is the function
REGISTERED = sorted(registry().items(), key=lambda item: (item[0].__module__, item[0].__name__))
# torchmetrics' deprecated top-level aliases (torchmetrics.RetrievalMAP) of registered classes.
ALIASES = [
    value
    for name in dir(torchmetrics)
    if isinstance(value := getattr(torchmetrics, name), type)
    and is_deprecated_alias(value)
    and value.__base__ in registry()
]
DEVICES = ["cpu", "meta"]  # meta stands in for an accelerator: a host-to-device copy is reported there too


def _build(cls: type, example: Example, device: str) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cls(**example.init).to(device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("origin", "accelerated"), REGISTERED, ids=[origin.__name__ for origin, _ in REGISTERED])
def test_registered_class_makes_no_host_sync_in_update_and_forward(
    origin: type, accelerated: type, device: str
) -> None:
    example = example_for(origin)  # LookupError (a failure, never a skip) when the family has no example
    metric = _build(accelerated, example, device)
    assert type(metric).__module__.startswith("torchmetrics_async."), type(metric)  # task wrappers: the task class
    inputs = example.to(device)
    with no_host_sync():
        metric.update(*inputs)
    if origin in FORWARD_CAVEATS:  # listed as syncing in forward() under these arguments: it still does
        with pytest.raises(HostSyncError), no_host_sync():
            metric(*inputs)
        return
    with no_host_sync():
        metric(*inputs)
        metric.update(*inputs)


@pytest.mark.parametrize(("origin", "accelerated"), REGISTERED, ids=[origin.__name__ for origin, _ in REGISTERED])
def test_registered_class_computes_what_torchmetrics_computes_on_the_example(origin: type, accelerated: type) -> None:
    example = example_for(origin)
    ours, theirs = _build(accelerated, example, "cpu"), _build(origin, example, "cpu")
    torch.testing.assert_close(ours(*example.inputs), theirs(*example.inputs))
    ours.update(*example.inputs)
    theirs.update(*example.inputs)
    torch.testing.assert_close(ours.compute(), theirs.compute())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("alias", ALIASES, ids=lambda cls: cls.__name__)
def test_deprecated_alias_is_accelerated_by_rebasing(alias: type, device: str) -> None:
    """``accelerate()`` of an instance and ``patch()`` of the name: no host sync, torchmetrics' values, its warning."""
    example = example_for(alias.__base__)
    ours, theirs = _build(alias, example, "cpu"), _build(alias, example, "cpu")
    assert tma.accelerate(ours) is ours
    assert isinstance(ours, alias)
    assert isinstance(ours, registry()[alias.__base__])
    ours.to(device)
    inputs = example.to(device)
    with no_host_sync():
        ours.update(*inputs)
    if device == "cpu":
        theirs.update(*inputs)
        torch.testing.assert_close(ours(*inputs), theirs(*inputs))
        torch.testing.assert_close(ours.compute(), theirs.compute())
    elif alias.__base__ not in FORWARD_CAVEATS:
        with no_host_sync():
            ours(*inputs)
    with patch():
        patched = getattr(torchmetrics, alias.__name__.lstrip("_"))
        assert type(ours) is patched
        with pytest.warns(FutureWarning, match="deprecated"):
            patched(**example.init)


def test_a_family_without_an_example_is_an_error_not_a_skip() -> None:
    with pytest.raises(LookupError, match="CharErrorRate"):
        example_for(torchmetrics.CharErrorRate)


# ---------------------------------------------------------------------------------------------------------------------
# accelerated_coverage()


@pytest.fixture(scope="module")
def rows() -> list[CoverageRow]:
    return accelerated_coverage()


def test_every_registered_class_is_listed_as_accelerated(rows: list[CoverageRow]) -> None:
    by_class = {row.torchmetrics_class: row for row in rows}
    for origin, accelerated in registry().items():
        assert by_class[origin].accelerated, origin
        assert by_class[origin].accelerated_class is accelerated
        assert by_class[origin].reason == ""
        syncing = SYNCING_ARGUMENTS.get(origin, ("", "", ""))[2]  # arguments under which it stays torchmetrics'
        assert by_class[origin].caveat == FORWARD_CAVEATS.get(origin, syncing)


def test_nothing_outside_the_registry_is_listed_as_accelerated(rows: list[CoverageRow]) -> None:
    """Besides the registry: torchmetrics' deprecated aliases of registered classes, as their rebased classes."""
    accelerated = {row.torchmetrics_class for row in rows if row.accelerated}
    aliases = {cls for cls in accelerated if is_deprecated_alias(cls)}
    assert accelerated - aliases == set(registry())
    assert aliases == set(ALIASES)
    for row in rows:
        if row.torchmetrics_class in aliases:
            assert row.accelerated_class.__mro__[1:3] == (
                row.torchmetrics_class,
                registry()[row.torchmetrics_class.__base__],
            )
    for row in rows:
        if not row.accelerated:
            assert row.reason, row
            assert row.accelerated_class is None


def _unregistered(monkeypatch: pytest.MonkeyPatch, *origins: type) -> dict[str, CoverageRow]:
    """The listing with ``origins`` taken out of the registry for this test (they are all accelerated today)."""
    for origin in origins:
        monkeypatch.delitem(ACCELERATE_MODULE._REGISTRY, origin)
    return {row.name: row for row in accelerated_coverage()}


def test_torchmetrics_subclass_of_a_registered_class_is_listed_with_its_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    row = _unregistered(monkeypatch, tmc.MulticlassJaccardIndex)["MulticlassJaccardIndex"]
    assert row.module == "torchmetrics.classification"
    assert not row.accelerated
    assert row.reason.startswith("not yet accelerated")
    assert "MulticlassConfusionMatrix" in row.reason


def test_task_wrapper_of_unaccelerated_task_classes_is_listed_as_such(monkeypatch: pytest.MonkeyPatch) -> None:
    tasks = (tmc.BinaryJaccardIndex, tmc.MulticlassJaccardIndex, tmc.MultilabelJaccardIndex, torchmetrics.JaccardIndex)
    assert _unregistered(monkeypatch, *tasks)["JaccardIndex"].reason.startswith("a task wrapper")


def test_listing_spans_torchmetrics_public_modules(rows: list[CoverageRow]) -> None:
    modules = {row.module for row in rows}
    assert modules >= {"torchmetrics.aggregation", "torchmetrics.classification", "torchmetrics.regression"}
    assert modules >= {"torchmetrics.wrappers", "torchmetrics.retrieval", "torchmetrics.clustering"}
    assert all(row.module == "torchmetrics" or row.module.startswith("torchmetrics.") for row in rows)
    assert rows == sorted(rows, key=lambda row: (row.module, row.name))
    reasons = {row.name: row.reason for row in rows}
    assert reasons["Metric"].startswith("a base class")
    assert reasons["ClasswiseWrapper"].startswith("a wrapper")
    assert reasons["CharErrorRate"].startswith("takes strings")


def test_every_row_has_one_of_three_statuses(rows: list[CoverageRow]) -> None:
    statuses = {row.name: row.status for row in rows if row.module != "torchmetrics"}
    assert set(statuses.values()) == {ACCELERATED, SYNC_FREE_AS_IS, NOT_SYNC_FREE}
    assert statuses["MeanMetric"] == ACCELERATED
    assert statuses["PeakSignalNoiseRatio"] == SYNC_FREE_AS_IS
    assert statuses["BinaryEER"] == ACCELERATED
    assert statuses["CharErrorRate"] == statuses["ClasswiseWrapper"] == NOT_SYNC_FREE


def test_listing_reads_the_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    class BinaryAUROC(SyncFreeMixin, tmc.BinaryAUROC):
        """A stand-in accelerated class, registered for this test only."""

    monkeypatch.setitem(ACCELERATE_MODULE._REGISTRY, tmc.BinaryAUROC, BinaryAUROC)
    row = next(row for row in accelerated_coverage() if row.torchmetrics_class is tmc.BinaryAUROC)
    assert row.accelerated
    assert row.accelerated_class is BinaryAUROC
    assert why_not_accelerated(tmc.BinaryAUROC) == ""


def test_listing_is_the_same_while_patched(rows: list[CoverageRow]) -> None:
    patch()
    try:
        assert torchmetrics.MeanMetric is tma.MeanMetric
        assert accelerated_coverage() == rows
    finally:
        unpatch()
