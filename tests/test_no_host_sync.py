"""Zero host syncs in update(), forward() and reset(), proven with our sanitizer.

States live on the CPU (host reads and data-dependent shapes are caught) and on ``meta``, which stands in for an
accelerator: there a Python number turned into a device tensor, or a CPU tensor copied over, is a host-to-device
copy the sanitizer reports.
"""

import math

import pytest
import torch
import torchmetrics

import torchmetrics_async as ta
from torchmetrics_async.testing import HostSyncError, count_host_syncs, no_host_sync

STRATEGIES = ["error", "warn", "ignore", "disable", 0.5]
CLASSES = [ta.SumMetric, ta.MeanMetric, ta.MaxMetric, ta.MinMetric, ta.CatMetric, ta.RunningMean, ta.RunningSum]


def _values(device):
    return {
        "vector": torch.tensor([1.0, math.nan, 3.0], device=device),
        "matrix-fp16": torch.ones(2, 3, dtype=torch.float16, device=device),
        "int": torch.tensor([1, 2], device=device),
        "0-dim": torch.tensor(2.0, device=device),
        "empty": torch.zeros(0, device=device),
        "cpu-scalar": torch.tensor(1.5),
        "py-float": 0.25,
        "py-nan": math.nan,
        "py-int": 3,
        "py-bool": True,
    }


def _weights(device):
    return {
        "none": None,
        "py-float": 0.5,
        "py-nan": math.nan,
        "cpu-scalar": torch.tensor(2.0),
        "0-dim": torch.tensor(3.0, device=device),
    }


def _cat_forward_allowed(metric, kind):
    # CatMetric's forward under "ignore"/"warn" returns the batch with NaNs dropped: its shape depends on the data,
    # the one host sync this package allows (README).
    return kind == "forward" and isinstance(metric, ta.CatMetric) and metric.nan_strategy in ("ignore", "warn")


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("kind", ["update", "forward"])
@pytest.mark.parametrize("nan_strategy", STRATEGIES)
@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_update_and_forward_make_no_host_sync(cls, nan_strategy, kind, device):
    metric = cls(nan_strategy=nan_strategy).to(device)
    for name, value in _values(device).items():
        call = metric if kind == "forward" else metric.update
        if _cat_forward_allowed(metric, kind):
            continue
        try:
            with no_host_sync():
                call(value)
        except HostSyncError as err:
            raise AssertionError(f"{cls.__name__}.{kind}({name}) on {device}: {err}") from err


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("kind", ["update", "forward"])
@pytest.mark.parametrize("nan_strategy", STRATEGIES)
def test_mean_weights_make_no_host_sync(nan_strategy, kind, device):
    metric = ta.MeanMetric(nan_strategy=nan_strategy).to(device)
    call = metric if kind == "forward" else metric.update
    for value_name, value in _values(device).items():
        for weight_name, weight in _weights(device).items():
            try:
                with no_host_sync():
                    call(value, weight=weight)
            except HostSyncError as err:
                raise AssertionError(f"MeanMetric.{kind}({value_name}, weight={weight_name}): {err}") from err


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_reset_makes_no_host_sync_and_no_copy(cls, device):
    """reset() after compute() makes no sync and no copy; before it, one read of the deferred flags at most."""
    metric = cls().to(device)
    metric.update(torch.ones(3, device=device))
    with count_host_syncs() as syncs:
        metric.reset()
    assert syncs.total == (1 if device != "meta" and metric._deferred_checks_registered() else 0), syncs.summary()
    metric.update(torch.ones(3, device=device))
    if device != "meta":
        metric.compute()
    with no_host_sync():
        metric.reset()


def test_cat_forward_sync_is_the_documented_one():
    metric = ta.CatMetric(nan_strategy="ignore")
    with no_host_sync():
        metric.update(torch.tensor([1.0, math.nan]))
    with count_host_syncs() as syncs:
        metric(torch.tensor([1.0, math.nan]))
    assert syncs.total >= 1


@pytest.mark.parametrize(
    ("reference", "call"),
    [
        (torchmetrics.MeanMetric, lambda m: m.update(torch.tensor([1.0, 2.0]))),
        (torchmetrics.SumMetric, lambda m: m(torch.tensor([1.0, 2.0]))),
        (torchmetrics.MaxMetric, lambda m: m(torch.tensor([1.0, 2.0]))),
        (lambda: torchmetrics.MeanMetric(nan_strategy="disable").to("meta"), lambda m: m.update(1.0)),
    ],
)
def test_the_sanitizer_sees_torchmetrics_syncs(reference, call):
    """The same checks fail on torchmetrics itself: the tests above can fail."""
    metric = reference()
    with pytest.raises(HostSyncError), no_host_sync():
        call(metric)


def test_torchmetrics_makes_syncs_we_do_not():
    """The profiling article's loop body: torchmetrics' count is positive, ours is zero."""
    loss = torch.tensor(0.7)
    reference, accelerated = torchmetrics.MeanMetric(), ta.MeanMetric()
    with count_host_syncs() as theirs:
        reference.update(loss)
        reference.update(0.5)
    with count_host_syncs() as ours:
        accelerated.update(loss)
        accelerated.update(0.5)
    assert theirs.total >= 2
    assert ours.total == 0


def test_compute_reads_only_the_deferred_flag():
    metric = ta.MeanMetric(nan_strategy="warn")
    metric.update(torch.tensor([1.0, 2.0]))
    with count_host_syncs() as syncs:
        metric.compute()
    assert syncs.total == 1, syncs.summary()
    metric = ta.MeanMetric(nan_strategy="ignore")
    metric.update(torch.tensor([1.0, 2.0]))
    with no_host_sync():
        metric.compute()
