"""Mixed merges (issue 13, point 5): accelerated and plain torchmetrics metrics merge each other's states.

Every value is compared with what plain torchmetrics computes on the same data.
"""

import math
import warnings

import pytest
import torch
import torchmetrics
import torchmetrics.classification as tmc

import torchmetrics_async as ta
from torchmetrics_async.metric import is_same_torchmetrics_class
from torchmetrics_async.nan import NAN_KEPT_STATE

NAN = math.nan
# (accelerated class, torchmetrics class, kwargs, worker batches, driver batches); no NaNs: every strategy agrees.
CASES = [
    (ta.SumMetric, torchmetrics.SumMetric, {}, [torch.tensor([1.0, 2.0])], [torch.tensor(4.0)]),
    (ta.MeanMetric, torchmetrics.MeanMetric, {}, [torch.tensor([1.0, 2.0]), torch.tensor(7.0)], [torch.tensor(4.0)]),
    (ta.CatMetric, torchmetrics.CatMetric, {}, [torch.tensor([1.0, 9.0])], [torch.tensor(4.0)]),
    (
        ta.CatMetric,
        torchmetrics.CatMetric,
        {"nan_strategy": "ignore"},
        [torch.tensor([1.0, NAN, 9.0]), torch.tensor(NAN)],
        [torch.tensor([NAN, 4.0])],
    ),
    (
        ta.MeanMetric,
        torchmetrics.MeanMetric,
        {"nan_strategy": "ignore"},
        [torch.tensor([1.0, NAN, 9.0])],
        [torch.tensor([NAN, 4.0])],
    ),
]
IDS = [f"{c[0].__name__}-{c[2].get('nan_strategy', 'default')}" for c in CASES]


def _filled(metric, batches):
    for batch in batches:
        metric.update(batch)
    return metric


def _expected(tm_cls, kwargs, worker, driver):
    """torchmetrics' own value: a plain driver merging a plain worker."""
    target = _filled(tm_cls(**kwargs), driver)
    target.merge_state(_filled(tm_cls(**kwargs), worker))
    return target.compute()


@pytest.mark.parametrize(("cls", "tm_cls", "kwargs", "worker", "driver"), CASES, ids=IDS)
@pytest.mark.parametrize(
    "sides", ["accelerated<-plain", "accelerated<-plain-state-dict", "plain<-accelerated", "accelerated<-accelerated"]
)
def test_mixed_merge_equals_torchmetrics(cls, tm_cls, kwargs, worker, driver, sides):
    expected = _expected(tm_cls, kwargs, worker, driver)
    driver_cls, worker_cls = {
        "accelerated<-plain": (cls, tm_cls),
        "accelerated<-plain-state-dict": (cls, tm_cls),
        "plain<-accelerated": (tm_cls, cls),
        "accelerated<-accelerated": (cls, cls),
    }[sides]
    target = _filled(driver_cls(**kwargs), driver)
    incoming = _filled(worker_cls(**kwargs), worker)
    target.merge_state(incoming.metric_state if sides.endswith("state-dict") else incoming)
    torch.testing.assert_close(target.compute(), expected, equal_nan=True)


def test_plain_cat_driver_sees_no_nan_from_an_accelerated_worker():
    """The NaNs an accelerated CatMetric keeps until compute() never reach a torchmetrics consumer of its state."""
    worker = _filled(ta.CatMetric(nan_strategy="ignore"), [torch.tensor([1.0, NAN]), torch.tensor(NAN)])
    assert any(torch.isnan(v).any() for v in worker.value)  # held, to be dropped by compute()
    plain = torchmetrics.CatMetric(nan_strategy="ignore")
    plain.update(torch.tensor([1.0, NAN]))
    plain.update(torch.tensor(NAN))
    state = worker.metric_state
    assert len(state["value"]) == len(plain.value)
    for mine, theirs in zip(state["value"], plain.value, strict=True):
        torch.testing.assert_close(mine, theirs)
    assert all(bool(mask.all()) for mask in state[NAN_KEPT_STATE])
    driver = torchmetrics.CatMetric(nan_strategy="ignore")
    driver.merge_state(worker)
    assert not any(torch.isnan(v).any() for v in driver.value)


