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
