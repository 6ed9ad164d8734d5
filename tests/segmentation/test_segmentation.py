"""Segmentation metrics against the installed torchmetrics: values, batch values, label errors, no host sync."""

import warnings
from typing import Any

import pytest
import torch
import torchmetrics
import torchmetrics.segmentation as tms
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import torchmetrics_async.segmentation as tas
from tests.examples import example_for
from tests.parity import Step, assert_rejected_alike, batch_mismatches, run_side_by_side, torchmetrics_text
from torchmetrics_async.segmentation import one_hot
from torchmetrics_async.testing import no_host_sync

NAMES = ("MeanIoU", "GeneralizedDiceScore", "DiceScore")
# How inputs are given: (input_format, preds form, target form).
FORMS = [
    ("index", "index", "index"),
    ("one-hot", "mask", "mask"),
    ("one-hot", "scores", "mask"),
    ("one-hot", "scores", "scores"),
    ("mixed", "scores", "index"),
    ("mixed", "index", "mask"),
]


def _options(name: str, data: st.DataObject) -> dict[str, Any]:
    if name == "DiceScore":
        return {
            "average": data.draw(st.sampled_from(["micro", "macro", "weighted", "none", None])),
            "aggregation_level": data.draw(st.sampled_from(["samplewise", "global"])),
        }
    options = {"per_class": data.draw(st.booleans())}
    if name == "GeneralizedDiceScore":
        options["weight_type"] = data.draw(st.sampled_from(["square", "simple", "linear"]))
    return options


