"""EER and LogAUC beyond what tests/classification/test_curves.py runs for every curve class: binned ``forward()``
values without a host sync for every ``fpr_range``/average (the batch's curve scored on the device), and the
one-threshold LogAUC (torchmetrics warns and returns 0)."""

import warnings

import pytest
import torch
import torchmetrics.classification as tmc

from tests.parity import assert_same
from torchmetrics_async.classification import roc_scores
from torchmetrics_async.testing import no_host_sync

C = 3
CASES = [
    ("BinaryEER", {}),
    ("MulticlassEER", {"num_classes": C, "average": "macro"}),
    ("MultilabelEER", {"num_labels": C}),
    *(("BinaryLogAUC", {"fpr_range": r}) for r in [(0.001, 0.1), (0.0, 1.0), (0, 1), (0.5, 0.1), (0.2, 0.2)]),
    *(("MulticlassLogAUC", {"num_classes": C, "average": a}) for a in ["macro", None, "none"]),
    ("MultilabelLogAUC", {"num_labels": C, "average": "macro", "fpr_range": (0.1, 0.5)}),
]


def _batch(name: str, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    if name.startswith("Binary"):
        return torch.rand(12, generator=g), torch.randint(0, 2, (12,), generator=g)
    if name.startswith("Multiclass"):
        return torch.randn(12, C, generator=g), torch.randint(0, C, (12,), generator=g)
    return torch.rand(12, C, generator=g), torch.randint(0, 2, (12, C), generator=g)


@pytest.mark.parametrize("thresholds", [7, [0.0, 0.25, 0.6, 1.0]])
@pytest.mark.parametrize(("name", "kwargs"), CASES, ids=[f"{n}-{k}" for n, k in CASES])
def test_binned_forward_is_torchmetrics_value_without_a_host_sync(name: str, kwargs: dict, thresholds: object) -> None:
    g = torch.Generator().manual_seed(0)
    ours = getattr(roc_scores, name)(thresholds=thresholds, validate_args=False, **kwargs)
    theirs = getattr(tmc, name)(thresholds=thresholds, validate_args=False, **kwargs)
    for _ in range(3):
        preds, target = _batch(name, g)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with no_host_sync():
                value = ours(preds, target)
            assert_same(value, theirs(preds, target))
            assert_same(ours.compute(), theirs.compute())


def test_one_threshold_logauc_warns_and_is_zero_without_a_host_sync() -> None:
    preds, target = torch.tensor([0.2, 0.7, 0.9]), torch.tensor([0, 1, 1])
    ours, theirs = roc_scores.BinaryLogAUC(thresholds=[0.5]), tmc.BinaryLogAUC(thresholds=[0.5])
    with pytest.warns(UserWarning, match="At least two values") as record, no_host_sync():
        value = ours(preds, target)
    with pytest.warns(UserWarning, match="At least two values"):
        expected = theirs(preds, target)
    assert len(record) == 1
    assert_same(value, expected)
