"""Compute groups form wherever torchmetrics forms them, accelerated and torchmetrics members mixed."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torchmetrics
import torchmetrics.classification as tmc

import torchmetrics_async as ta
import torchmetrics_async.classification as tac
from torchmetrics_async.accelerate import patch

MEMBERS = {
    "confmat": (tmc.MulticlassConfusionMatrix, tac.MulticlassConfusionMatrix),
    "kappa": (tmc.MulticlassCohenKappa, None),
    "mcc": (tmc.MulticlassMatthewsCorrCoef, None),
    "acc": (tmc.MulticlassAccuracy, tac.MulticlassAccuracy),
    "prec": (tmc.MulticlassPrecision, tac.MulticlassPrecision),
}


def _batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(16, 3, generator=g), torch.randint(0, 3, (16,), generator=g)) for _ in range(4)]


def _members(accelerated: bool) -> dict[str, Any]:
    return {
        name: (ours if accelerated and ours is not None else theirs)(num_classes=3)
        for name, (theirs, ours) in MEMBERS.items()
    }


def _run(collection: Any) -> tuple[list[Any], Any]:
    values = [collection(*batch) for batch in _batches()[:2]]
    for batch in _batches()[2:]:
        collection.update(*batch)
    return values, collection.compute()


def _expected() -> tuple[list[Any], Any]:
    return _run(torchmetrics.MetricCollection(_members(accelerated=False), compute_groups=False))


def _torchmetrics_groups() -> dict[int, list[str]]:
    collection = torchmetrics.MetricCollection(_members(accelerated=False))
    _run(collection)
    return collection.compute_groups


@pytest.mark.parametrize("how", ["fused-collection", "torchmetrics-collection-under-patch"])
def test_mixed_members_share_a_compute_group_and_keep_their_values(how: str) -> None:
    if how == "fused-collection":
        collection = ta.MetricCollection(_members(accelerated=True))
        values = _run(collection)
    else:
        with patch():
            collection = torchmetrics.MetricCollection(_members(accelerated=True))
            values = _run(collection)
    assert collection.compute_groups == _torchmetrics_groups()
    torch.testing.assert_close(values, _expected())


def _run_grouped_first(collection: Any) -> tuple[list[Any], Any]:
    """The groups form at the first update; the forwards after it run every member on linked states."""
    batches = _batches()
    collection.update(*batches[0])
    return [collection(*batch) for batch in batches[1:]], collection.compute()


@pytest.mark.parametrize("how", ["fused-collection", "torchmetrics-collection-under-patch", "torchmetrics-collection"])
def test_forward_of_a_linked_follower_writes_only_its_own_states(how: str) -> None:
    """A follower handed its leader's states copies them at the link: its forward never adds into the leader's."""
    expected = _run_grouped_first(torchmetrics.MetricCollection(_members(accelerated=False), compute_groups=False))
    if how == "fused-collection":
        collection = ta.MetricCollection(_members(accelerated=True))
        values = _run_grouped_first(collection)
    elif how == "torchmetrics-collection":
        collection = torchmetrics.MetricCollection(_members(accelerated=True))
        values = _run_grouped_first(collection)
    else:
        with patch():
            collection = torchmetrics.MetricCollection(_members(accelerated=True))
            values = _run_grouped_first(collection)
    assert ["acc", "prec"] in collection.compute_groups.values()  # the accelerated pair really shares
    torch.testing.assert_close(values, expected)


def test_torchmetrics_own_collection_groups_the_same_members() -> None:
    """The reference the tests above compare with: two groups (the confusion-matrix ones, the stat scores)."""
    assert sorted(map(sorted, _torchmetrics_groups().values())) == [["acc", "prec"], ["confmat", "kappa", "mcc"]]


def test_unpatch_restores_torchmetrics_comparison() -> None:
    original = torchmetrics.MetricCollection.__dict__["_equal_metric_states"]
    with patch():
        assert torchmetrics.MetricCollection.__dict__["_equal_metric_states"] is not original
    assert torchmetrics.MetricCollection.__dict__["_equal_metric_states"] is original


def test_a_bad_label_in_a_grouped_accelerated_leader_is_still_raised() -> None:
    collection = ta.MetricCollection({"acc": tac.MulticlassAccuracy(3), "prec": tac.MulticlassPrecision(3)})
    collection.update(torch.tensor([0, 1]), torch.tensor([0, 1]))
    collection.update(torch.tensor([0, 1]), torch.tensor([0, 5]))
    assert collection.compute_groups == {0: ["acc", "prec"]}
    with pytest.raises(RuntimeError, match=r"^Detected more unique values in `target`"):
        collection.compute()
