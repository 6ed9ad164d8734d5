"""Every registered accelerated class on CUDA: update(), forward() and reset() make no host sync.

Checked twice at once: ``no_host_sync()`` turns on ``torch.cuda.set_sync_debug_mode("error")`` (asserted below) and
its own detector. Inputs are generated on the device by kernels. The first update is made inside the checked region
(construction creates the defaults on the device). Values are compared with torchmetrics on the same device after
the checked region.
"""

import warnings

import pytest
import torch

from tests.cuda._helpers import batches, build_pair, registry_cases
from torchmetrics_async.testing import no_host_sync

pytestmark = pytest.mark.cuda

CASES = registry_cases()


def _checked(call, *args):
    with no_host_sync():
        assert torch.cuda.get_sync_debug_mode() == 2  # "error": any synchronizing CUDA call raises
        return call(*args)


@pytest.mark.parametrize(("origin", "kwargs", "kind"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_update_forward_reset_make_no_host_sync_on_cuda(origin, kwargs, kind, device):
    reference, metric = build_pair(origin, kwargs, device)
    data = batches(kind, device)
    for args in data:
        _checked(metric.update, *args)
        reference.update(*args)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 0/0 warnings of either implementation
        torch.testing.assert_close(metric.compute(), reference.compute())
    _checked(metric.reset)
    # CatMetric's forward under "ignore"/"warn" returns the batch with NaNs dropped: a data-dependent shape, the one
    # host sync the package allows (README); its update and reset are checked like every other class.
    documented = getattr(metric, "nan_strategy", None) in ("ignore", "warn") and origin.__name__ == "CatMetric"
    for args in data:
        batch_value = metric(*args) if documented else _checked(metric, *args)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.testing.assert_close(batch_value, reference(*args))
    _checked(metric.reset)
