"""The image family on CUDA: no host sync in update()/forward() (CUDA's sync debug mode too), torchmetrics' values."""

import pytest
import torch
import torchmetrics.image as tmi

import torchmetrics_async.image as tai
from tests.examples import example_for
from tests.parity import assert_same
from torchmetrics_async.testing import no_host_sync

pytestmark = pytest.mark.cuda


@pytest.mark.parametrize("name", ["SpatialCorrelationCoefficient", "VisualInformationFidelity"])
def test_update_and_forward_make_no_host_sync_on_cuda_and_give_torchmetrics_values(name: str, device) -> None:
    preds, target = example_for(getattr(tmi, name)).to(device)
    ours, theirs = getattr(tai, name)().to(device), getattr(tmi, name)().to(device)
    with no_host_sync():
        assert torch.cuda.get_sync_debug_mode() == 2
        ours.update(preds, target)
        batch = ours(target, preds)
    theirs.update(preds, target)
    assert_same(batch, theirs(target, preds), exact=True)
    assert_same(ours.compute(), theirs.compute(), exact=True)
