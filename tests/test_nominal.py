"""Nominal metrics against the installed torchmetrics: NaN strategies, bias correction, degenerate tables, category
checks, shapes, merges, and no host sync in update()/forward()."""

import itertools
import pickle
import warnings
from typing import Any

import pytest
import torch
import torchmetrics.nominal as tmn

import torchmetrics_async.nominal as tan
from tests.parity import Step, run_side_by_side, torchmetrics_text
from torchmetrics_async.errors import ShapeMismatchError
from torchmetrics_async.nominal import LARGE_CATEGORY, NEGATIVE_CATEGORY_MESSAGE, large_category_message
from torchmetrics_async.testing import count_host_syncs, no_host_sync

NUM_CLASSES = 4
BIASED = ("CramersV", "TschuprowsT")
NAMES = (*BIASED, "PearsonsContingencyCoefficient", "TheilsU")
STRATEGIES = [("replace", 0.0), ("replace", 2.0), ("drop", None)]
BIAS_WARNING = "using bias correction"


def _configs() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for name, (strategy, value) in itertools.product(NAMES, STRATEGIES):
        for bias in (True, False) if name in BIASED else (None,):
            kwargs = {"num_classes": NUM_CLASSES, "nan_strategy": strategy, "nan_replace_value": value}
            if bias is not None:
                kwargs["bias_correction"] = bias
            out.append((name, kwargs))
    return out


CONFIGS = _configs()
DEFAULT_NAN_CONFIGS = [(name, kwargs) for name, kwargs in CONFIGS if kwargs["nan_replace_value"] == 0.0]
CONFIG_IDS = [f"{name}-{'-'.join(str(v) for v in kwargs.values())}" for name, kwargs in CONFIGS]


def _pair(name: str, kwargs: dict[str, Any]) -> tuple[Any, Any]:
    return getattr(tmn, name)(**kwargs), getattr(tan, name)(**kwargs)


def _batch(kind: str, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    if kind == "logits":
        return torch.rand(16, NUM_CLASSES, generator=generator), torch.rand(16, NUM_CLASSES, generator=generator)
    preds = torch.randint(0, NUM_CLASSES, (16,), generator=generator).float()
    target = torch.randint(0, NUM_CLASSES, (16,), generator=generator).float()
    if kind == "nan":
        preds[seed % 16] = float("nan")
        target[(seed * 7 + 3) % 16] = float("nan")
        target[(seed * 5 + 1) % 16] = float("nan")
    if kind == "int":
        return preds.long(), target.long()
    return preds, target


@pytest.mark.parametrize("kind", ["int", "nan", "logits"])
@pytest.mark.parametrize(("name", "kwargs"), CONFIGS, ids=CONFIG_IDS)
def test_values_match_torchmetrics(name: str, kwargs: dict[str, Any], kind: str) -> None:
    reference, accelerated = _pair(name, kwargs)
    steps = [Step("forward" if i % 2 else "update", _batch(kind, i)) for i in range(6)]
    run_side_by_side(reference, accelerated, steps)
    reference.reset()
    accelerated.reset()
    run_side_by_side(reference, accelerated, [Step("forward", _batch(kind, 9)), Step("update", _batch(kind, 10))])


def _compute_with_warnings(metric: Any) -> tuple[torch.Tensor, list[str]]:
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        value = metric.compute()
    return value, [str(w.message) for w in record if BIAS_WARNING in str(w.message)]


# Degenerate tables: one category on a side (df == 0, Theil's zero entropy), too few entries for bias correction.
DEGENERATE = {
    "one-pred": (torch.tensor([1, 1, 1, 1]), torch.tensor([0, 1, 2, 3])),
    "one-target": (torch.tensor([0, 1, 2, 3]), torch.tensor([2, 2, 2, 2])),
    "two-by-two": (torch.tensor([0, 1, 1]), torch.tensor([0, 0, 1])),
    "two-entries": (torch.tensor([0, 1]), torch.tensor([0, 1])),  # bias correction impossible: NaN and a warning
    "single-entry": (torch.tensor([3]), torch.tensor([0])),
    "empty": (torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long)),
}


