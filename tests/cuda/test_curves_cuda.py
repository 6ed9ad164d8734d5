"""Unbinned curves on CUDA: ``bool`` scores are scored 0/1 by torchmetrics there, as ours do on every device."""

import pytest
import torch
import torchmetrics.classification as tmc

import torchmetrics_async.classification as tac
from tests.parity import assert_same

pytestmark = pytest.mark.cuda


@pytest.mark.parametrize(
    ("name", "kwargs", "shape"),
    [
        ("BinaryAUROC", {}, (8,)),
        ("BinaryPrecisionRecallCurve", {"validate_args": False}, (8,)),
        ("MultilabelAUROC", {"num_labels": 3, "validate_args": False}, (8, 3)),
    ],
)
def test_bool_scores_give_torchmetrics_cuda_values(name: str, kwargs: dict, shape: tuple, device) -> None:
    """The README row "`bool` scores to an unbinned binary/multilabel curve": torchmetrics' CPU compute fails."""
    generator = torch.Generator().manual_seed(0)
    preds = torch.rand(shape, generator=generator) > 0.5
    target = torch.randint(0, 2, shape, generator=generator)
    preds[0], target[0], target[1] = True, 1, 0
    ours, theirs = getattr(tac, name)(**kwargs).to(device), getattr(tmc, name)(**kwargs).to(device)
    ours.update(preds.to(device), target.to(device))
    theirs.update(preds.to(device), target.to(device))
    assert_same(ours.compute(), theirs.compute(), exact=True)


@pytest.mark.parametrize("name", ["MulticlassAUROC", "MultilabelAUROC", "MulticlassAveragePrecision"])
@pytest.mark.parametrize("average", ["macro", "weighted", None])
def test_binned_forward_is_torchmetrics_forward_bit_for_bit(name: str, average: str | None, device) -> None:
    """Issue 29 item 5 on CUDA, where ``mean()`` is ``sum * (1 / n)``: a binned forward() equals torchmetrics'."""
    key = "num_classes" if name.startswith("Multiclass") else "num_labels"
    kwargs = {"thresholds": 20, "average": average, key: 7}
    ours, theirs = getattr(tac, name)(**kwargs).to(device), getattr(tmc, name)(**kwargs).to(device)
    generator = torch.Generator().manual_seed(29)
    for _ in range(25):
        n = int(torch.randint(1, 40, (), generator=generator))
        preds = torch.rand(n, 7, generator=generator)
        shape = (n,) if name.startswith("Multiclass") else (n, 7)
        target = torch.randint(0, 7 if name.startswith("Multiclass") else 2, shape, generator=generator)
        preds, target = preds.softmax(-1).to(device), target.to(device)
        assert_same(ours(preds, target), theirs(preds, target), exact=True)
