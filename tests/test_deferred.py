"""A recorded violation is never dropped: NaN batch values, reset() raises, messages name the first offending update.

Runs over every registered class with deferred checks (a NaN under ``nan_strategy="error"`` for the aggregators, a
label out of range for classification), through the one-pass ``forward``, the generic one (a subclass overriding
``update``) and the step-only logging pattern (``forward`` every step, ``reset`` at the end, no ``compute``).
"""

from __future__ import annotations

import re
import warnings
from typing import Any

import pytest
import torch
import torchmetrics
from torch import Tensor

import torchmetrics_async as ta
from tests.example_families import is_task_wrapper as _is_task_wrapper
from tests.examples import example_for, violating_example_for
from tools.coverage import FORWARD_CAVEATS
from torchmetrics_async._torchmetrics import Metric
from torchmetrics_async.accelerate import registry
from torchmetrics_async.registry import torchmetrics_origin
from torchmetrics_async.testing import count_host_syncs, no_host_sync


def _has_deferred_checks(cls: type) -> bool:
    """Whether the class's family gives a batch that violates a deferred check (families without checks give none)."""
    try:
        violating_example_for(cls)
    except LookupError:
        return False
    return True


CLASSES = sorted(
    (cls for origin, cls in registry().items() if not _is_task_wrapper(origin) and _has_deferred_checks(cls)),
    key=lambda cls: cls.__name__,
)


# A deferred error is torchmetrics' message as it is: nothing appended (tests/parity.py compares the texts).
TORCHMETRICS_TEXT = r"^(?!.*torchmetrics-async)"


def _with_update_override(cls: type) -> type:
    class Overriding(cls):
        def update(self, *args: Any, **kwargs: Any) -> None:
            super().update(*args, **kwargs)

    return Overriding


def _all_nan_where_floating(value: Any) -> bool:
    if isinstance(value, Tensor):
        return not value.is_floating_point() or bool(torch.isnan(value).all())
    if isinstance(value, dict):
        return all(_all_nan_where_floating(v) for v in value.values())
    return True


@pytest.mark.sweep
@pytest.mark.parametrize("generic", [False, True], ids=["one-pass", "overriding-subclass"])
@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_step_only_logging_of_a_bad_batch_raises_at_reset(cls: type, generic: bool) -> None:
    """forward() every step, reset() at the end: the bad second batch's value is NaN and reset() raises its error."""
    bad = violating_example_for(cls)
    metric = (_with_update_override(cls) if generic else cls)(**bad.init)
    # A class listed as reading the host in forward() (its batch value) does; update() and reset() still must not.
    with count_host_syncs() if torchmetrics_origin(cls) in FORWARD_CAVEATS else no_host_sync():
        good = metric(*example_for(cls, 1).inputs)
        value = metric(*bad.inputs)
        metric(*example_for(cls, 2).inputs)
    assert not (isinstance(good, Tensor) and good.is_floating_point() and bool(torch.isnan(good).any()))
    assert _all_nan_where_floating(value), value
    with count_host_syncs() as syncs, pytest.raises(RuntimeError, match=TORCHMETRICS_TEXT):
        metric.reset()
    assert syncs.total == 1, syncs.summary()
    # The window is over and was reset all the same: the next one starts clean.
    metric.update(*example_for(cls, 3).inputs)
    metric.compute()
    metric.reset()


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_compute_raises_torchmetrics_error_then_reset_does_not_repeat_it(cls: type) -> None:
    bad = violating_example_for(cls)
    metric = cls(**bad.init)
    for seed in range(1, 4):
        metric.update(*example_for(cls, seed).inputs)
    metric.update(*bad.inputs)
    metric.update(*bad.inputs)
    with pytest.raises(RuntimeError, match=TORCHMETRICS_TEXT):
        metric.compute()
    with no_host_sync():
        metric.reset()  # compute() reported the window: nothing left to read


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_a_clean_window_reads_once_at_reset_and_raises_nothing(cls: type) -> None:
    bad = violating_example_for(cls)
    metric = cls(**bad.init)
    metric.update(*example_for(cls, 1).inputs)
    with count_host_syncs() as syncs:
        metric.reset()
    assert syncs.total == 1, syncs.summary()
    with no_host_sync():
        metric.reset()  # nothing happened since: no read


def _arrive(door: str, receiver: Any, source: Any) -> None:
    """Give ``receiver`` the states of ``source`` through a door: merged, or loaded from its state dict."""
    if door == "merge_state":
        receiver.merge_state(source)
    else:
        for metric in (*receiver.modules(), *source.modules()):  # a wrapper's base metric too (MinMaxMetric)
            if isinstance(metric, Metric):
                metric.persistent(True)
        receiver.load_state_dict(source.state_dict())


# torchmetrics refuses merge_state for full_state_update metrics (MaxMetric...): those arrive by loading only.
DOORS = [
    (cls, door)
    for cls in CLASSES
    for door in ("merge_state", "load_state_dict")
    if door != "merge_state" or cls.full_state_update is False
]


