"""BinaryGroupStatRates and BinaryFairness: torchmetrics' values without host syncs, group checks deferred."""

import warnings

import pytest
import torch
import torchmetrics.classification as tmc

from tests.parity import Step, assert_same, run_side_by_side
from torchmetrics_async import ShapeMismatchError
from torchmetrics_async.classification import BinaryFairness, BinaryGroupStatRates
from torchmetrics_async.testing import no_host_sync

GROUPS = 3
CASES = [
    (BinaryGroupStatRates, {}),
    (BinaryGroupStatRates, {"ignore_index": -1, "threshold": 0.3}),
    (BinaryGroupStatRates, {"validate_args": False}),
    (BinaryFairness, {}),
    (BinaryFairness, {"task": "equal_opportunity"}),
    (BinaryFairness, {"task": "demographic_parity"}),
]


def _batch(g: torch.Generator, step: int, shape: tuple[int, ...] = (12, 2)) -> tuple[torch.Tensor, ...]:
    """Every group present (torchmetrics miscounts a batch without some group); label, probability or logit preds."""
    preds = [torch.randint(0, 2, shape, generator=g), torch.rand(shape, generator=g), torch.randn(shape, generator=g)]
    target = torch.randint(0, 2, shape, generator=g)
    target[0] = -1 if step % 2 else target[0]  # ignored where ignore_index=-1 (else a violation: odd steps skipped)
    groups = torch.arange(shape[0])[torch.randperm(shape[0], generator=g)] % GROUPS
    return preds[step % 3], target, groups


@pytest.mark.parametrize(("cls", "kwargs"), CASES, ids=lambda c: getattr(c, "__name__", str(c)))
@pytest.mark.parametrize("shape", [(12,), (12, 2)])
def test_values_equal_torchmetrics(cls: type, kwargs: dict, shape: tuple[int, ...]) -> None:
    g = torch.Generator().manual_seed(len(shape))
    steps = [
        Step("forward" if i % 3 == 2 else "update", _batch(g, i, shape))
        for i in range(6)
        if i % 2 == 0 or "ignore_index" in kwargs
    ]
    reference = getattr(tmc, cls.__name__)(num_groups=GROUPS, **kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # demographic_parity warns that it needs no target, in both
        run_side_by_side(reference, cls(num_groups=GROUPS, **kwargs), steps)


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize(("cls", "kwargs"), CASES, ids=lambda c: getattr(c, "__name__", str(c)))
def test_update_makes_no_host_sync(cls: type, kwargs: dict, device: str) -> None:
    metric = cls(num_groups=GROUPS, **kwargs).to(device)
    batch = [x.to(device) for x in _batch(torch.Generator().manual_seed(0), 1)]
    with warnings.catch_warnings(), no_host_sync():
        warnings.simplefilter("ignore")
        metric.update(*batch)
        if cls is BinaryGroupStatRates:  # BinaryFairness' forward names its groups: a listed host read
            metric(*batch)


def test_each_group_counts_in_its_own_row_when_a_batch_lacks_one() -> None:
    """torchmetrics numbers the groups present 0, 1, ...: groups {1, 2} would count in rows 0 and 1."""
    preds, target = torch.tensor([1, 0, 1, 1]), torch.tensor([1, 1, 0, 1])
    groups = torch.tensor([1, 2, 2, 1])
    metric = BinaryGroupStatRates(num_groups=GROUPS)
    metric.update(preds, target, groups)
    rows = torch.stack([metric.tp, metric.fp, metric.tn, metric.fn], dim=1)
    assert_same(rows[0], torch.zeros(4, dtype=torch.long))
    for group in (1, 2):  # each row is torchmetrics' stat scores of that group's entries alone
        assert_same(rows[group], tmc.BinaryStatScores()(preds[groups == group], target[groups == group])[:4])


@pytest.mark.parametrize(
    ("groups", "target", "message"),
    [
        ([0, 1, 2, 3], [0, 1, 1, 0], "group identifiers"),
        ([0, -1, 2, 1], [0, 1, 1, 0], "group identifiers"),
        ([0, 1, 2, 1], [0, 2, 1, 0], "values in `target`"),
    ],
    ids=["group-too-large", "group-negative", "target-not-binary"],
)
def test_value_errors_are_deferred_to_compute(groups: list[int], target: list[int], message: str) -> None:
    metric = BinaryGroupStatRates(num_groups=GROUPS)
    with no_host_sync():
        value = metric(torch.tensor([0.9, 0.1, 0.8, 0.3]), torch.tensor(target), torch.tensor(groups))
    assert all(rates.isnan().all() for rates in value.values())
    with pytest.raises(RuntimeError, match=message):
        metric.compute()


def test_shape_and_dtype_errors_are_raised_at_once() -> None:
    metric = BinaryGroupStatRates(num_groups=GROUPS)
    preds, target = torch.rand(4), torch.tensor([0, 1, 1, 0])
    with no_host_sync():
        with pytest.raises(ShapeMismatchError, match="one group identifier per sample"):
            metric.update(preds, target, torch.tensor([0, 1, 2]))
        with pytest.raises(ValueError, match="Expected dtype of argument groups to be long"):
            metric.update(preds, target, torch.tensor([0, 1, 2, 0], dtype=torch.int32))
    assert metric.tp.sum() == 0


@pytest.mark.parametrize("cls", [BinaryGroupStatRates, BinaryFairness])
def test_an_empty_batch_with_groups_of_another_size_is_a_shape_error(cls: type) -> None:
    """torchmetrics raises torch's reshape error on both (an empty `(0, 1)` batch); ours names the shapes."""
    metric = cls(num_groups=GROUPS)
    empty = torch.empty((0, 1), dtype=torch.long)
    with no_host_sync(), pytest.raises(ShapeMismatchError, match="one group identifier per sample"):
        metric.update(empty, empty, torch.tensor([0]))
    with no_host_sync(), pytest.raises(RuntimeError, match="got an empty batch"):  # torchmetrics raises too
        metric.update(empty, empty, torch.empty(0, dtype=torch.long))
    assert metric.tp.sum() == 0
    with no_host_sync(), pytest.raises(ValueError, match="with a batch dimension"):  # torchmetrics: IndexError
        metric.update(torch.tensor(1), torch.tensor(1), torch.tensor([0]))
