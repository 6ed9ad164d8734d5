"""JaccardIndex, CohenKappa and MatthewsCorrCoef (all tasks): parity with the installed torchmetrics, no host sync in
update/forward/reset (CPU and meta) nor in compute beyond the deferred flags, deferred value errors, the dtype
deviation of Matthews' coefficient, reset and MetricCollection."""

import itertools
from typing import Any

import pytest
import torch
import torchmetrics
import torchmetrics.classification as tmc
from hypothesis import given
from hypothesis import strategies as st

import torchmetrics_async as ta
import torchmetrics_async.classification as tac
from tests.classification._derived import (
    SETTINGS,
    assert_same_value,
    check_compute_reads,
    check_sync_free,
    grid,
    ignore_indices,
    run_invalid,
    run_pair,
    step_lists,
    task,
)
from torchmetrics_async.classification import confusion_derived
from torchmetrics_async.testing import HostSyncError, no_host_sync

NAMES = [name for name in confusion_derived.__all__ if name[0].isupper()]
AVERAGES = ["micro", "macro", "weighted", "none", None]


@st.composite
def configs(draw: Any, name: str) -> dict[str, Any]:
    kind = task(name)
    classes = draw(st.integers(2, 5)) if kind != "binary" else 2
    kwargs: dict[str, Any] = {"ignore_index": draw(ignore_indices(classes)), "validate_args": draw(st.booleans())}
    if kind == "multiclass":
        kwargs["num_classes"] = classes
    if kind == "multilabel":
        kwargs["num_labels"] = classes
    if kind != "multiclass":
        kwargs["threshold"] = draw(st.sampled_from([0.5, 0.25, 0.75]))
    if "Jaccard" in name:
        kwargs["zero_division"] = draw(st.sampled_from([0, 1]))
        if kind != "binary":
            kwargs["average"] = draw(st.sampled_from(AVERAGES))
    if "Kappa" in name:
        kwargs["weights"] = draw(st.sampled_from([None, "none", "linear", "quadratic"]))
    return kwargs


@pytest.mark.sweep
@pytest.mark.parametrize("name", NAMES)
@SETTINGS
@given(data=st.data())
def test_parity_with_torchmetrics(name: str, data: Any) -> None:
    kwargs = data.draw(configs(name))
    run_pair(name, kwargs, data.draw(step_lists(name, kwargs, labels=True)))


@pytest.mark.parametrize("name", NAMES)
def test_invalid_targets_raise_in_compute(name: str) -> None:
    kwargs = (
        {"num_classes": 3} if task(name) == "multiclass" else {"num_labels": 3} if task(name) == "multilabel" else {}
    )
    shape = (4, 3) if task(name) == "multilabel" else (4,)
    good = torch.rand(shape) if task(name) != "multiclass" else torch.rand(4, 3), torch.ones(shape, dtype=torch.long)
    bad_target = good[1].clone()
    bad_target[1] = 7
    run_invalid(name, kwargs, good, (good[0], bad_target))


def _grid(name: str) -> list[dict[str, Any]]:
    kind = task(name)
    base = {"num_classes": 4} if kind == "multiclass" else {"num_labels": 4} if kind == "multilabel" else {}
    options: dict[str, list[Any]] = {"ignore_index": [None, -1, 1], "validate_args": [True, False]}
    if "Jaccard" in name and kind != "binary":
        options["average"] = AVERAGES
    if "Kappa" in name:
        options["weights"] = [None, "linear", "quadratic"]
    return grid(base, options)


def _inputs(name: str, device: str) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    kind = task(name)
    high = 4 if kind == "multiclass" else 2
    shape = (6, 4) if kind == "multilabel" else (6,)
    scores = torch.randn(6, 4, device=device) if kind == "multiclass" else torch.rand(shape, device=device)
    batches = {
        "scores": (scores, torch.randint(0, high, shape, device=device)),
        "labels": (torch.randint(0, high, shape, device=device), torch.randint(0, high, shape, device=device)),
        "invalid": (torch.randint(0, high, shape, device=device), torch.randint(0, 300, shape, device=device) - 5),
    }
    if device == "cpu":
        batches["empty"] = (batches["labels"][0][:0], batches["labels"][1][:0])
        batches["logits-extra-dim"] = (scores.unsqueeze(-1) * 5, batches["scores"][1].unsqueeze(-1))
    return batches


@pytest.mark.sweep
@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("kind", ["update", "forward"])
@pytest.mark.parametrize("name", NAMES)
def test_update_forward_and_reset_make_no_host_sync(name: str, kind: str, device: str) -> None:
    check_sync_free(name, _grid(name), lambda device: _inputs(name, device), kind, device)


@pytest.mark.parametrize("name", NAMES)
def test_compute_reads_only_the_deferred_flags(name: str) -> None:
    check_compute_reads(name, _grid(name), _inputs(name, "cpu")["labels"])


@pytest.mark.parametrize(
    "make",
    [
        tmc.BinaryJaccardIndex,
        lambda: tmc.MulticlassJaccardIndex(num_classes=3),
        lambda: tmc.BinaryMatthewsCorrCoef(validate_args=False),
        lambda: tmc.MulticlassCohenKappa(num_classes=3, validate_args=False, ignore_index=0),
    ],
)
def test_the_sanitizer_sees_torchmetrics_syncs(make: Any) -> None:
    metric = make()
    preds, target = torch.tensor([0, 1, 1, 0]), torch.tensor([0, 1, 0, 0])
    with pytest.raises(HostSyncError), no_host_sync():
        metric(preds, target)