@pytest.mark.sweep
@pytest.mark.parametrize(("receiver", "then"), [("fresh", "reset"), ("computed", "compute"), ("computed", "reset")])
@pytest.mark.parametrize(("cls", "door"), DOORS, ids=lambda c: getattr(c, "__name__", c))
def test_a_violation_arriving_through_a_door_is_raised_like_a_local_one(
    cls: type, door: str, receiver: str, then: str
) -> None:
    """State that travels carries its errors: a fresh or computed receiver neither returns its cached value nor
    resets without raising (issue 19, item 5)."""
    bad = violating_example_for(cls)
    source = cls(**bad.init)
    source.update(*bad.inputs)
    target = cls(**bad.init)
    if receiver == "computed":
        target.update(*example_for(cls, 1).inputs)
        target.compute()  # cached, flags read and clean
    _arrive(door, target, source)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a fresh receiver warns "compute before update", as torchmetrics
        with pytest.raises(RuntimeError):
            getattr(target, then)()


def test_a_collection_logged_per_step_raises_by_the_end_of_the_epoch() -> None:
    collection = ta.MetricCollection(
        {"acc": ta.Accuracy(task="multiclass", num_classes=3), "loss": ta.MeanMetric(nan_strategy="error")}
    )
    with no_host_sync():
        collection.forward(torch.tensor([0, 1]), torch.tensor([0, 1]))
    values = collection["acc"](torch.tensor([0, 1]), torch.tensor([0, 7]))
    assert torch.isnan(values)
    with pytest.raises(RuntimeError, match="Detected more unique values in `target`"):
        collection.reset()


def test_warn_strategy_warns_at_reset_when_compute_did_not() -> None:
    metric = ta.SumMetric(nan_strategy="warn")
    metric.update(torch.tensor([1.0, float("nan")]))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        metric.reset()
    assert [str(w.message) for w in record] == ["Encountered `nan` values in tensor. Will be removed."]


def test_running_wrapper_keeps_a_violation_that_left_its_window() -> None:
    metric = ta.RunningMean(window=2, nan_strategy="error")
    metric.update(torch.tensor([float("nan")]))
    for value in (1.0, 2.0, 3.0):
        metric.update(torch.tensor(value))
    with pytest.raises(RuntimeError, match=r"^Encountered `nan` values in tensor$"):
        metric.compute()


def test_a_fused_collection_resets_every_member_before_raising() -> None:
    collection = ta.MetricCollection(
        {"loss": ta.MeanMetric(nan_strategy="error"), "acc": ta.Accuracy(task="multiclass", num_classes=3)}
    )
    collection["loss"].update(torch.tensor([float("nan")]))
    collection["acc"].update(torch.tensor([0, 1]), torch.tensor([0, 1]))
    with pytest.raises(RuntimeError, match="Encountered `nan` values"):
        collection.reset()
    assert [metric.update_count for metric in collection.values(copy_state=False)] == [0, 0]


# --- one host read for all members' flags --------------------------------------------------------------------------


def _strict_collection() -> ta.MetricCollection:
    return ta.MetricCollection(
        {
            "mean": ta.MeanMetric(nan_strategy="error"),
            "sum": ta.SumMetric(nan_strategy="error"),
            "max": ta.MaxMetric(nan_strategy="warn"),
            "acc": ta.classification.MulticlassAccuracy(num_classes=3),
        },
        compute_groups=False,
    )


def test_a_fused_collection_reads_every_members_flags_in_one_read() -> None:
    collection = _strict_collection()
    for name in ("mean", "sum", "max"):
        collection[name].update(torch.tensor([1.0, 2.0]))
    collection["acc"].update(torch.tensor([0, 1, 2]), torch.tensor([0, 1, 1]))
    with count_host_syncs() as syncs:
        values = collection.compute()
        collection.reset()  # the flags were reported by compute(): reset reads nothing
    assert syncs.total == 1, syncs.by_op
    assert values["mean"] == 1.5
    reference = torchmetrics.classification.MulticlassAccuracy(num_classes=3)
    reference.update(torch.tensor([0, 1, 2]), torch.tensor([0, 1, 1]))
    assert values["acc"] == reference.compute()


def test_one_read_still_reports_member_by_member_in_compute_order() -> None:
    collection = _strict_collection()
    collection["mean"].update(torch.tensor([1.0]))
    collection["sum"].update(torch.tensor([float("nan")]))
    collection["max"].update(torch.tensor([1.0]))
    collection["acc"].update(torch.tensor([0]), torch.tensor([7]))  # a label out of range: also an error
    keys = list(collection.keys())
    first = next(key for key in keys if key in ("sum", "acc"))  # the collection's compute order
    with count_host_syncs() as syncs, pytest.raises(RuntimeError) as err:
        collection.compute()
    assert syncs.total == 1
    expected = "Encountered `nan` values in tensor" if first == "sum" else "Detected more unique values"
    assert str(err.value).startswith(expected)