@pytest.mark.parametrize("table", list(DEGENERATE))
@pytest.mark.parametrize(("name", "kwargs"), DEFAULT_NAN_CONFIGS, ids=str)
def test_degenerate_tables_compute_exactly_as_torchmetrics(name: str, kwargs: dict[str, Any], table: str) -> None:
    """compute(): same value, dtype (float32 NaN, Theil's int64 0) and bias-correction warning; forward(): value."""
    reference, accelerated = _pair(name, kwargs)
    preds, target = DEGENERATE[table]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected_batch = reference(preds, target)
    with no_host_sync():
        batch = accelerated(preds, target)
    # The batch value's dtype is the state's (it cannot depend on the data without a host read): see the README.
    torch.testing.assert_close(batch, expected_batch, equal_nan=True, check_dtype=False)
    expected, expected_warnings = _compute_with_warnings(reference)
    value, value_warnings = _compute_with_warnings(accelerated)
    torch.testing.assert_close(value, expected, equal_nan=True)
    assert value_warnings == expected_warnings


def test_degenerate_cases_are_exercised() -> None:
    """The table above reaches the branches it is meant to: a NaN with warning, Theil's integer 0, df == 0."""
    reference = tmn.CramersV(num_classes=NUM_CLASSES)
    reference.update(*DEGENERATE["two-entries"])
    with pytest.warns(UserWarning, match=BIAS_WARNING):
        assert reference.compute().isnan()
    reference = tmn.TheilsU(num_classes=NUM_CLASSES)
    reference.update(*DEGENERATE["one-pred"])
    assert reference.compute().dtype == torch.int64


def test_compute_reads_the_deferred_flags_and_one_flag_at_most() -> None:
    """One read for the deferred checks, one more where torchmetrics' result depends on a flag (none for Pearson)."""
    for name, kwargs in CONFIGS:
        _, accelerated = _pair(name, kwargs)
        accelerated.update(*_batch("int", 0))
        with count_host_syncs() as syncs:
            accelerated.compute()
        expected = 1 if name == "PearsonsContingencyCoefficient" or kwargs.get("bias_correction") is False else 2
        assert syncs.total == expected, (name, kwargs, syncs.summary())


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize(("name", "kwargs"), CONFIGS, ids=CONFIG_IDS)
def test_update_and_forward_make_no_host_sync(name: str, kwargs: dict[str, Any], device: str) -> None:
    metric = getattr(tan, name)(**kwargs).to(device)
    for kind in ("int", "nan", "logits"):
        preds, target = (x.to(device) for x in _batch(kind, 1))
        with no_host_sync():
            metric.update(preds, target)
            metric(preds, target)
    preds, target = torch.tensor([0, 9, -1]).to(device), torch.tensor([0, 1, 2]).to(device)  # out of range
    with no_host_sync():
        metric.update(preds, target)
        metric(preds, target)


@pytest.mark.parametrize(
    ("preds", "target", "message"),
    [
        (torch.tensor([0, 1, 2]), torch.tensor([-1, 1, 2]), NEGATIVE_CATEGORY_MESSAGE),
        (torch.tensor([0.0, 1.0, -2.0]), torch.tensor([0.0, 1.0, 0.0]), NEGATIVE_CATEGORY_MESSAGE),
        (torch.tensor([0, 1, 2]), torch.tensor([0, 1, NUM_CLASSES]), large_category_message(NUM_CLASSES)),
        (torch.tensor([NUM_CLASSES + 5, 1, 2]), torch.tensor([3, 1, 2]), large_category_message(NUM_CLASSES)),
    ],
)
@pytest.mark.parametrize("name", NAMES)
def test_category_out_of_range_is_raised_by_compute_and_reset(name: str, preds, target, message: str) -> None:
    reference = getattr(tmn, name)(num_classes=NUM_CLASSES)
    with pytest.raises(RuntimeError) as torchmetrics_error:
        reference.update(preds, target)  # torchmetrics rejects each of these in update()
    if message == NEGATIVE_CATEGORY_MESSAGE:
        assert str(torchmetrics_error.value) == message
    metric = getattr(tan, name)(num_classes=NUM_CLASSES)
    metric.update(*_batch("int", 0))
    with no_host_sync():
        batch = metric(preds, target)
    assert batch.isnan()
    with pytest.raises(RuntimeError) as err:
        metric.compute()
    assert torchmetrics_text(err.value) == message
    metric.update(preds, target)
    with pytest.raises(RuntimeError) as err:
        metric.reset()  # not reported by a compute() since: reset raises it
    assert str(err.value) == message
    metric.update(*_batch("int", 0))
    metric.compute()  # the reset cleared it


