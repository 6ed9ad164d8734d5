"""SCC and VIF against the installed torchmetrics: values bit for bit, batch values, gradients, no host sync."""

import pickle

import pytest
import torch
import torchmetrics
import torchmetrics.image as tmi
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import torchmetrics_async.image as tai
from tests.examples import example_for
from tests.parity import Step, assert_rejected_alike, assert_same, batch_mismatches, run_side_by_side
from torchmetrics_async import ShapeMismatchError
from torchmetrics_async.testing import count_host_syncs, no_host_sync

NAMES = ("SpatialCorrelationCoefficient", "VisualInformationFidelity")
LAPLACE_4 = torch.tensor([[0, -1, 0], [-1, 4, -1], [0, -1, 0]])


def _images(generator: torch.Generator, shape: tuple[int, ...], edge: str, dtype: torch.dtype) -> torch.Tensor:
    """Random images; ``edge`` makes flat regions (zero local variance: every masked branch) or NaNs."""
    x = torch.rand(shape, generator=generator)
    if edge == "flat" and shape[0]:
        x[0] = 0.5
        x[..., : shape[-1] // 2] = 0.25
    elif edge == "nan" and shape[0]:
        x.view(-1)[3] = float("nan")
    return x.to(dtype)


def _init(name: str, data: st.DataObject) -> dict:
    if name == "VisualInformationFidelity":
        return {
            "reduction": data.draw(st.sampled_from(["mean", "none"])),
            "sigma_n_sq": data.draw(st.sampled_from([2.0, 0.5, 0])),
        }
    return {
        "high_pass_filter": data.draw(st.sampled_from([None, LAPLACE_4])),
        "window_size": data.draw(st.integers(1, 9)),
    }


@settings(max_examples=15, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_values_and_batch_values_match_torchmetrics_bit_for_bit(data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(NAMES))
    init = _init(name, data)
    size = 41 if name == "VisualInformationFidelity" else data.draw(st.integers(9, 14))
    channels = data.draw(st.integers(1, 3))
    squeeze = name == "SpatialCorrelationCoefficient" and channels == 1 and data.draw(st.booleans())  # (N, H, W)
    dtype = data.draw(st.sampled_from([torch.float32, torch.float64]))
    generator = torch.Generator().manual_seed(data.draw(st.integers(0, 2**16)))
    ours, theirs = getattr(tai, name)(**init), getattr(tmi, name)(**init)
    for kind in data.draw(st.lists(st.sampled_from(["update", "forward"]), min_size=1, max_size=3)):
        shape = (data.draw(st.integers(0 if name == "SpatialCorrelationCoefficient" else 1, 3)), channels, size, size)
        edge = data.draw(st.sampled_from(["none", "flat", "nan"]))
        preds, target = (_images(generator, shape, edge, dtype) for _ in range(2))
        if squeeze:
            preds, target = preds[:, 0], target[:, 0]
        if kind == "forward":
            assert_same(ours(preds, target), theirs(preds, target), exact=True, where="forward")
        else:
            ours.update(preds, target)
            theirs.update(preds, target)
    assert_same(ours.compute(), theirs.compute(), exact=True, where="compute")


@pytest.mark.parametrize("name", NAMES)
def test_update_forward_sequences_match_torchmetrics(name: str) -> None:
    example = example_for(getattr(tmi, name))
    preds, target = example.inputs
    steps = [Step("forward", (preds, target)), Step("update", (target, preds)), Step("forward", (preds[:2], preds[:2]))]
    run_side_by_side(getattr(tmi, name)(), getattr(tai, name)(), steps)


def test_scc_forward_keeps_the_graph_like_torchmetrics() -> None:
    preds, target = example_for(tmi.SpatialCorrelationCoefficient).inputs
    grads = []
    for module in (tmi, tai):
        leaf = preds.clone().requires_grad_()
        module.SpatialCorrelationCoefficient()(leaf, target).backward()
        grads.append(leaf.grad)
    assert_same(grads[1], grads[0], exact=True)


def test_vif_forward_is_differentiable_where_torchmetrics_in_place_writes_break_backward() -> None:
    preds, target = example_for(tmi.VisualInformationFidelity).inputs
    leaf = preds.clone().requires_grad_()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        tmi.VisualInformationFidelity()(leaf, target).backward()
    tai.VisualInformationFidelity()(leaf, target).backward()
    assert leaf.grad.isfinite().all()
    assert leaf.grad.abs().sum() > 0


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("name", NAMES)
def test_update_and_forward_make_no_host_sync_where_torchmetrics_syncs(name: str, device: str) -> None:
    example = example_for(getattr(tmi, name))
    theirs = getattr(tmi, name)()
    with count_host_syncs(record_events=False) as counted:
        theirs.update(*example.inputs)
    assert counted.total > 0  # what this class is for: torchmetrics' own syncs here (on CPU: meta has no nonzero)
    preds, target = example.to(device)
    ours = getattr(tai, name)(**({"high_pass_filter": LAPLACE_4} if name.startswith("Spatial") else {})).to(device)
    with no_host_sync():
        ours.update(preds, target)
        ours(preds, target)


def test_scc_uses_a_high_pass_filter_replaced_after_construction() -> None:
    preds, target = example_for(tmi.SpatialCorrelationCoefficient).inputs
    ours, theirs = tai.SpatialCorrelationCoefficient(), tmi.SpatialCorrelationCoefficient()
    ours.hp_filter = theirs.hp_filter = LAPLACE_4
    assert_same(ours(preds, target), theirs(preds, target), exact=True)
    restored = pickle.loads(pickle.dumps(ours))
    restored.update(preds, target)
    theirs.update(preds, target)
    assert_same(restored.compute(), theirs.compute(), exact=True)


def test_scc_shape_errors_are_torchmetrics_own() -> None:
    preds = torch.rand(2, 1, 8, 8)
    for bad in [(preds, preds[:1]), (preds[:, :, :4], preds[:, :, :4]), (preds[0, 0], preds[0, 0])]:
        assert_rejected_alike(tmi.SpatialCorrelationCoefficient, tai.SpatialCorrelationCoefficient, (preds, preds), bad)


def test_vif_shape_mismatches_are_rejected_at_once_where_torchmetrics_broadcasts_or_fails_late() -> None:
    preds, target = example_for(tmi.VisualInformationFidelity).inputs
    theirs = tmi.VisualInformationFidelity(reduction="none")
    assert theirs(preds[:, :1], target).shape == (preds.shape[0],)  # torchmetrics: preds' channels, silently
    for bad in [*batch_mismatches((preds, target)), (preds[:, :1], target)]:
        ours = tai.VisualInformationFidelity()
        ours.update(preds, target)
        for call in (ours.update, ours):
            with pytest.raises(ShapeMismatchError, match="same shape"), no_host_sync():
                call(*bad)
        reference = tmi.VisualInformationFidelity()
        reference.update(preds, target)
        assert_same(ours.compute(), reference.compute(), exact=True)


@pytest.mark.parametrize("name", NAMES)
def test_in_a_metric_collection_with_reset(name: str) -> None:
    preds, target = example_for(getattr(tmi, name)).inputs
    ours = torchmetrics.MetricCollection({"a": getattr(tai, name)(), "mean": torchmetrics.MeanMetric()})
    theirs = torchmetrics.MetricCollection({"a": getattr(tmi, name)(), "mean": torchmetrics.MeanMetric()})
    for _ in range(2):
        assert_same(ours(preds, target)["a"], theirs(preds, target)["a"], exact=True)
        ours["a"].update(target, preds)
        theirs["a"].update(target, preds)
        assert_same(ours.compute()["a"], theirs.compute()["a"], exact=True)
        ours.reset()
        theirs.reset()