def test_cat_state_dict_loads_into_plain_torchmetrics():
    worker = _filled(ta.CatMetric(nan_strategy="warn"), [torch.tensor([1.0, NAN, 3.0]), torch.tensor(5.0)])
    worker.persistent(True)
    state = worker.state_dict()
    plain = torchmetrics.CatMetric(nan_strategy="warn")
    plain.persistent(True)
    # torchmetrics' keys only (the keep-masks and the recorded warning are this package's): a strict load
    plain.load_state_dict(state, strict=True)
    torch.testing.assert_close(plain.compute(), torch.tensor([1.0, 3.0, 5.0]))
    # and back into an accelerated metric, which computes the same and warns the NaN its window saw (carried)
    again = ta.CatMetric(nan_strategy="warn")
    again.persistent(True)
    again.load_state_dict(state)
    with pytest.warns(UserWarning, match="Encountered `nan` values"):
        torch.testing.assert_close(again.compute(), torch.tensor([1.0, 3.0, 5.0]))
    # the held state is untouched: compute() still drops what it must, and warns once
    with pytest.warns(UserWarning, match="Encountered `nan` values"):
        torch.testing.assert_close(worker.compute(), torch.tensor([1.0, 3.0, 5.0]))


def test_cat_metric_state_after_sync_shaped_tensor_states():
    """After a distributed sync ``value`` and ``nan_kept`` are concatenated tensors; metric_state drops from those."""
    metric = _filled(ta.CatMetric(nan_strategy="ignore"), [torch.tensor([1.0, NAN, 3.0])])
    metric.value = torch.tensor([1.0, NAN, 3.0])
    setattr(metric, NAN_KEPT_STATE, torch.tensor([True, False, True]))
    torch.testing.assert_close(metric.metric_state["value"], torch.tensor([1.0, 3.0]))
    torch.testing.assert_close(metric.metric_state[NAN_KEPT_STATE], torch.tensor([True, True]))