def test_a_category_torchmetrics_miscounts_is_an_error() -> None:
    """preds == num_classes with target 0 lands in bin (1, 0) of torchmetrics' table: a wrong number, not an error."""
    preds, target = torch.tensor([NUM_CLASSES, 1, 2]), torch.tensor([0, 1, 2])
    reference = tmn.TheilsU(num_classes=NUM_CLASSES)
    reference.update(preds, target)  # accepted
    assert reference.confmat[1, 0] == 1
    metric = tan.TheilsU(num_classes=NUM_CLASSES)
    metric.update(preds, target)
    with pytest.raises(RuntimeError, match="categories in"):
        metric.compute()


def test_dropped_rows_are_not_checked() -> None:
    """Under "drop" a row with a NaN does not count, whatever its other value (torchmetrics drops it first)."""
    preds, target = torch.tensor([0.0, float("nan"), 2.0, 1.0]), torch.tensor([0.0, 99.0, 2.0, 1.0])
    reference, accelerated = _pair("CramersV", {"num_classes": NUM_CLASSES, "nan_strategy": "drop"})
    run_side_by_side(reference, accelerated, [Step("update", (preds, target)), Step("forward", (preds, target))])


def test_replaced_nan_out_of_range_is_checked() -> None:
    metric = tan.CramersV(num_classes=NUM_CLASSES, nan_replace_value=-1.0)
    metric.update(torch.tensor([0.0, float("nan")]), torch.tensor([0.0, 1.0]))
    with pytest.raises(RuntimeError, match="non-negative"):
        metric.compute()


@pytest.mark.parametrize("strategy", ["replace", "drop"])
@pytest.mark.parametrize("name", NAMES)
def test_shape_mismatch_is_raised_at_once(name: str, strategy: str) -> None:
    """A length mismatch raises at once (torchmetrics raises too, or broadcasts a length-1 side silently)."""
    metric = getattr(tan, name)(num_classes=NUM_CLASSES, nan_strategy=strategy)
    metric.update(*_batch("int", 0))
    expected = metric.confmat.clone()
    for preds, target in [
        (torch.tensor([0, 1, 2]), torch.tensor([0, 1])),
        (torch.tensor([0, 1, 2]), torch.tensor([1])),
        (torch.rand(3, NUM_CLASSES), torch.tensor([0, 1])),
        (torch.ones(1, 1, dtype=torch.bool), torch.ones(2, 3, dtype=torch.bool)),  # argmax rejects bool: size first
    ]:
        for call in (metric.update, metric):
            with pytest.raises(ShapeMismatchError), no_host_sync():
                call(preds, target)
    torch.testing.assert_close(metric.confmat, expected)


def test_inputs_that_are_not_one_dimensional() -> None:
    """Under "replace" torchmetrics' bincount rejects them (same type and message); under "drop" it flattens them."""
    preds, target = torch.randint(0, NUM_CLASSES, (2, 3, 2)), torch.randint(0, NUM_CLASSES, (2, 3, 2))
    reference, accelerated = _pair("CramersV", {"num_classes": NUM_CLASSES})
    with pytest.raises(RuntimeError) as expected:
        reference.update(preds, target)
    with pytest.raises(RuntimeError) as err:
        accelerated.update(preds, target)
    assert str(err.value) == str(expected.value)
    reference, accelerated = _pair("CramersV", {"num_classes": NUM_CLASSES, "nan_strategy": "drop"})
    run_side_by_side(reference, accelerated, [Step("update", (preds, target)), Step("forward", (preds, target))])