@pytest.mark.parametrize(
    ("name", "kwargs", "preds", "target"),
    [
        ("BinaryMatthewsCorrCoef", {}, [1, 0, 1], [1, 0, 1]),
        ("BinaryMatthewsCorrCoef", {}, [1, 0, 1], [0, 1, 0]),
        ("MultilabelMatthewsCorrCoef", {"num_labels": 2}, [[1, 0], [0, 1]], [[1, 0], [0, 1]]),
        ("MulticlassMatthewsCorrCoef", {"num_classes": 2}, [1, 1, 0], [0, 0, 1]),
    ],
)
def test_matthews_perfect_and_inverse_predictions_are_float(name: str, kwargs: dict, preds: list, target: list) -> None:
    """torchmetrics returns an int64 ``1``/``-1`` there (a host-dependent dtype); ours the same value as float32."""
    preds_t, target_t = torch.tensor(preds), torch.tensor(target)
    theirs = getattr(tmc, name)(**kwargs)(preds_t, target_t)
    ours = getattr(tac, name)(**kwargs)(preds_t, target_t)
    assert theirs.dtype == torch.int64
    assert ours.dtype == torch.float32
    assert ours.item() == theirs.item()


def test_matthews_degenerate_binary_matrices_match() -> None:
    """Every 2x2 matrix with entries in {0, 1, 3}: torchmetrics' special cases, picked on the device."""
    reduce = confusion_derived.matthews_corrcoef_reduce
    from torchmetrics.functional.classification.matthews_corrcoef import _matthews_corrcoef_reduce

    for entries in itertools.product([0, 1, 3], repeat=4):
        confmat = torch.tensor(entries).reshape(2, 2)
        assert_same_value(reduce(confmat), _matthews_corrcoef_reduce(confmat), "MatthewsCorrCoef")


@pytest.mark.parametrize(
    ("wrapper", "kwargs", "expected"),
    [
        (ta.JaccardIndex, {"task": "multilabel", "num_labels": 3}, "MultilabelJaccardIndex"),
        (ta.CohenKappa, {"task": "multiclass", "num_classes": 3}, "MulticlassCohenKappa"),
        (ta.MatthewsCorrCoef, {"task": "binary"}, "BinaryMatthewsCorrCoef"),
    ],
)
def test_task_wrappers_build_the_accelerated_classes(wrapper: Any, kwargs: dict, expected: str) -> None:
    metric = wrapper(**kwargs)
    assert type(metric) is getattr(tac, expected)
    assert isinstance(metric, getattr(tmc, expected))
    with ta.patch():
        assert type(getattr(torchmetrics, wrapper.__name__)(**kwargs)) is getattr(tac, expected)


def test_reset_and_metric_collection_match_torchmetrics() -> None:
    def members(module: Any) -> dict[str, Any]:
        return {
            "jaccard": module.MulticlassJaccardIndex(num_classes=4, ignore_index=0),
            "kappa": module.MulticlassCohenKappa(num_classes=4, weights="linear"),
            "mcc": module.MulticlassMatthewsCorrCoef(num_classes=4),
        }

    ours, theirs = torchmetrics.MetricCollection(members(tac)), torchmetrics.MetricCollection(members(tmc))
    generator = torch.Generator().manual_seed(0)
    for _ in range(2):
        for _ in range(3):
            preds, target = torch.randn(16, 4, generator=generator), torch.randint(0, 4, (16,), generator=generator)
            batch_ours, batch_theirs = ours(preds, target), theirs(preds, target)
            for key, value in batch_theirs.items():
                assert_same_value(batch_ours[key], value, key)
        for key, value in theirs.compute().items():
            assert_same_value(ours.compute()[key], value, key)
        ours.reset()
        theirs.reset()


@pytest.mark.parametrize("zero_division", [0, 1])
@pytest.mark.parametrize("ignore_index", [None, -1, 0, 4])
@pytest.mark.parametrize("average", AVERAGES)
def test_multiclass_jaccard_with_absent_classes(average: Any, ignore_index: Any, zero_division: int) -> None:
    """Classes 3 and 4 never occur: the macro average leaves them out (torchmetrics' mask write, here masked_fill)."""
    generator = torch.Generator().manual_seed(1)
    kwargs = {"num_classes": 5, "average": average, "ignore_index": ignore_index, "zero_division": zero_division}
    steps = [
        (kind, torch.randint(0, 3, (6,), generator=generator), torch.randint(-1, 3, (6,), generator=generator).abs())
        for kind in ("forward", "update", "forward")
    ]
    assert run_pair("MulticlassJaccardIndex", kwargs, steps) == "ok"


@pytest.mark.parametrize(
    ("name", "kwargs", "inputs"),
    [
        ("BinaryConfusionMatrix", {}, (torch.rand(4), torch.tensor([0, 1, 1, 0]))),
        ("MulticlassConfusionMatrix", {"num_classes": 3}, (torch.rand(4, 3), torch.tensor([0, 1, 2, 0]))),
        ("MultilabelConfusionMatrix", {"num_labels": 3}, (torch.rand(4, 3), torch.tensor([[0, 1, 1]] * 4))),
    ],
)
def test_unknown_normalize_without_validation_raises_as_torchmetrics(name: str, kwargs: dict, inputs: tuple) -> None:
    """``validate_args=False`` skips the argument check; torchmetrics' reduction still raises (forward, compute)."""
    kwargs = {**kwargs, "normalize": "bogus", "validate_args": False}
    for cls in (getattr(tmc, name), getattr(tac, name)):
        metric = cls(**kwargs)
        with pytest.raises(ValueError, match="Argument `normalize` needs to one of the following"):
            metric(*inputs)
        with pytest.raises(ValueError, match="Argument `normalize` needs to one of the following"):
            metric.compute()
