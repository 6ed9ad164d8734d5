"""CalibrationError and HingeLoss (binary and multiclass): parity with the installed torchmetrics, no host sync in
update/forward/reset (CPU and meta) nor in compute beyond the deferred flags, deferred value errors, the documented
deviations (ignored entries kept in the calibration states; a float zero for a zero l2 error; empty crammer-singer
batches), reset and MetricCollection."""

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
from torchmetrics_async.classification import calibration, hinge
from torchmetrics_async.testing import HostSyncError, no_host_sync

NAMES = [*calibration.__all__[:2], *hinge.__all__]


@st.composite
def configs(draw: Any, name: str) -> dict[str, Any]:
    classes = draw(st.integers(2, 5)) if task(name) == "multiclass" else 2
    kwargs: dict[str, Any] = {"ignore_index": draw(ignore_indices(classes)), "validate_args": draw(st.booleans())}
    if task(name) == "multiclass":
        kwargs["num_classes"] = classes
    if "Calibration" in name:
        kwargs["n_bins"] = draw(st.sampled_from([1, 2, 3, 10, 15]))
        kwargs["norm"] = draw(st.sampled_from(["l1", "l2", "max"]))
    else:
        kwargs["squared"] = draw(st.booleans())
        if task(name) == "multiclass":
            kwargs["multiclass_mode"] = draw(st.sampled_from(["crammer-singer", "one-vs-all"]))
    return kwargs


def _empty_crammer_singer(name: str, kwargs: dict[str, Any]) -> Any:
    """torchmetrics' crammer-singer fails on a batch without kept rows; ours adds nothing (a documented deviation)."""

    def tolerated(kind: str, preds: torch.Tensor, target: torch.Tensor, error: Exception) -> bool:
        ignore = kwargs.get("ignore_index")
        kept = target.numel() if ignore is None else int((target != ignore).sum())
        return kwargs.get("multiclass_mode") == "crammer-singer" and kept == 0 and "cannot reshape" in str(error)

    return tolerated if name == "MulticlassHingeLoss" else None


@pytest.mark.sweep
@pytest.mark.parametrize("name", NAMES)
@SETTINGS
@given(data=st.data())
def test_parity_with_torchmetrics(name: str, data: Any) -> None:
    kwargs = data.draw(configs(name))
    run_pair(name, kwargs, data.draw(step_lists(name, kwargs, labels=False)), _empty_crammer_singer(name, kwargs))


@pytest.mark.parametrize("name", NAMES)
def test_invalid_targets_raise_in_compute(name: str) -> None:
    multiclass = task(name) == "multiclass"
    good = (torch.rand(4, 3) if multiclass else torch.rand(4)), torch.ones(4, dtype=torch.long)
    bad_target = torch.tensor([0, 1, 1, 7])
    kwargs = {"num_classes": 3} if multiclass else {}
    # torchmetrics' MulticlassHingeLoss fails in its one-hot scatter; its MulticlassCalibrationError checks nothing.
    run_invalid(name, kwargs, good, (good[0], bad_target), torchmetrics_raises=name != "MulticlassCalibrationError")


@pytest.mark.parametrize("name", NAMES)
def test_integer_preds_are_rejected_eagerly(name: str) -> None:
    kwargs = {"num_classes": 3} if task(name) == "multiclass" else {}
    shape = (4, 3) if task(name) == "multiclass" else (4,)
    preds, target = torch.ones(shape, dtype=torch.long), torch.ones(4, dtype=torch.long)
    with pytest.raises(ValueError, match="float") as theirs:
        getattr(tmc, name)(**kwargs).update(preds, target)
    with pytest.raises(ValueError, match="float") as ours:
        getattr(tac, name)(**kwargs).update(preds, target)
    assert str(ours.value) == str(theirs.value)


def _grid(name: str) -> list[dict[str, Any]]:
    base = {"num_classes": 4} if task(name) == "multiclass" else {}
    options: dict[str, list[Any]] = {"ignore_index": [None, -1, 1], "validate_args": [True, False]}
    if "Calibration" in name:
        options["norm"] = ["l1", "l2", "max"]
    else:
        options["squared"] = [False, True]
        if task(name) == "multiclass":
            options["multiclass_mode"] = ["crammer-singer", "one-vs-all"]
    return grid(base, options)