@pytest.mark.parametrize(("name", "kwargs"), CONFIGS, ids=CONFIG_IDS)
def test_merge_and_pickle_carry_states_and_flags(name: str, kwargs: dict[str, Any]) -> None:
    reference, accelerated = _pair(name, kwargs)
    other_reference, other = _pair(name, kwargs)
    for i in range(2):
        for a, b in ((reference, accelerated), (other_reference, other)):
            a.update(*_batch("nan", i + (5 if a is other_reference else 0)))
            b.update(*_batch("nan", i + (5 if b is other else 0)))
    reference.merge_state(other_reference)
    accelerated.merge_state(pickle.loads(pickle.dumps(other)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.testing.assert_close(accelerated.compute(), reference.compute(), equal_nan=True)
    bad = getattr(tan, name)(**kwargs)
    bad.update(torch.tensor([0, NUM_CLASSES]), torch.tensor([0, 1]))
    accelerated.merge_state(pickle.loads(pickle.dumps(bad)))
    assert bool(getattr(accelerated, LARGE_CATEGORY))
    with pytest.raises(RuntimeError, match="categories in"):
        accelerated.compute()


def test_float64_states_follow_torchmetrics() -> None:
    for name, kwargs in CONFIGS:
        reference, accelerated = _pair(name, kwargs)
        reference.set_dtype(torch.float64)
        accelerated.set_dtype(torch.float64)
        steps = [Step("update", _batch("nan", 1)), Step("forward", _batch("nan", 2)), Step("update", _batch("nan", 3))]
        run_side_by_side(reference, accelerated, steps)


FLEISS_INPUTS = {
    "counts": [torch.randint(0, 4, (6, 3), generator=torch.Generator().manual_seed(i)) for i in range(4)],
    "probs": [torch.randn(6, 3, 5, generator=torch.Generator().manual_seed(i)) for i in range(4)],
}


@pytest.mark.parametrize("mode", ["counts", "probs"])
def test_fleiss_kappa_matches_torchmetrics_without_host_sync(mode: str) -> None:
    reference, accelerated = tmn.FleissKappa(mode=mode), tan.FleissKappa(mode=mode)
    steps = [Step("forward" if i % 2 else "update", (x,)) for i, x in enumerate(FLEISS_INPUTS[mode])]
    run_side_by_side(reference, accelerated, steps)
    with no_host_sync():
        accelerated.update(FLEISS_INPUTS[mode][0])
        accelerated(FLEISS_INPUTS[mode][1])


def test_fleiss_kappa_category_torch_rejects_is_raised_by_compute() -> None:
    """mode="probs": torchmetrics one-hot encodes with num_classes = n_raters; a larger category fails there."""
    scores = torch.zeros(4, 3, 2)
    scores[:, -1] = 1.0  # every rater picks category 2 of 3, with 2 raters
    with pytest.raises(RuntimeError) as expected:
        tmn.FleissKappa(mode="probs").update(scores)
    metric = tan.FleissKappa(mode="probs")
    with no_host_sync():
        batch = metric(scores)
    assert batch.isnan()
    with pytest.raises(RuntimeError) as err:
        metric.compute()
    assert torchmetrics_text(err.value) == str(expected.value)


@pytest.mark.parametrize(
    ("mode", "ratings"),
    [("probs", torch.rand(4, 3)), ("probs", torch.ones(4, 3, 2, dtype=torch.long)), ("counts", torch.rand(4, 3))],
)
def test_fleiss_kappa_shape_and_dtype_errors_are_torchmetrics(mode: str, ratings: torch.Tensor) -> None:
    with pytest.raises(ValueError, match="ratings must have") as expected:
        tmn.FleissKappa(mode=mode).update(ratings)
    with pytest.raises(ValueError, match="ratings must have") as err, no_host_sync():
        tan.FleissKappa(mode=mode).update(ratings)
    assert str(err.value) == str(expected.value)