def test_flags_read_for_a_member_that_did_not_compute_are_not_lost() -> None:
    class Failing(ta.SumMetric):
        def compute(self) -> Tensor:
            raise ValueError("boom")

    collection = ta.MetricCollection({"a": Failing(), "b": ta.MeanMetric(nan_strategy="error")}, compute_groups=False)
    collection["a"].update(torch.tensor(1.0))
    collection["b"].update(torch.tensor(float("nan")))
    with pytest.raises(ValueError, match="boom"):
        collection.compute()  # "a" computes first and raises: "b" never reported its NaN
    with pytest.raises(RuntimeError, match="Encountered `nan` values in tensor"):
        collection.reset()


def _independent_metrics() -> dict[str, Any]:
    return {
        "mean": ta.MeanMetric(nan_strategy="error"),
        "sum": ta.SumMetric(nan_strategy="warn"),
        "acc": ta.classification.MulticlassAccuracy(num_classes=3),
        "f1": ta.classification.MulticlassF1Score(num_classes=3),
    }


def _update_all(metrics: dict[str, Any]) -> None:
    for name in ("mean", "sum"):
        metrics[name].update(torch.tensor([1.0, 2.0]))
    for name in ("acc", "f1"):
        metrics[name].update(torch.tensor([0, 1, 2]), torch.tensor([0, 1, 1]))


def test_a_metric_computed_alone_reads_its_own_flags_only() -> None:
    # No side effect on other metrics: each compute() reads its own flags (one read), and a metric not computed keeps
    # its flags for its own reset() (one read), whatever was computed before it.
    metrics = _independent_metrics()
    _update_all(metrics)
    for name in ("mean", "sum", "acc"):
        with count_host_syncs() as syncs:
            metrics[name].compute()
        assert syncs.total == 1, (name, syncs.by_op)
    with count_host_syncs() as syncs:
        metrics["f1"].reset()
    assert syncs.total == 1, syncs.by_op


def test_a_collection_reset_reads_every_members_unreported_flags_in_one_read() -> None:
    collection = _strict_collection()
    for name in ("mean", "sum", "max"):
        collection[name].update(torch.tensor([1.0, 2.0]))
    collection["acc"].update(torch.tensor([0, 1, 2]), torch.tensor([0, 1, 7]))  # a label out of range
    with count_host_syncs() as syncs, pytest.raises(RuntimeError, match="Detected more unique values"):
        collection.reset()
    assert syncs.total == 1, syncs.by_op
    assert [metric.update_count for metric in collection.values(copy_state=False)] == [0, 0, 0, 0]


def _write_violation(kind: str, metric: Any) -> None:
    bad = ta.MeanMetric(nan_strategy="error")
    bad.update(torch.tensor(float("nan")))
    if kind == "update":
        metric.update(torch.tensor(float("nan")))
    elif kind == "merge_state":
        metric.merge_state(bad)
    elif kind == "load_state_dict":
        metric.persistent(True)
        bad.persistent(True)
        metric.load_state_dict(bad.state_dict())
    else:
        metric.reset()
        metric.update(torch.tensor(float("nan")))


@pytest.mark.parametrize("kind", ["update", "merge_state", "load_state_dict", "reset_then_update"])
def test_a_violation_written_after_a_clean_compute_is_raised_by_the_next(kind: str) -> None:
    metric = ta.MeanMetric(nan_strategy="error")
    metric.update(torch.tensor(1.0))
    metric.compute()  # reads clean flags
    _write_violation(kind, metric)
    with pytest.raises(RuntimeError, match="Encountered `nan` values in tensor"):
        metric.compute()


def _persistent_with_recorded_error(cls: type, persistent_set: str) -> tuple[Any, Any]:
    """(an accelerated metric whose window recorded a deferred error, its states persistent; the example)."""
    bad = violating_example_for(cls)
    if persistent_set == "after":
        metric = cls(**bad.init)
        metric.persistent(True)
    else:  # accelerate() adds the check states after the user made the states persistent
        metric = torchmetrics_origin(cls)(**bad.init)
        metric.persistent(True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ta.accelerate(metric)
    metric.update(*bad.inputs)
    return metric, bad


@pytest.mark.sweep
@pytest.mark.parametrize("persistent_set", ["after", "before accelerate()"])
@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_a_checkpoint_with_a_recorded_error_is_refused_by_plain_torchmetrics(cls: type, persistent_set: str) -> None:
    """Never silently wrong: the recorded error keeps its check state's key, which a plain metric refuses under
    ``strict=True``; an accelerated metric loads it and raises the error as the source would."""
    source, bad = _persistent_with_recorded_error(cls, persistent_set)
    saved = source.state_dict()
    with pytest.raises(RuntimeError) as recorded:
        source.compute()
    plain = torchmetrics_origin(cls)(**bad.init)
    plain.persistent(True)
    checks = "|".join(source._deferred_checks_registered())
    with pytest.raises(RuntimeError, match=rf'Unexpected key\(s\) in state_dict: "({checks})"'):
        plain.load_state_dict(saved, strict=True)
    receiver = cls(**bad.init)
    receiver.load_state_dict(saved, strict=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a fresh receiver warns "compute before update", as torchmetrics
        with pytest.raises(RuntimeError, match=re.escape(str(recorded.value))):
            receiver.compute()