def _inputs(name: str, device: str) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    multiclass = task(name) == "multiclass"
    high = 4 if multiclass else 2
    scores = torch.randn(6, 4, device=device) if multiclass else torch.randn(6, device=device)
    batches = {
        "logits": (scores, torch.randint(0, high, (6,), device=device)),
        "probabilities": (scores.sigmoid(), torch.randint(0, high, (6,), device=device)),
        "invalid": (scores, torch.randint(0, 300, (6,), device=device) - 5),
    }
    if device == "cpu":
        batches["extra-dim"] = (scores.unsqueeze(-1), batches["logits"][1].unsqueeze(-1))
        batches["half"] = (scores.half(), batches["logits"][1])
    return batches


@pytest.mark.sweep
@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("kind", ["update", "forward"])
@pytest.mark.parametrize("name", NAMES)
def test_update_forward_and_reset_make_no_host_sync(name: str, kind: str, device: str) -> None:
    check_sync_free(name, _grid(name), lambda device: _inputs(name, device), kind, device)


@pytest.mark.parametrize("name", NAMES)
def test_compute_reads_only_the_deferred_flags(name: str) -> None:
    check_compute_reads(name, _grid(name), _inputs(name, "cpu")["logits"])


@pytest.mark.parametrize(
    ("make", "preds"),
    [
        (lambda: tmc.BinaryCalibrationError(validate_args=False), torch.randn(8)),
        (lambda: tmc.MulticlassCalibrationError(num_classes=3, validate_args=False), torch.rand(8, 3)),
        (lambda: tmc.BinaryHingeLoss(validate_args=False), torch.rand(8)),
        (lambda: tmc.MulticlassHingeLoss(num_classes=3, validate_args=False), torch.rand(8, 3)),
    ],
)
def test_the_sanitizer_sees_torchmetrics_syncs(make: Any, preds: torch.Tensor) -> None:
    metric = make()
    with pytest.raises(HostSyncError), no_host_sync():
        metric.update(preds, torch.randint(0, 2, (8,)))


def test_calibration_states_keep_ignored_entries_marked() -> None:
    """Binary: the ignored target itself marks the entry; multiclass: a NaN accuracy. Without ignore_index they are
    torchmetrics' states (checked by the parity test)."""
    binary = tac.BinaryCalibrationError(ignore_index=-1)
    binary.update(torch.tensor([0.2, 0.7, 0.9]), torch.tensor([0, -1, 1]))
    assert binary.accuracies[0].tolist() == [0, -1, 1]
    multiclass = tac.MulticlassCalibrationError(num_classes=3, ignore_index=-1)
    multiclass.update(torch.rand(3, 3), torch.tensor([0, -1, 2]))
    assert torch.isnan(multiclass.accuracies[0]).tolist() == [False, True, False]


def test_zero_l2_calibration_error_is_a_float_zero() -> None:
    preds, target = torch.tensor([1.0, 0.0]), torch.tensor([1, 0])
    theirs = tmc.BinaryCalibrationError(norm="l2")(preds, target)
    ours = tac.BinaryCalibrationError(norm="l2")(preds, target)
    assert theirs.dtype == torch.int64
    assert theirs.device.type == "cpu"
    assert ours.dtype == torch.float32
    assert ours.item() == theirs.item() == 0


def test_empty_crammer_singer_batch_adds_nothing() -> None:
    metric = tac.MulticlassHingeLoss(num_classes=3, ignore_index=-1)
    metric.update(torch.rand(2, 3), torch.tensor([0, 2]))
    before = metric.compute()
    with pytest.raises(RuntimeError, match="cannot reshape"):
        tmc.MulticlassHingeLoss(num_classes=3, ignore_index=-1).update(torch.rand(1, 3), torch.tensor([-1]))
    assert torch.isnan(metric(torch.rand(1, 3), torch.tensor([-1])))
    torch.testing.assert_close(metric.compute(), before)


