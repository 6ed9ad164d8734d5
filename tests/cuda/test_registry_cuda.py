"""Every registered accelerated class on CUDA: the registry contract of ``tests/test_coverage_contract.py`` on the GPU.

The same classes, arguments and inputs (``tests/examples.py``) and the same listed forward caveats as on CPU and
``meta``. On CUDA ``no_host_sync()`` also turns on ``torch.cuda.set_sync_debug_mode("error")`` (asserted below), so
any synchronizing CUDA call raises too. Values are compared with torchmetrics on the same device.
"""

import warnings

import pytest
import torch

from tests.examples import example_for
from tests.test_coverage_contract import REGISTERED
from tests.test_coverage_contract import test_registered_class_makes_no_host_sync_in_update_and_forward as contract
from torchmetrics_async.testing import no_host_sync

pytestmark = pytest.mark.cuda
IDS = [origin.__name__ for origin, _ in REGISTERED]


def test_no_host_sync_turns_on_the_cuda_sync_debug_mode(device: torch.device) -> None:
    with no_host_sync():
        assert torch.cuda.get_sync_debug_mode() == 2  # "error": any synchronizing CUDA call raises


@pytest.mark.parametrize(("origin", "accelerated"), REGISTERED, ids=IDS)
def test_update_and_forward_make_no_host_sync_on_cuda(origin: type, accelerated: type, device: torch.device) -> None:
    contract(origin, accelerated, str(device))


@pytest.mark.parametrize(("origin", "accelerated"), REGISTERED, ids=IDS)
def test_values_on_cuda_are_torchmetrics_values(origin: type, accelerated: type, device: torch.device) -> None:
    example = example_for(origin)
    inputs = example.to(str(device))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours, theirs = accelerated(**example.init).to(device), origin(**example.init).to(device)
        torch.testing.assert_close(ours(*inputs), theirs(*inputs), equal_nan=True)
        ours.update(*inputs)
        theirs.update(*inputs)
        torch.testing.assert_close(ours.compute(), theirs.compute(), equal_nan=True)