def test_merge_keeps_torchmetrics_errors():
    driver = ta.MeanMetric()
    with pytest.raises(ValueError, match="Expected incoming state to be an instance of MeanMetric"):
        driver.merge_state(torchmetrics.SumMetric())
    with pytest.raises(ValueError, match="Expected incoming state to be an instance of MeanMetric"):
        driver.merge_state(ta.SumMetric())
    with pytest.raises(ValueError, match="Expected incoming state to be a dict or an instance of Metric"):
        driver.merge_state(3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the once-per-class notice that this option takes torchmetrics' path
        synced_each_step = ta.MeanMetric(dist_sync_on_step=True)
    with pytest.raises(RuntimeError, match="``merge_state`` is not supported for metrics with"):
        synced_each_step.merge_state(torchmetrics.MeanMetric())


@pytest.mark.parametrize(
    ("cls", "tm_cls"), [(ta.MaxMetric, torchmetrics.MaxMetric), (ta.MinMetric, torchmetrics.MinMetric)]
)
def test_full_state_update_metrics_refuse_merges_as_in_torchmetrics(cls, tm_cls):
    """torchmetrics' MaxMetric/MinMetric declare ``full_state_update=True``: no merge, on either side."""
    for driver, worker in [(cls(), tm_cls()), (tm_cls(), cls()), (cls(), cls())]:
        with pytest.raises(RuntimeError, match="``merge_state`` is not supported for metrics with"):
            driver.merge_state(worker)


def test_a_torchmetrics_parent_class_is_another_metric():
    """A plain user subclass of torchmetrics' class is not the class an accelerated MeanMetric stands in for."""

    class Doubled(torchmetrics.MeanMetric):
        def update(self, value, weight=1.0):
            super().update(value * 2, weight)

    assert not is_same_torchmetrics_class(ta.MeanMetric(), Doubled())
    with pytest.raises(ValueError, match="Expected incoming state to be an instance of MeanMetric"):
        ta.MeanMetric().merge_state(Doubled())


def test_accelerated_user_subclass_merges_its_plain_original():
    class Doubled(torchmetrics.MeanMetric):
        def update(self, value, weight=1.0):
            super().update(value * 2, weight)

    plain_driver, plain_worker = Doubled(), Doubled()
    driver = ta.accelerate(Doubled())
    for metric in (plain_driver, driver):
        metric.update(torch.tensor([1.0, 2.0]))
    plain_worker.update(torch.tensor(6.0))
    driver.merge_state(plain_worker)
    plain_driver.merge_state(plain_worker)
    torch.testing.assert_close(driver.compute(), plain_driver.compute())


def test_classification_mixed_merge_equals_torchmetrics():
    preds, target = torch.tensor([0.2, 0.8, 0.6]), torch.tensor([0, 1, 0])
    expected = tmc.BinaryAccuracy()
    expected.update(preds, target)
    expected.merge_state(_filled_pair(tmc.BinaryAccuracy(), preds.flip(0), target))
    for driver_cls, worker_cls in [(ta.classification.BinaryAccuracy, tmc.BinaryAccuracy)] * 1 + [
        (tmc.BinaryAccuracy, ta.classification.BinaryAccuracy)
    ]:
        driver = driver_cls()
        driver.update(preds, target)
        driver.merge_state(_filled_pair(worker_cls(), preds.flip(0), target))
        torch.testing.assert_close(driver.compute(), expected.compute())


def _filled_pair(metric, *inputs):
    metric.update(*inputs)
    return metric


def _bad_binary(metric):
    metric.update(torch.tensor([0.2, 0.8]), torch.tensor([0, 1]))
    metric.update(torch.tensor([0.2, 0.8]), torch.tensor([0, 2]))  # a target outside {0, 1}: deferred check
    return metric


def test_accelerated_driver_keeps_a_merged_workers_violation():
    driver = ta.classification.BinaryAccuracy()
    driver.update(torch.tensor([0.9]), torch.tensor([1]))
    driver.merge_state(_bad_binary(ta.classification.BinaryAccuracy()))
    with pytest.raises(RuntimeError, match=r"^Detected the following values in `target`"):
        driver.compute()


def test_accelerated_driver_keeps_a_merged_workers_nan_error():
    driver = ta.MeanMetric(nan_strategy="error")
    driver.update(torch.tensor(1.0))
    worker = ta.MeanMetric(nan_strategy="error")
    worker.update(torch.tensor([1.0, NAN]))
    driver.merge_state(worker)
    with pytest.raises(RuntimeError, match=r"^Encountered `nan` values in tensor$"):
        driver.compute()


def test_plain_driver_cannot_see_an_accelerated_workers_violation():
    """Documented limit (README deviations): torchmetrics merges only the states it knows; the flag stays behind."""
    worker = _bad_binary(ta.classification.BinaryAccuracy())
    driver = tmc.BinaryAccuracy()
    driver.update(torch.tensor([0.9]), torch.tensor([1]))
    driver.merge_state(worker)
    driver.compute()  # no error: the plain driver does not know the flag state
    with pytest.raises(RuntimeError, match="Detected the following values in `target`"):
        worker.compute()  # the worker itself still reports it


# --- issue 19, item 5: what a merge brings in is computed and reported, whatever the receiver did before -----------


def _nan_warnings(record) -> int:
    return sum("Encountered `nan` values" in str(w.message) for w in record)


@pytest.mark.parametrize("receiver", ["fresh", "computed"])
def test_a_merged_nan_warning_is_not_lost(receiver):
    """Under "warn" torchmetrics warns in the worker's update and the driver's value drops the NaN; here the driver
    warns (once) in the compute() after the merge, or in reset() if no compute() follows, with torchmetrics' value."""
    worker_batch, driver_batch = torch.tensor([1.0, NAN, 4.0]), torch.tensor([2.0])
    expected = torchmetrics.MeanMetric(nan_strategy="warn")
    expected.update(driver_batch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected.merge_state(_filled(torchmetrics.MeanMetric(nan_strategy="warn"), [worker_batch]))
        value = expected.compute()
    for then in ("compute", "reset"):
        driver = ta.MeanMetric(nan_strategy="warn")
        if receiver == "computed":
            driver.update(driver_batch)
            driver.compute()
        driver.merge_state(_filled(ta.MeanMetric(nan_strategy="warn"), [worker_batch]))
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            result = getattr(driver, then)()
        assert _nan_warnings(record) == 1, (then, [str(w.message) for w in record])
        if then == "compute" and receiver == "computed":
            torch.testing.assert_close(result, value)


def _merge_cases():
    """(name, accelerated factory, torchmetrics factory, clean inputs, other clean inputs, violating inputs)."""
    return [
        (
            "nan-error",
            lambda: ta.MeanMetric(nan_strategy="error"),
            lambda: torchmetrics.MeanMetric(nan_strategy="error"),
            (torch.tensor([1.0, 2.0]),),
            (torch.tensor([7.0]),),
            (torch.tensor([1.0, NAN]),),
        ),
        (
            "multiclass-target-out-of-range",
            lambda: ta.classification.MulticlassAccuracy(num_classes=3),
            lambda: tmc.MulticlassAccuracy(num_classes=3),
            (torch.tensor([0, 1, 2]), torch.tensor([0, 1, 1])),
            (torch.tensor([0, 1]), torch.tensor([1, 0])),
            (torch.tensor([0, 1]), torch.tensor([0, 5])),
        ),
        (
            "retrieval-non-binary-target",
            ta.retrieval.RetrievalMRR,
            torchmetrics.retrieval.RetrievalMRR,
            (torch.tensor([0.2, 0.5, 0.9]), torch.tensor([0, 1, 1]), torch.tensor([0, 0, 1])),
            (torch.tensor([0.7, 0.5]), torch.tensor([0, 1]), torch.tensor([2, 2])),
            (torch.tensor([0.2, 0.5]), torch.tensor([0, 3]), torch.tensor([0, 0])),
        ),
    ]


MERGE_CASES = _merge_cases()


@pytest.mark.parametrize("then", ["compute", "reset"])
@pytest.mark.parametrize("receiver", ["fresh", "computed"])
@pytest.mark.parametrize("case", MERGE_CASES, ids=[c[0] for c in MERGE_CASES])
def test_a_merged_violation_is_raised_by_the_receiver(case, receiver, then):
    """torchmetrics raises these in the worker's update(); here the driver that merged the worker raises them."""
    _, ours, plain, clean, _, bad = case
    with pytest.raises((RuntimeError, ValueError)):
        plain().update(*bad)  # what torchmetrics does with the violating batch
    driver = ours()
    if receiver == "computed":
        driver.update(*clean)
        driver.compute()  # a cached value, and flags read clean
    worker = ours()
    worker.update(*bad)
    driver.merge_state(worker)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a fresh driver warns "compute before update", as torchmetrics does
        with pytest.raises(RuntimeError, match=r"^(?!.*torchmetrics-async)"):
            getattr(driver, then)()


@pytest.mark.parametrize("case", MERGE_CASES, ids=[c[0] for c in MERGE_CASES])
def test_a_clean_merge_after_compute_is_computed_again(case):
    """Deviation (README): torchmetrics' merge_state keeps the cached compute() result, so its compute() returns the
    pre-merge value; here the merge drops it, and compute() gives what torchmetrics computes on the merged states."""
    _, ours, plain, clean, other, _ = case
    stale = plain()
    stale.update(*clean)
    before = stale.compute()
    stale.merge_state(_filled_pair(plain(), *other))
    torch.testing.assert_close(stale.compute(), before)  # torchmetrics' cache: the merge is not seen
    expected = plain()
    expected.update(*clean)
    expected.merge_state(_filled_pair(plain(), *other))
    expected = expected.compute()
    assert not torch.allclose(expected, before)  # the merge changes the value
    driver = ours()
    driver.update(*clean)
    driver.compute()
    driver.merge_state(_filled_pair(ours(), *other))
    torch.testing.assert_close(driver.compute(), expected)