def _make(form: str, labels: torch.Tensor, num_classes: int, generator: torch.Generator) -> torch.Tensor:
    if form == "index":
        return labels
    if form == "mask":
        return torch.nn.functional.one_hot(labels, num_classes).movedim(-1, 1)
    return torch.randn(labels.shape[0], num_classes, *labels.shape[1:], generator=generator)


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_values_and_batch_values_match_torchmetrics(data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(NAMES))
    input_format, preds_form, target_form = data.draw(st.sampled_from(FORMS))
    num_classes = data.draw(st.integers(1, 4))
    infer = name == "MeanIoU" and input_format != "index" and data.draw(st.booleans())  # sized by the first batch
    init = {
        "num_classes": None if infer else num_classes,
        "include_background": data.draw(st.booleans()),
        "input_format": input_format,
        **_options(name, data),
    }
    generator = torch.Generator().manual_seed(data.draw(st.integers(0, 2**16)))
    spatial = tuple(data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=2)))
    steps = []
    for kind in data.draw(st.lists(st.sampled_from(["update", "forward"]), min_size=1, max_size=4)):
        batch = data.draw(st.integers(1, 3))
        # Few distinct labels, so classes absent from a sample (0/0 scores, infinite Dice weights) are common.
        high = data.draw(st.integers(1, num_classes))
        labels = [torch.randint(0, high, (batch, *spatial), generator=generator) for _ in range(2)]
        preds = _make(preds_form, labels[0], num_classes, generator)
        target = _make(target_form, labels[1], num_classes, generator)
        steps.append(Step(kind, (preds, target)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # DiceScore(average="micro") warns about its default, both alike
        ours, theirs = getattr(tas, name)(**init), getattr(tms, name)(**init)
    run_side_by_side(theirs, ours, steps)
    ours.reset()
    theirs.reset()
    run_side_by_side(theirs, ours, steps[:1])


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize(("input_format", "preds_form", "target_form"), FORMS)
@pytest.mark.parametrize("name", NAMES)
def test_update_and_forward_make_no_host_sync(
    name: str, input_format: str, preds_form: str, target_form: str, device: str
):
    generator = torch.Generator().manual_seed(0)
    labels = torch.randint(0, 3, (2, 4, 4), generator=generator)
    preds = _make(preds_form, labels, 3, generator).to(device)
    target = _make(target_form, labels.flip(0), 3, generator).to(device)
    init = {"num_classes": None if name == "MeanIoU" and input_format != "index" else 3, "input_format": input_format}
    metric = getattr(tas, name)(**init).to(device)
    with no_host_sync():
        metric.update(preds, target)
        metric(preds, target)
        metric.update(preds, target)


@pytest.mark.parametrize("bad", [-1, 3])
@pytest.mark.parametrize("kind", ["update", "forward"])
@pytest.mark.parametrize("name", NAMES)
def test_a_label_out_of_range_is_raised_by_compute_with_torchs_message(name: str, kind: str, bad: int) -> None:
    preds, target = torch.tensor([[0, 1, 2]]), torch.tensor([[0, bad, 2]])
    with pytest.raises(RuntimeError) as expected:
        getattr(tms, name)(num_classes=3, input_format="index").update(preds, target)
    metric = getattr(tas, name)(num_classes=3, input_format="index")
    metric.update(preds, preds)
    with no_host_sync():
        value = metric(preds, target) if kind == "forward" else metric.update(preds, target)
    if kind == "forward":
        assert torch.isnan(value).all()
    with pytest.raises(RuntimeError, match="") as got:
        metric.compute()
    assert torchmetrics_text(got.value) == str(expected.value)


@pytest.mark.parametrize("name", NAMES)
def test_index_labels_of_another_dtype_fail_eagerly_as_in_torchmetrics(name: str) -> None:
    preds, target = torch.tensor([[0, 1, 2]], dtype=torch.int32), torch.tensor([[0, 1, 2]])
    with pytest.raises(RuntimeError) as expected:
        getattr(tms, name)(num_classes=3, input_format="index").update(preds, target)
    with pytest.raises(RuntimeError, match=str(expected.value)):
        getattr(tas, name)(num_classes=3, input_format="index").update(preds, target)


@pytest.mark.parametrize("name", NAMES)
def test_shape_errors_are_torchmetrics_own(name: str) -> None:
    for preds, target, fmt in [
        (torch.zeros(2, 3, 4, dtype=torch.long), torch.zeros(2, 3, dtype=torch.long), "index"),
        (torch.zeros(2, 3, 4), torch.zeros(2, 4, dtype=torch.long), "mixed"),
        (torch.zeros(2, dtype=torch.long), torch.zeros(2, dtype=torch.long), "one-hot"),
    ]:
        expected, got = (_error(module, name, fmt, preds, target) for module in (tms, tas))
        assert (type(got), str(got)) == (type(expected), str(expected))


def _error(module: Any, name: str, fmt: str, preds: torch.Tensor, target: torch.Tensor) -> Exception | None:
    try:
        getattr(module, name)(num_classes=3, input_format=fmt).update(preds, target)
    except Exception as err:
        return err
    return None


def test_one_hot_is_torchs_for_valid_labels() -> None:
    labels = torch.randint(0, 5, (3, 4, 2), generator=torch.Generator().manual_seed(1))
    masks, negative, large = one_hot(labels, 5)
    torch.testing.assert_close(masks, torch.nn.functional.one_hot(labels, 5).movedim(-1, 1), rtol=0, atol=0)
    assert not negative
    assert not large


def test_in_a_metric_collection_with_reset() -> None:
    preds, target = torch.randint(0, 3, (2, 5, 5)), torch.randint(0, 3, (2, 5, 5))
    init = {"num_classes": 3, "input_format": "index"}
    ours = torchmetrics.MetricCollection({name: getattr(tas, name)(**init) for name in NAMES})
    theirs = torchmetrics.MetricCollection({name: getattr(tms, name)(**init) for name in NAMES})
    for _ in range(2):
        torch.testing.assert_close(ours(preds, target), theirs(preds, target))
        ours.update(target, preds)
        theirs.update(target, preds)
        torch.testing.assert_close(ours.compute(), theirs.compute())
        ours.reset()
        theirs.reset()


@pytest.mark.parametrize("name", NAMES)
def test_jit_script_works_as_for_torchmetrics(name: str) -> None:
    torch.jit.script(getattr(tms, name)(num_classes=3))  # torchmetrics' own tests script every metric
    torch.jit.script(getattr(tas, name)(num_classes=3))


def _one_hot_batch(seed: int, num_classes: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, num_classes, (2, 4, 6, 6), generator=generator)
    return tuple(torch.nn.functional.one_hot(x, num_classes).movedim(-1, 1) for x in labels)


def _into_fresh(module: Any, source: Any, how: str, **init: Any) -> Any:
    """A fresh ``MeanIoU(num_classes=None)`` (not yet sized) given ``source``'s state by a resume or a merge."""
    fresh = module.MeanIoU(num_classes=None, **init)
    if how == "load":
        source.persistent(True)
        fresh.persistent(True)
        fresh.load_state_dict(source.state_dict())
    else:
        fresh.merge_state(source)
    return fresh


@pytest.mark.parametrize("source", ["ours", "torchmetrics"])
@pytest.mark.parametrize("how", ["load", "merge"])
@pytest.mark.parametrize("init", [{}, {"per_class": True}, {"include_background": False}])
def test_mean_iou_sized_by_its_first_batch_keeps_a_loaded_or_merged_state(source: str, how: str, init: dict) -> None:
    """A resume or a merge into an instance not yet updated: ``forward()`` then ``compute()`` as in torchmetrics."""
    first, later = _one_hot_batch(1), _one_hot_batch(2)
    sources = {}
    for name, module in (("ours", tas), ("torchmetrics", tms)):
        sources[name] = module.MeanIoU(num_classes=None, **init)
        sources[name].update(*first)
    theirs = _into_fresh(tms, sources["torchmetrics"], how, **init)
    ours = _into_fresh(tas, sources[source], how, **init)
    torch.testing.assert_close(ours(*later), theirs(*later))
    torch.testing.assert_close(ours.compute(), theirs.compute())


@pytest.mark.parametrize("how", ["load", "merge"])
def test_mean_iou_update_after_a_resume_keeps_the_resumed_state(how: str) -> None:
    """``update()`` keeps it too (torchmetrics' own ``update`` re-creates the states and drops it: a deviation)."""
    first, later = _one_hot_batch(1), _one_hot_batch(2)
    source = tms.MeanIoU(num_classes=None)
    source.update(*first)
    theirs = _into_fresh(tms, source, how)
    theirs(*later)  # torchmetrics' forward adds the batch to the state it holds
    ours = _into_fresh(tas, source, how)
    with no_host_sync():
        ours.update(*later)
    torch.testing.assert_close(ours.compute(), theirs.compute())


@pytest.mark.parametrize("kind", ["update", "forward"])
@pytest.mark.parametrize("how", ["load", "merge"])
def test_mean_iou_a_batch_of_another_class_count_than_the_resumed_state_is_rejected_at_once(how: str, kind: str):
    source = tms.MeanIoU(num_classes=None)
    source.update(*_one_hot_batch(1))
    resumed = _one_hot_batch(2, num_classes=4)
    theirs = _into_fresh(tms, source, how)
    with pytest.raises(RuntimeError):  # torchmetrics' forward fails adding the 4-class batch to the 3-class state
        theirs(*resumed)
    ours = _into_fresh(tas, source, how)
    with pytest.raises(RuntimeError, match="holds scores for 3 classes"):
        ours(*resumed) if kind == "forward" else ours.update(*resumed)
    torch.testing.assert_close(ours.compute(), source.compute())  # nothing was accumulated or re-sized


@pytest.mark.parametrize("name", NAMES)
def test_batch_size_mismatches_are_rejected_at_once_as_torchmetrics_rejects_them(name: str) -> None:
    example = example_for(getattr(tms, name))
    for bad in batch_mismatches(example.inputs):
        assert_rejected_alike(
            lambda: getattr(tms, name)(**example.init), lambda: getattr(tas, name)(**example.init), example.inputs, bad
        )


@pytest.mark.parametrize("input_format", ["one-hot", "mixed"])
def test_batch_size_mismatches_of_a_mean_iou_sized_by_its_first_batch_are_rejected_at_once(input_format: str) -> None:
    preds, target = _one_hot_batch(1)
    good = (preds, target.argmax(dim=1) if input_format == "mixed" else target)
    for bad in batch_mismatches(good):
        assert_rejected_alike(
            lambda: tms.MeanIoU(num_classes=None, input_format=input_format),
            lambda: tas.MeanIoU(num_classes=None, input_format=input_format),
            good,
            bad,
        )