@pytest.mark.parametrize(
    ("wrapper", "kwargs", "expected"),
    [
        (ta.CalibrationError, {"task": "multiclass", "num_classes": 3}, "MulticlassCalibrationError"),
        (ta.HingeLoss, {"task": "binary"}, "BinaryHingeLoss"),
    ],
)
def test_task_wrappers_build_the_accelerated_classes(wrapper: Any, kwargs: dict, expected: str) -> None:
    assert type(wrapper(**kwargs)) is getattr(tac, expected)
    with ta.patch():
        assert type(getattr(torchmetrics, wrapper.__name__)(**kwargs)) is getattr(tac, expected)


def test_reset_and_metric_collection_match_torchmetrics() -> None:
    def members(module: Any) -> dict[str, Any]:
        return {
            "ece": module.MulticlassCalibrationError(num_classes=4, ignore_index=0, norm="max"),
            "hinge": module.MulticlassHingeLoss(num_classes=4, multiclass_mode="one-vs-all"),
            "cs": module.MulticlassHingeLoss(num_classes=4, squared=True),
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


@pytest.mark.parametrize("multiclass_mode", ["crammer-singer", "one-vs-all"])
@pytest.mark.parametrize("validate_args", [True, False])
@pytest.mark.parametrize(("preds_shape", "target_shape"), [((2, 1), (2, 1)), ((2, 3), (2, 3)), ((4, 3, 2), (4, 3, 2))])
def test_multiclass_hinge_rejects_preds_without_a_class_dimension_at_once(
    preds_shape: tuple, target_shape: tuple, validate_args: bool, multiclass_mode: str
) -> None:
    """Same-shape ``preds``/``target``: torchmetrics fails indexing (``IndexError``); ours says why, at once."""
    preds, target = torch.rand(preds_shape), torch.zeros(target_shape, dtype=torch.long)
    kwargs = {"num_classes": 3, "validate_args": validate_args, "multiclass_mode": multiclass_mode}
    with pytest.raises(IndexError):
        tmc.MulticlassHingeLoss(**kwargs).update(preds, target)
    for call in ("update", "forward"):
        metric = tac.MulticlassHingeLoss(**kwargs)
        with pytest.raises(ValueError, match=r"`preds` should have the shape \(N, C, ...\) with C = num_classes = 3"):
            (metric.update if call == "update" else metric)(preds, target)
        assert int(metric.total) == 0  # nothing accumulated


def test_multiclass_hinge_rejects_another_class_count_without_validation() -> None:
    """``C != num_classes`` is rejected under ``validate_args`` by torchmetrics' own check, and always here."""
    preds, target = torch.rand(4, 4), torch.tensor([0, 1, 2, 0])
    with pytest.raises(ValueError, match="should be equal to number of classes") as expected:
        tmc.MulticlassHingeLoss(num_classes=3).update(preds, target)
    with pytest.raises(ValueError, match="should be equal to number of classes") as err:
        tac.MulticlassHingeLoss(num_classes=3).update(preds, target)
    assert str(err.value) == str(expected.value)
    with pytest.raises(ValueError, match="C = num_classes = 3"):
        tac.MulticlassHingeLoss(num_classes=3, validate_args=False).update(preds, target)


def test_multiclass_hinge_without_num_classes_takes_the_batch_class_count_as_torchmetrics() -> None:
    """``num_classes=None`` (crammer-singer, unvalidated: torchmetrics builds it): C is the batch's, no shape error."""
    generator = torch.Generator().manual_seed(0)
    kwargs = {"num_classes": None, "validate_args": False}
    ours, theirs = tac.MulticlassHingeLoss(**kwargs), tmc.MulticlassHingeLoss(**kwargs)
    for _ in range(2):
        preds, target = torch.rand(5, 3, generator=generator), torch.randint(0, 3, (5,), generator=generator)
        assert_same_value(ours(preds, target), theirs(preds, target), "forward")
    assert_same_value(ours.compute(), theirs.compute(), "compute")
    with pytest.raises(ValueError, match=r"Got `preds` with shape=torch.Size\(\[4, 3\]\)"):
        ours.update(torch.rand(4, 3), torch.zeros(3, dtype=torch.long))  # a batch-size mismatch still raises
