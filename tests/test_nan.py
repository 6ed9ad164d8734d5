"""Deferred NaN handling: "error" raises and "warn" warns in compute(), with torchmetrics' messages; the flag is a
metric state, so it survives forward, checkpoints, merges and pickling, and reset() clears it."""

import copy
import math
import pickle
import warnings

import pytest
import torch
import torchmetrics

import torchmetrics_async as ta
from torchmetrics_async.nan import NAN_FLAG_STATE
from torchmetrics_async.testing import no_host_sync

NAN_ERROR = "Encountered `nan` values in tensor"
NAN_WARNING = "Encountered `nan` values in tensor. Will be removed."
# torchmetrics' message, then where the window's first NaN was recorded (update N, or a merged/synced state).
DEFERRED_NAN_ERROR = f"^{NAN_ERROR}$"
CLASSES = [ta.SumMetric, ta.MeanMetric, ta.MaxMetric, ta.MinMetric, ta.CatMetric]
BAD = torch.tensor([1.0, math.nan])


def _nan_warnings(fn):
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        result = fn()
    return result, sum(str(w.message) == NAN_WARNING for w in record)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
@pytest.mark.parametrize("how", ["update", "forward", "python-number"])
def test_error_is_deferred_to_compute(cls, how):
    metric = cls(nan_strategy="error")
    with no_host_sync():
        if how == "update":
            metric.update(BAD)
        elif how == "forward":
            metric(BAD)
        else:
            metric.update(math.nan)
    with pytest.raises(RuntimeError, match=DEFERRED_NAN_ERROR):
        metric.compute()
    metric.reset()
    metric.update(torch.tensor([1.0]))
    metric.compute()


@pytest.mark.parametrize(
    ("cls", "carry"),
    [
        (cls, carry)
        for cls in CLASSES
        for carry in ("pickle", "deepcopy", "state_dict", "merge_state")
        # torchmetrics refuses merge_state for full_state_update metrics (Max, Min)
        if not (carry == "merge_state" and cls.full_state_update)
    ],
    ids=str,
)
def test_deferred_error_travels_with_the_state(cls, carry):
    source = cls(nan_strategy="error")
    source.update(BAD)
    if carry == "pickle":
        target = pickle.loads(pickle.dumps(source))
    elif carry == "deepcopy":
        target = copy.deepcopy(source)
    elif carry == "state_dict":
        source.persistent(True)
        target = cls(nan_strategy="error")
        target.persistent(True)
        target.load_state_dict(source.state_dict())
    else:
        target = cls(nan_strategy="error")
        target.update(torch.tensor([2.0]))
        target.merge_state(source)
    assert bool(getattr(target, NAN_FLAG_STATE))
    with pytest.raises(RuntimeError, match=DEFERRED_NAN_ERROR):
        target.compute()


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_warn_once_per_window(cls):
    metric = cls(nan_strategy="warn", compute_with_cache=False)
    metric.update(BAD)
    metric.update(BAD)
    _, first = _nan_warnings(metric.compute)
    _, second = _nan_warnings(metric.compute)
    assert (first, second) == (1, 0)
    metric.reset()
    metric.update(torch.tensor([1.0]))
    _, clean = _nan_warnings(metric.compute)
    metric.update(BAD)
    _, again = _nan_warnings(metric.compute)
    assert (clean, again) == (0, 1)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
@pytest.mark.parametrize("nan_strategy", ["ignore", "disable", 0.0])
def test_no_flag_state_where_nothing_is_deferred(cls, nan_strategy):
    assert NAN_FLAG_STATE not in cls(nan_strategy=nan_strategy)._defaults


def test_running_warns_from_its_window():
    metric = ta.RunningMean(window=2, nan_strategy="warn")
    metric.update(BAD)
    value, warned = _nan_warnings(metric.compute)
    assert warned == 1
    torch.testing.assert_close(value, torch.tensor(1.0))


@pytest.mark.parametrize("option", ["dist_sync_on_step", "compute_on_cpu"])
def test_options_that_sync_are_announced_once(option):
    from torchmetrics_async import metric as metric_module

    metric_module._ANNOUNCED.discard(("CatMetric", option))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        ta.CatMetric(**{option: True})
        ta.CatMetric(**{option: True})
    assert sum(option in str(w.message) for w in record) == 1


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_reloaded_metric_computes_without_compute_before_update_warning(cls):
    source = cls()
    source.persistent(True)
    source.update(torch.tensor([1.0, 2.0]))
    target = cls()
    target.persistent(True)
    target.load_state_dict(source.state_dict())
    assert target.update_count == source.update_count == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.testing.assert_close(target.compute(), source.compute())


def test_forward_of_an_overriding_subclass_keeps_the_value_of_a_batch_whose_nans_are_dropped() -> None:
    """A "warn" check is no error: the generic forward (a subclass overriding update) returns torchmetrics' value of
    the batch without its NaNs, not NaN (only an "error" check makes a batch value NaN)."""

    class Overriding(ta.SumMetric):
        def update(self, value: torch.Tensor) -> None:
            super().update(value)

    class Plain(torchmetrics.SumMetric):
        def update(self, value: torch.Tensor) -> None:
            super().update(value)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torchmetrics' NaN warning, both
        expected = Plain()(BAD)
        got = Overriding()(BAD)
    assert not torch.isnan(expected)
    torch.testing.assert_close(got, expected)
