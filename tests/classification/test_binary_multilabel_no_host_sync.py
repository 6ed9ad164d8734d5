"""Zero host syncs in update() and forward() of the binary and multilabel metrics, for every argument combination.

States and inputs live on the CPU (host reads and data-dependent shapes are caught) and on ``meta``, which stands in
for an accelerator: there a host-to-device copy (``torch.tensor(n, device=...)``) is reported too.
"""

import itertools

import pytest
import torch
import torchmetrics.classification as tmc

from tests.classification._binary_multilabel import (
    NAMES,
    has_average,
    has_zero_division,
    is_confmat,
    make_pair,
    shape_for,
)
from torchmetrics_async.testing import HostSyncError, count_host_syncs, no_host_sync


def configurations(name):
    """A covering set of the arguments that change the update path: validation x ignore_index x mode crossed, the
    reduction-only arguments (``average``, ``zero_division``) cycled through them."""
    modes = [{"normalize": n} for n in (None, "true", "all")] if is_confmat(name) else []
    if not modes:
        modes = [{"multidim_average": m} for m in ("global", "samplewise")]
    averages = itertools.cycle(
        [{"average": a} for a in ("micro", "macro", "weighted", None)] if has_average(name) else [{}]
    )
    zero_division = itertools.cycle([{"zero_division": 1}, {}] if has_zero_division(name) else [{}])
    for validate, ignore_index, mode in itertools.product((True, False), (None, -1), modes):
        yield {"validate_args": validate, "ignore_index": ignore_index, **mode, **next(averages), **next(zero_division)}


def batches(name, device, samplewise):
    """Probabilities, logits (with NaN), labels, bools, half precision, invalid values, odd shapes."""
    shape = shape_for(name, 4, (2,) if samplewise or name.startswith("Binary") else ())
    g = torch.Generator().manual_seed(0)
    target = torch.randint(0, 2, shape, generator=g)
    probs = torch.rand(shape, generator=g)
    logits = torch.randn(shape, generator=g) * 3
    out = {
        "probs": (probs, target),
        "logits-with-nan": (logits.masked_fill(logits > 2, float("nan")), target),
        "labels": (torch.randint(0, 2, shape, generator=g), target.int()),
        "bool": (probs > 0.5, target),
        "half": (probs.half(), target),
        "ignored": (probs, target.masked_fill(probs > 0.7, -1)),
        "invalid-target": (probs, target + 1),
        "invalid-labels": (torch.randint(0, 3, shape, generator=g), target),
        "batch-of-one": (probs[:1], target[:1]),
        "empty-extra-dim": (torch.rand(*shape, 0), torch.zeros(*shape, 0, dtype=torch.long)),
    }
    return {key: (p.to(device), t.to(device)) for key, (p, t) in out.items()}


# On meta every op runs a Python meta kernel (about a millisecond each). There: the batches that take different paths
# to the device (floats, labels, ignored targets) with validation on (validate_args=False runs a subset of those ops).
# On the CPU: every configuration and every batch.
META_BATCHES = ("probs", "labels", "ignored")


@pytest.mark.sweep
@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("name", NAMES)
def test_update_and_forward_make_no_host_sync(name, device):
    for kwargs in configurations(name):
        if device == "meta" and not kwargs["validate_args"]:
            continue
        samplewise = kwargs.get("multidim_average") == "samplewise"
        _, metric = make_pair(name, **kwargs)
        metric = metric.to(device)
        inputs = batches(name, device, samplewise)
        if device == "meta":
            inputs = {key: inputs[key] for key in META_BATCHES}
        steps = list(itertools.product(inputs.items(), ("update", "forward")))
        step = None
        try:
            with no_host_sync():  # one context per configuration: entering it costs more than a call
                for step in steps:
                    (_, (preds, target)), kind = step
                    metric(preds, target) if kind == "forward" else metric.update(preds, target)
        except HostSyncError as err:
            raise AssertionError(f"{name}({kwargs}) {step[1]}({step[0][0]}) on {device}: {err}") from err


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("name", NAMES)
def test_reset_makes_no_host_sync(name, device):
    """After compute() reported the window's checks, reset() reads nothing; before, it reads the flags once."""
    _, metric = make_pair(name)
    metric = metric.to(device)
    preds, target = batches(name, device, False)["probs"]
    metric.update(preds, target)
    with count_host_syncs() as syncs:
        metric.reset()
    assert syncs.total == (0 if device == "meta" else 1), syncs.summary()
    metric.update(preds, target)
    if device != "meta":
        metric.compute()
    with no_host_sync():
        metric.reset()


@pytest.mark.parametrize("validate_args", [True, False])
@pytest.mark.parametrize("name", [n for n in NAMES if not is_confmat(n)])
def test_compute_reads_only_the_deferred_check_flags(name, validate_args):
    """One host read for all value checks (none without validation); torchmetrics' reductions add none."""
    _, metric = make_pair(name, validate_args=validate_args)
    metric.update(*batches(name, "cpu", False)["probs"])
    with count_host_syncs() as syncs:
        metric.compute()
    assert syncs.total == (1 if validate_args else 0), syncs.summary()


@pytest.mark.parametrize(
    ("reference", "shape"),
    [
        (tmc.BinaryAccuracy(), (8,)),
        (tmc.BinaryAccuracy(validate_args=False), (8,)),  # the logit check alone reads the device on the CPU
        (tmc.MultilabelF1Score(num_labels=3), (8, 3)),
        (tmc.BinaryConfusionMatrix(validate_args=False, ignore_index=-1), (8,)),
        (tmc.MultilabelExactMatch(num_labels=3, validate_args=False), (8, 3)),
    ],
    ids=lambda x: type(x).__name__ if not isinstance(x, tuple) else str(x),
)
def test_the_sanitizer_sees_torchmetrics_syncs(reference, shape):
    """The same check fails on torchmetrics itself, so the tests above can fail."""
    with pytest.raises(HostSyncError), no_host_sync():
        reference.update(torch.rand(shape), torch.randint(0, 2, shape))
