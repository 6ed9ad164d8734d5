"""AsyncMetricCollector in one process: lifecycle, errors, windows, PyTrees, deferred errors, host syncs, buffers,
checkpoints at every lifecycle point, and the accelerator path driven by a fake stream object that records calls."""

from __future__ import annotations

import contextlib
import gc
import io
import math
import warnings
import weakref
from typing import Any

import pytest
import torch
import torchmetrics
from torch.utils._python_dispatch import TorchDispatchMode
from torchmetrics import Metric

import torchmetrics_async as ta
from tests.parity import assert_same
from torchmetrics_async import AsyncMetricCollector
from torchmetrics_async.collector import collector as collector_module
from torchmetrics_async.collector import window as window_module
from torchmetrics_async.testing import count_host_syncs, no_host_sync

try:
    from torchmetrics_async.classification import MulticlassAccuracy
except ImportError:  # classification is being finished elsewhere; the aggregators are enough for most tests
    MulticlassAccuracy = None

NAN_ERROR = "Encountered `nan` values in tensor"
NAN_WARNING = "Encountered `nan` values in tensor. Will be removed."
# A deferred report names the window's first offending update (the collector hands it over with the window).
FIRST_UPDATE = "$"
needs_classification = pytest.mark.skipif(MulticlassAccuracy is None, reason="classification not importable")


# --------------------------------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------------------------------


class FakeStreamOps:
    """StreamOps on the CPU that records every call; ``on_record`` sees the collector when an event is recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.current = "main"
        self.events = 0
        self.on_record = None

    def current_stream(self) -> Any:
        return self.current

    def new_stream(self) -> Any:
        self.calls.append(("new_stream",))
        return "side"

    def record_event(self, stream: Any) -> Any:
        self.events += 1
        event = f"event{self.events}"
        self.calls.append(("record_event", stream, event))
        if self.on_record is not None:
            self.on_record(stream)
        return event

    def wait_event(self, stream: Any, event: Any) -> None:
        self.calls.append(("wait_event", stream, event))

    @contextlib.contextmanager
    def use(self, stream: Any) -> Any:
        previous, self.current = self.current, stream
        self.calls.append(("enter", stream))
        try:
            yield
        finally:
            self.current = previous
            self.calls.append(("exit", stream))

    def to_host(self, tensor: torch.Tensor) -> torch.Tensor:
        self.calls.append(("to_host", self.current, tensor.dtype))
        return tensor.clone()

    def synchronize(self, event: Any) -> None:
        self.calls.append(("synchronize", event))

    def names(self) -> list[str]:
        return [call[0] for call in self.calls]


def values(n: int, seed: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(3 + i % 2, generator=generator) for i in range(n)]


def labels(n: int, seed: int, classes: int = 4) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    return [
        (torch.randint(0, classes, (6,), generator=generator), torch.randint(0, classes, (6,), generator=generator))
        for _ in range(n)
    ]


def aggregators(module: Any = ta) -> dict[str, Metric]:
    return {
        "mean": module.MeanMetric(),
        "sum": module.SumMetric(),
        "max": module.MaxMetric(),
        "min": module.MinMetric(),
    }


def feed(metrics: Any, xs: list[torch.Tensor], pairs: list | None = None) -> None:
    """Update every metric of a dict/collection: aggregators with ``xs``, classification metrics with ``pairs``."""
    members = (
        metrics.values(copy_state=False) if isinstance(metrics, torchmetrics.MetricCollection) else metrics.values()
    )
    for metric in members:
        if isinstance(metric, torchmetrics.MetricCollection):
            feed(metric, xs, pairs)
        elif isinstance(metric, torchmetrics.classification.MulticlassStatScores):
            for preds, target in pairs or []:
                metric.update(preds, target)
        else:
            for x in xs:
                metric.update(x)


def python(tree: Any) -> Any:
    """torchmetrics' output as the Python values the collector returns."""
    if isinstance(tree, torch.Tensor):
        return tree.tolist()
    if isinstance(tree, dict):
        return {key: python(value) for key, value in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(python(value) for value in tree)
    return tree


def collection(with_classification: bool = True) -> ta.MetricCollection:
    metrics = aggregators()
    if with_classification and MulticlassAccuracy is not None:
        metrics["acc"] = MulticlassAccuracy(num_classes=4)
    return ta.MetricCollection(metrics)


def reference(with_classification: bool = True) -> torchmetrics.MetricCollection:
    metrics = aggregators(torchmetrics)
    if with_classification and MulticlassAccuracy is not None:
        metrics["acc"] = torchmetrics.classification.MulticlassAccuracy(num_classes=4)
    return torchmetrics.MetricCollection(metrics)


# --------------------------------------------------------------------------------------------------------------------
# Lifecycle and windows
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fake", [False, True], ids=["cpu-path", "fake-stream-path"])
def test_updates_after_schedule_belong_to_the_next_window(fake):
    live = collection()
    collector = AsyncMetricCollector(live, stream_ops=FakeStreamOps() if fake else None)
    collector.bind()
    windows = [(values(3, 1), labels(2, 1)), (values(2, 2), labels(3, 2)), (values(4, 3), labels(1, 3))]
    feed(live, *windows[0])
    collector.schedule_collection()
    results = []
    for xs, pairs in windows[1:]:
        feed(live, xs, pairs)  # while the previous window is in flight
        results.append(collector.collect_results())
        collector.schedule_collection()
    results.append(collector.collect_results())
    for (xs, pairs), got in zip(windows, results, strict=True):
        expected = reference()
        feed(expected, xs, pairs)
        assert_same(got, python(expected.compute()), rtol=1e-6, atol=1e-6)
    assert live["sum"].update_count == 0  # everything went into windows


@pytest.mark.parametrize("fake", [False, True], ids=["cpu-path", "fake-stream-path"])
def test_pytree_mirrors_metric_collection_and_dict(fake):
    ops = FakeStreamOps() if fake else None
    # a single Metric: a Python scalar
    metric = ta.MeanMetric()
    single = AsyncMetricCollector(metric, stream_ops=ops)
    single.bind()
    metric.update(torch.tensor([1.0, 2.0]))
    single.schedule_collection()
    assert single.collect_results() == 1.5
    # a collection with a prefix: its compute() keys; a non-scalar result: nested lists of floats
    members = {"cat": ta.CatMetric(), "sum": ta.SumMetric()}
    if MulticlassAccuracy is not None:
        members["per_class"] = MulticlassAccuracy(num_classes=3, average=None)
    coll = ta.MetricCollection(members, prefix="train/")
    # a dict: the same keys, a collection inside gives its dict
    tree = {"train": coll, "loss": ta.SumMetric()}
    collector = AsyncMetricCollector(tree, stream_ops=ops)
    collector.bind()
    coll["cat"].update(torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
    coll["sum"].update(torch.tensor(2.0))
    if MulticlassAccuracy is not None:
        coll["per_class"].update(torch.tensor([0, 1, 2, 2]), torch.tensor([0, 1, 1, 2]))
    tree["loss"].update(torch.tensor(7.0))
    collector.schedule_collection()
    got = collector.collect_results()
    expected = {"train": {"train/cat": [[1.0, 2.0], [3.0, 4.0]], "train/sum": 2.0}, "loss": 7.0}
    if MulticlassAccuracy is not None:
        expected["train"]["train/per_class"] = [1.0, 0.5, 1.0]
    assert got == expected
    assert isinstance(got["loss"], float)


class _Typed(Metric):
    """Returns a bool, an int vector and a float in a named tuple: the PyTree keeps types and structure."""

    full_state_update = False

    def __init__(self) -> None:
        super().__init__()
        self.add_state("count", torch.zeros((), dtype=torch.int64), dist_reduce_fx="sum")
        self.add_state("hist", torch.zeros(3, dtype=torch.int64), dist_reduce_fx="sum")

    def update(self, x: torch.Tensor) -> None:
        self.count += x.numel()
        self.hist += torch.stack([(x == i).sum() for i in range(3)])

    def compute(self) -> Any:
        return torch.return_types.aminmax((self.count > 2, self.hist)), {"share": self.hist.float() / self.count}


@pytest.mark.parametrize("fake", [False, True], ids=["cpu-path", "fake-stream-path"])
def test_pytree_keeps_python_types_and_tuples(fake):
    metric = _Typed()
    collector = AsyncMetricCollector(metric, stream_ops=FakeStreamOps() if fake else None)
    collector.bind()
    metric.update(torch.tensor([0, 2, 2, 1]))
    collector.schedule_collection()
    got = collector.collect_results()
    flag, hist = got[0]
    assert flag is True
    assert hist == [1, 1, 2]
    assert type(got[0]) is torch.return_types.aminmax
    assert got[1] == {"share": [0.25, 0.25, 0.5]}


def test_plain_torchmetrics_metrics_work_too():
    live = aggregators(torchmetrics)
    collector = AsyncMetricCollector(live)
    collector.bind()
    xs = values(3, 5)
    feed(live, xs)
    collector.schedule_collection()
    expected = aggregators(torchmetrics)
    feed(expected, xs)
    assert_same(
        collector.collect_results(), {key: python(m.compute()) for key, m in expected.items()}, rtol=1e-6, atol=1e-6
    )


@needs_classification
def test_compute_groups_of_the_live_collection():
    classes = torchmetrics.classification
    live = torchmetrics.MetricCollection(
        {"p": classes.MulticlassPrecision(num_classes=4), "r": classes.MulticlassRecall(num_classes=4)}
    )
    collector = AsyncMetricCollector(live)
    collector.bind()
    for window in range(3):
        pairs = labels(3, 10 + window)
        for preds, target in pairs:
            live.update(preds, target)
        assert live.compute_groups == {0: ["p", "r"]}
        collector.schedule_collection()
        expected = torchmetrics.MetricCollection(
            {"p": classes.MulticlassPrecision(num_classes=4), "r": classes.MulticlassRecall(num_classes=4)}
        )
        for preds, target in pairs:
            expected.update(preds, target)
        assert_same(collector.collect_results(), python(expected.compute()), rtol=1e-6, atol=1e-6)


def test_window_without_updates_warns_as_compute_does():
    collector = AsyncMetricCollector(ta.SumMetric())
    collector.bind()
    collector.schedule_collection()
    with pytest.warns(UserWarning, match="was called before the ``update`` method"):
        assert collector.collect_results() == 0.0


# --------------------------------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------------------------------


def test_lifecycle_errors():
    metric = ta.SumMetric()
    collector = AsyncMetricCollector(metric)
    with pytest.raises(RuntimeError, match=r"not bound: call bind\(\) before schedule_collection\(\)"):
        collector.schedule_collection()
    with pytest.raises(RuntimeError, match=r"not bound: call bind\(\) before collect_results\(\)"):
        collector.collect_results()
    collector.bind()
    with pytest.raises(RuntimeError, match="already bound"):
        collector.bind()
    with pytest.raises(RuntimeError, match=r"nothing scheduled: call schedule_collection\(\) first"):
        collector.collect_results()
    metric.update(torch.tensor(1.0))
    collector.schedule_collection()
    metric.update(torch.tensor(2.0))
    assert collector.collect_results() == 1.0
    collector.unbind()
    with pytest.raises(RuntimeError, match="not bound"):
        collector.schedule_collection()
    collector.bind()
    collector.schedule_collection()
    assert collector.collect_results() == 2.0


@pytest.mark.parametrize("fake", [False, True], ids=["cpu-path", "fake-stream-path"])
def test_scheduling_again_without_collecting_drops_the_window(fake):
    """A rank that does not log: each schedule_collection() drops the window before; the next collect gets the last."""
    live = ta.MetricCollection(
        {"sum": ta.SumMetric(), "cat": ta.CatMetric(), "bad": ta.SumMetric(nan_strategy="error")}
    )
    collector = AsyncMetricCollector(live, stream_ops=FakeStreamOps() if fake else None)
    collector.bind()
    reference = torchmetrics.MetricCollection({"sum": torchmetrics.SumMetric(), "cat": torchmetrics.CatMetric()})
    live["bad"].update(torch.tensor(math.nan))  # a deferred error in a dropped window is not raised
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "bad" sees no update after the first window (compute() runs where it runs)
        for window in range(3):
            batch = torch.arange(window + 2.0)
            live["sum"].update(batch)
            live["cat"].update(batch)
            collector.schedule_collection()
            assert collector.is_scheduled
        results = collector.collect_results()
    reference.update(batch)
    assert_same(results, {"bad": 0.0, **python(reference.compute())}, rtol=1e-6, atol=1e-6)
    assert not collector.is_scheduled
    live["sum"].update(torch.tensor(5.0))
    collector.schedule_collection()
    collector.unbind()  # drops the window in flight too
    assert not collector.is_scheduled
    collector.bind()
    live["sum"].update(torch.tensor(7.0))
    collector.schedule_collection()
    assert collector.collect_results()["sum"] == 7.0


@pytest.mark.parametrize("bad", [[ta.SumMetric()], {}, {"a": [ta.SumMetric()]}, torch.nn.Linear(1, 1)])
def test_rejects_other_structures(bad):
    with pytest.raises(TypeError, match="torchmetrics Metric"):
        AsyncMetricCollector(bad)


class _Failing(ta.SumMetric):
    fail = True

    def compute(self) -> Any:
        if self.fail:
            raise ValueError("compute failed")
        return super().compute()


@pytest.mark.parametrize("fake", [False, True], ids=["cpu-path", "fake-stream-path"])
def test_compute_exception_is_raised_at_collect_and_ends_the_window(monkeypatch, fake):
    live = ta.MetricCollection({"a": ta.SumMetric(), "b": _Failing()})
    collector = AsyncMetricCollector(live, stream_ops=FakeStreamOps() if fake else None)
    collector.bind()
    live.update(torch.tensor(1.0))
    collector.schedule_collection()  # on the stream path compute ran here: its error waits for collect
    with pytest.raises(ValueError, match="compute failed"):
        collector.collect_results()
    with pytest.raises(RuntimeError, match="nothing scheduled"):
        collector.collect_results()
    monkeypatch.setattr(_Failing, "fail", False)  # the next window works
    live.update(torch.tensor(3.0))
    collector.schedule_collection()
    assert collector.collect_results() == {"a": 3.0, "b": 3.0}


# --------------------------------------------------------------------------------------------------------------------
# Deferred errors
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fake", [False, True], ids=["cpu-path", "fake-stream-path"])
def test_deferred_nan_error_and_warning_are_raised_at_collect(fake):
    live = ta.MetricCollection({"a": ta.SumMetric(nan_strategy="warn"), "b": ta.MeanMetric(nan_strategy="error")})
    collector = AsyncMetricCollector(live, stream_ops=FakeStreamOps() if fake else None)
    collector.bind()
    live.update(torch.tensor([1.0, math.nan]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing is raised or warned before collect
        collector.schedule_collection()
    with (
        pytest.warns(UserWarning, match=f"^{NAN_WARNING}{FIRST_UPDATE}"),
        pytest.raises(RuntimeError, match=f"^{NAN_ERROR}{FIRST_UPDATE}"),
    ):
        collector.collect_results()
    # the next window is clean: the live flags were reset at schedule
    live.update(torch.tensor([2.0]))
    collector.schedule_collection()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert collector.collect_results() == {"a": 2.0, "b": 2.0}


@pytest.mark.parametrize("fake", [False, True], ids=["cpu-path", "fake-stream-path"])
def test_deferred_warning_alone_returns_the_values(fake):
    metric = ta.MeanMetric(nan_strategy="warn")
    collector = AsyncMetricCollector(metric, stream_ops=FakeStreamOps() if fake else None)
    collector.bind()
    metric.update(torch.tensor([1.0, math.nan, 3.0]))
    collector.schedule_collection()
    with pytest.warns(UserWarning, match=f"^{NAN_WARNING}{FIRST_UPDATE}"):
        assert collector.collect_results() == 2.0


@needs_classification
@pytest.mark.parametrize("fake", [False, True], ids=["cpu-path", "fake-stream-path"])
def test_deferred_value_check_is_raised_at_collect_as_compute_raises_it(fake):
    metric = MulticlassAccuracy(num_classes=3)
    collector = AsyncMetricCollector(metric, stream_ops=FakeStreamOps() if fake else None)
    collector.bind()
    preds, target = torch.tensor([0, 1, 2, 0]), torch.tensor([0, 1, 2, 5])
    metric.update(preds, target)
    collector.schedule_collection()
    # the message compute() raises for these updates (the deferred form of torchmetrics' value check)
    direct = MulticlassAccuracy(num_classes=3)
    direct.update(preds, target)
    with pytest.raises(RuntimeError) as computed:
        direct.compute()
    assert str(computed.value).startswith("Detected more unique values in `target` than expected.")
    with pytest.raises(RuntimeError) as collected:
        collector.collect_results()
    assert str(collected.value) == str(computed.value)


# --------------------------------------------------------------------------------------------------------------------
# Host syncs and buffers
# --------------------------------------------------------------------------------------------------------------------


def test_schedule_collection_has_no_host_sync():
    live = collection()
    collector = AsyncMetricCollector(live)
    collector.bind()
    for cycle in range(2):
        feed(live, values(2, cycle), labels(2, cycle))
        with no_host_sync():
            collector.schedule_collection()
        collector.collect_results()


def test_schedule_collection_on_the_stream_path_has_no_host_sync():
    live = collection()
    collector = AsyncMetricCollector(live, stream_ops=FakeStreamOps())
    collector.bind()
    feed(live, values(2, 0), labels(2, 0))
    with no_host_sync():  # snapshot, reset, sync, compute (flags unread) and the host copies are all enqueued
        collector.schedule_collection()
    collector.collect_results()


@pytest.mark.parametrize("fake", [False, True], ids=["cpu-path", "fake-stream-path"])
def test_collect_results_reads_the_device_once_per_log(fake):
    # Results of several dtypes (float means, int64 stat scores) and every member's deferred flags: one read.
    live = collection()
    if MulticlassAccuracy is not None:
        live.add_metrics({"stats": ta.classification.MulticlassStatScores(num_classes=4, average=None)})
    live.add_metrics({"strict": ta.MeanMetric(nan_strategy="error")})
    collector = AsyncMetricCollector(live, stream_ops=FakeStreamOps() if fake else None)
    collector.bind()
    expected = reference()
    if MulticlassAccuracy is not None:
        expected.add_metrics({"stats": torchmetrics.classification.MulticlassStatScores(num_classes=4, average=None)})
    expected.add_metrics({"strict": torchmetrics.MeanMetric(nan_strategy="error")})
    for cycle in range(2):
        feed(live, values(3, cycle), labels(2, cycle))
        feed(expected, values(3, cycle), labels(2, cycle))
        collector.schedule_collection()
        with count_host_syncs() as syncs:
            got = collector.collect_results()
        assert syncs.total == 1, syncs.by_op
        assert_same(got, python(expected.compute()), rtol=1e-6, atol=1e-6)
        expected.reset()


def test_the_transfer_gives_torchs_python_values_for_every_dtype():
    tensors = [
        torch.tensor(1.5),
        torch.tensor([1, -2], dtype=torch.int64),
        torch.tensor([[True, False]]),
        torch.tensor([0.1, 3.0], dtype=torch.bfloat16),
        torch.tensor(2.5, dtype=torch.float16),
        torch.tensor([1 + 2j]),
        torch.tensor([255, 7], dtype=torch.uint8),
        torch.zeros(0, 3),
        torch.tensor([1e300], dtype=torch.float64),
        torch.tensor([(1 << 62) - 3]),  # a violation code: exact, not rounded through a float
        torch.arange(6, dtype=torch.float32).reshape(2, 3).t(),  # not contiguous
    ]
    for ops in (None, FakeStreamOps()):
        with count_host_syncs() as syncs:
            transfer = collector_module._Transfer(tensors, ops)
            got = transfer.values()
        assert syncs.total == 1
        expected = [tensor.tolist() for tensor in tensors]
        assert got == expected
        assert [type(v) for v in got] == [type(v) for v in expected]


@pytest.mark.parametrize(
    ("nan_strategy", "fake", "at_schedule", "at_collect"),
    [
        ("warn", False, 0, 2),  # compute() removes NaNs (a data-dependent shape): one read, at collect on CPU
        ("warn", True, 1, 1),  # ... and at schedule on the stream path, where compute() runs
        ("ignore", True, 1, 1),
        ("error", True, 0, 1),
        ("disable", True, 0, 1),
        (0.0, True, 0, 1),
    ],
)
def test_host_syncs_of_schedule_and_collect_with_a_list_state(nan_strategy, fake, at_schedule, at_collect):
    # The documented exception to "no host sync at schedule time, one read at collect": CatMetric's default NaN
    # strategies compute a concatenation whose length depends on the data.
    metric = ta.CatMetric(nan_strategy=nan_strategy)
    collector = AsyncMetricCollector(metric, stream_ops=FakeStreamOps() if fake else None)
    collector.bind()
    for cycle in range(2):
        metric.update(torch.tensor([1.0, 2.0 + cycle]))
        with count_host_syncs() as scheduled:
            collector.schedule_collection()
        with count_host_syncs() as collected:
            assert collector.collect_results() == [1.0, 2.0 + cycle]
        assert (scheduled.total, collected.total) == (at_schedule, at_collect)


class _Work:
    def __init__(self, log: list[str]) -> None:
        self.log = log

    def wait(self) -> bool:
        self.log.append("wait")
        return True

    def is_completed(self) -> bool:
        return False


@pytest.mark.parametrize("fake", [False, True], ids=["cpu-path", "fake-stream-path"])
def test_a_failed_launch_drains_what_it_started_before_releasing(monkeypatch, fake):
    ops = FakeStreamOps() if fake else None
    live = ta.MetricCollection({"sum": ta.SumMetric(), "cat": ta.CatMetric()})
    collector = AsyncMetricCollector(live, stream_ops=ops)
    collector.bind()
    log: list[str] = []

    def failing_second_phase() -> list:
        log.append("launch")
        raise RuntimeError("gather failed")

    def started_sync(metrics: Any, process_group: Any = None, async_op: bool = False, plans: Any = None) -> Any:
        # the first phase is in flight (it reads the buffers) when the second one fails
        return collector_module.SyncHandle(lambda: None, [_Work(log)], failing_second_phase)

    monkeypatch.setattr(collector_module, "sync_metrics", started_sync)
    real_release = collector._release
    monkeypatch.setattr(collector, "_release", lambda: (log.append("release"), real_release()))
    live.update(torch.tensor([1.0, 2.0]))
    with pytest.raises(RuntimeError, match="gather failed"):
        collector.schedule_collection()
    if fake:
        # the current stream waits for everything the side stream was given, before the buffers are released
        record = next(call for call in reversed(ops.calls) if call[0] == "record_event")
        assert record[1] == "side"
        assert ops.calls[-1] == ("wait_event", "main", record[2])
        assert log[-1] == "release"
    else:
        assert log == ["launch", "wait", "release"]
    assert live["sum"].sum_value == 3.0  # the live metrics keep the window
    assert not collector.is_scheduled


def test_bind_rejects_metrics_on_several_devices():
    metrics = {"a": ta.SumMetric(), "b": ta.SumMetric().to("meta")}
    collector = AsyncMetricCollector(metrics)
    with pytest.raises(ValueError, match=r"several devices \(a: cpu, b: meta\)"):
        collector.bind()
    assert not collector.is_bound
    metrics["b"] = ta.SumMetric()
    collector = AsyncMetricCollector(metrics)
    collector.bind()  # one device: fine
    assert collector.is_bound


def test_schedule_and_collect_refuse_a_cuda_graph_capture(monkeypatch):
    metric = ta.SumMetric()
    collector = AsyncMetricCollector(metric)
    collector.bind()
    metric.update(torch.tensor(1.0))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    with pytest.raises(RuntimeError, match=r"schedule_collection\(\) cannot run inside a CUDA graph capture"):
        collector.schedule_collection()
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    collector.schedule_collection()
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    with pytest.raises(RuntimeError, match=r"collect_results\(\) cannot run inside a CUDA graph capture"):
        collector.collect_results()
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    assert collector.collect_results() == 1.0


class _CopyTargets(TorchDispatchMode):
    """The storages that in-place copies (``copy_``, ``_foreach_copy_``) write to, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.targets: list[int] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if func.overloadpacket in (torch.ops.aten.copy_, torch.ops.aten._foreach_copy_):
            target = args[0]
            for tensor in target if isinstance(target, (list, tuple)) else [target]:
                self.targets.append(tensor.untyped_storage().data_ptr())
        return func(*args, **(kwargs or {}))


def _live_storages(live: ta.MetricCollection) -> set[int]:
    return {
        state.untyped_storage().data_ptr()
        for metric in live.values()
        for state in metric.metric_state.values()
        if isinstance(state, torch.Tensor)
    }


@pytest.mark.parametrize("fake", [False, True], ids=["cpu-path", "fake-stream-path"])
def test_snapshot_buffers_are_not_reallocated(fake):
    # Seen from the op stream: the snapshot copies in place into the same storages every window (the live states'
    # own storages, written by the in-place reset, aside).
    live = collection()
    collector = AsyncMetricCollector(live, stream_ops=FakeStreamOps() if fake else None)
    collector.bind()
    windows = []
    for cycle in range(3):
        feed(live, values(2, cycle), labels(2, cycle))
        before = _live_storages(live)
        with _CopyTargets() as copies:
            collector.schedule_collection()
        windows.append(set(copies.targets) - before - _live_storages(live))
        collector.collect_results()
    assert len(windows[0]) >= 10  # a buffer for each tensor state
    assert windows[0] == windows[1] == windows[2]


def test_list_states_are_copied_into_the_window_before_the_reset():
    metric = ta.CatMetric()
    collector = AsyncMetricCollector(metric)
    collector.bind()
    first, second = torch.tensor([1.0, 2.0]), torch.tensor([3.0])
    metric.update(first)
    metric.update(second)
    elements = list(metric.value)
    collector.schedule_collection()
    assert metric.value == []  # reset in place
    window = collector.state_dict()["rank0"]["window"]["metric"]["states"]["value"]
    assert [piece.tolist() for piece in window] == [piece.tolist() for piece in elements]
    for piece in elements:
        piece.fill_(-1.0)  # the window holds copies, not the tensors update() was given
    metric.update(torch.tensor([9.0]))
    assert collector.collect_results() == [1.0, 2.0, 3.0]
    # Released: only the collector's own copy shows it (no public read of a collected window's memory).
    assert collector._shadow.slots[0].shadow.value == []


@pytest.mark.parametrize("fake", [False, True], ids=["cpu-path", "fake-stream-path"])
@pytest.mark.parametrize(
    "batches",
    [[[1.0, 2.0]], [[1.0], [2.0, 3.0]], [1.0, [2.0, 3.0]], [[[1.0, 2.0]], [[3.0, 4.0]]]],
    ids=["one", "same-trailing", "0-dim-and-1-d", "2-d"],
)
def test_a_closed_window_owns_its_list_states(fake, batches):
    # The tensors the user passed to update() are changed after the window closed: the window keeps its values.
    metric = ta.CatMetric()
    collector = AsyncMetricCollector(metric, stream_ops=FakeStreamOps() if fake else None)
    collector.bind()
    tensors = [torch.tensor(batch) for batch in batches]
    reference = torchmetrics.CatMetric()
    for tensor in tensors:
        metric.update(tensor)
        reference.update(tensor.clone())
    collector.schedule_collection()
    for tensor in tensors:
        tensor.mul_(100)
    assert collector.collect_results() == reference.compute().tolist()


# --------------------------------------------------------------------------------------------------------------------
# The accelerator path, with a fake stream
# --------------------------------------------------------------------------------------------------------------------


WINDOW_VALUES = {"metric.max": "max_value", "metric.sum": "sum_value"}


def test_stream_path_orders_snapshot_event_wait_sync_compute_copies(monkeypatch):
    ops = FakeStreamOps()
    live = ta.MetricCollection({"sum": ta.SumMetric(), "max": ta.MaxMetric(nan_strategy="error")})
    collector = AsyncMetricCollector(live, stream_ops=ops)
    collector.bind()
    assert ops.calls == [("new_stream",)]
    ops.calls.clear()

    def logged_sync(metrics: Any, process_group: Any = None, async_op: bool = False, plans: Any = None) -> Any:
        ops.calls.append(("sync", ops.current, async_op, process_group))
        return real_sync(metrics, process_group, async_op, plans=plans)

    real_sync = collector_module.sync_metrics
    monkeypatch.setattr(collector_module, "sync_metrics", logged_sync)
    copied_at_record = []

    def on_record(stream: Any) -> None:
        if stream == "main":
            copied_at_record.append(set(copies.targets))

    ops.on_record = on_record
    live.update(torch.tensor([2.0, 5.0]))
    before = _live_storages(live)
    with _CopyTargets() as copies:
        collector.schedule_collection("group")
    # the snapshot (every copy into the window's buffers, not into the live states) is enqueued before the event
    snapshot = set(copies.targets) - before - _live_storages(live)
    assert len(snapshot) >= 2
    assert len(copied_at_record) == 1
    assert snapshot <= copied_at_record[0]
    window = collector.state_dict()["rank0"]["window"]
    assert {name: float(window[name]["states"][state]) for name, state in WINDOW_VALUES.items()} == {
        "metric.max": 5.0,
        "metric.sum": 7.0,
    }
    names = ops.names()
    assert names[:4] == ["record_event", "wait_event", "enter", "sync"]
    ready = ops.calls[0][2]
    assert ops.calls[0][1] == "main"
    assert ops.calls[1] == ("wait_event", "side", ready)
    assert ops.calls[3] == ("sync", "side", True, "group")
    # every result and flag (float32 results, int64 violation codes) leaves in one byte-packed copy, on the side stream
    copies = [call for call in ops.calls if call[0] == "to_host"]
    assert [str(call[2]) for call in copies] == ["torch.uint8"]
    assert all(call[1] == "side" for call in copies)
    assert names[-2:] == ["record_event", "exit"]
    done = ops.calls[-2][2]
    assert ops.calls[-2][1] == "side"
    assert "synchronize" not in names  # schedule never waits
    ops.calls.clear()
    live.update(torch.tensor(100.0))  # next window
    assert collector.collect_results() == {"max": 5.0, "sum": 7.0}
    assert ops.calls == [("synchronize", done)]  # one host wait per collect, and nothing else


def test_stream_path_without_process_group_matches_cpu_path():
    results = []
    for ops in (None, FakeStreamOps()):
        live = collection()
        collector = AsyncMetricCollector(live, stream_ops=ops)
        collector.bind()
        feed(live, values(3, 7), labels(2, 7))
        collector.schedule_collection()
        results.append(collector.collect_results())
    assert results[0] == results[1]


# --------------------------------------------------------------------------------------------------------------------
# Checkpoints
# --------------------------------------------------------------------------------------------------------------------


def _checkpointed_collection() -> ta.MetricCollection:
    members = {"mean": ta.MeanMetric(), "max": ta.MaxMetric(), "cat": ta.CatMetric(nan_strategy="ignore")}
    if MulticlassAccuracy is not None:
        members["acc"] = MulticlassAccuracy(num_classes=4)
    return ta.MetricCollection(members)


def _step(live: Any, seed: int) -> None:
    feed(live, values(2, seed), labels(1, seed))


# Each script is a list of actions; a checkpoint is taken after ``cut`` actions.
_SCRIPT = ["update", "bind", "update", "schedule", "update", "collect", "update", "schedule", "update", "collect"]
_POINTS = {"not bound": 1, "bound": 2, "in flight": 5, "after collect": 6, "in flight again": 9}


def _run(collector: AsyncMetricCollector, live: Any, actions: list[str], seed: int) -> list[Any]:
    results = []
    for index, action in enumerate(actions):
        if action == "update":
            _step(live, seed + index)
        elif action == "bind":
            collector.bind()
        elif action == "schedule":
            collector.schedule_collection()
        else:
            results.append(collector.collect_results())
    return results


def _roundtrip(state: dict[str, Any]) -> dict[str, Any]:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


@pytest.mark.parametrize("point", list(_POINTS))
@pytest.mark.parametrize("fake", [False, True], ids=["cpu-path", "fake-stream-path"])
def test_state_dict_roundtrip_at_every_lifecycle_point(point, fake):
    cut = _POINTS[point]
    live = _checkpointed_collection()
    collector = AsyncMetricCollector(live, stream_ops=FakeStreamOps() if fake else None)
    before = _run(collector, live, _SCRIPT[:cut], seed=0)
    state = _roundtrip(collector.state_dict())
    assert state["rank0"]["in_flight"] is point.startswith("in flight")

    fresh_live = _checkpointed_collection()
    fresh = AsyncMetricCollector(fresh_live, stream_ops=FakeStreamOps() if fake else None)
    fresh.load_state_dict(state)
    rest = _SCRIPT[cut:]
    if collector.is_bound:
        fresh.bind()
    # the restored collector's own state_dict is the checkpoint (also while its window waits for bind/collect)
    assert_same(python(fresh.state_dict()), python(state), rtol=1e-6, atol=1e-6)

    after = _run(collector, live, rest, seed=100)
    restored = _run(fresh, fresh_live, rest, seed=100)
    assert restored == after
    # and the whole run equals one without a checkpoint
    reference_live = _checkpointed_collection()
    uninterrupted = AsyncMetricCollector(reference_live)
    expected = _run(uninterrupted, reference_live, _SCRIPT[:cut], seed=0)
    expected += _run(uninterrupted, reference_live, rest, seed=100)
    assert before + after == expected


def test_state_dict_holds_every_state_whatever_persistent_and_the_local_window():
    metric = ta.SumMetric()
    assert not any(metric._persistent.values())
    collector = AsyncMetricCollector(metric)
    collector.bind()
    metric.update(torch.tensor(2.0))
    collector.schedule_collection()
    metric.update(torch.tensor(5.0))
    state = collector.state_dict()
    assert state["rank0"]["in_flight"] is True
    assert state["rank0"]["metrics"]["metric"]["states"]["sum_value"] == 5.0
    assert state["rank0"]["metrics"]["metric"]["update_count"] == 1
    assert state["rank0"]["window"]["metric"]["states"]["sum_value"] == 2.0
    assert set(state["rank0"]["window"]["metric"]["states"]) == {"sum_value", "nan_seen"}
    assert collector.collect_results() == 2.0
    state = collector.state_dict()
    assert state["rank0"]["in_flight"] is False
    assert state["rank0"]["window"]["metric"]["states"]["sum_value"] == 0.0  # defaults: the same layout at every point


def test_a_loaded_window_starts_at_load_or_at_bind():
    metric = ta.SumMetric()
    saved = AsyncMetricCollector(metric)
    saved.bind()
    metric.update(torch.tensor(3.0))
    saved.schedule_collection()
    state = saved.state_dict()
    bound_ops = FakeStreamOps()
    bound = AsyncMetricCollector(ta.SumMetric(), stream_ops=bound_ops)
    bound.bind()
    bound_ops.calls.clear()
    bound.load_state_dict(state)
    assert bound.is_scheduled
    assert ("enter", "side") in bound_ops.calls  # launched by the load: collecting stays local
    unbound_ops = FakeStreamOps()
    unbound = AsyncMetricCollector(ta.SumMetric(), stream_ops=unbound_ops)
    unbound.load_state_dict(state)
    assert unbound.is_scheduled
    assert unbound_ops.calls == []  # no stream before bind(): nothing launched
    unbound.bind()
    assert ("enter", "side") in unbound_ops.calls
    assert bound.collect_results() == unbound.collect_results() == saved.collect_results() == 3.0


def test_load_while_in_flight_finishes_the_old_window_and_replaces_it():
    metric = ta.SumMetric()
    collector = AsyncMetricCollector(metric)
    collector.bind()
    metric.update(torch.tensor(1.0))
    collector.schedule_collection()
    other = AsyncMetricCollector(ta.SumMetric())
    state = other.state_dict()
    collector.load_state_dict(state)
    assert not collector.is_scheduled
    with pytest.raises(RuntimeError, match="nothing scheduled"):
        collector.collect_results()


def test_load_rejects_a_checkpoint_of_other_metrics():
    state = AsyncMetricCollector(ta.SumMetric()).state_dict()
    with pytest.raises(KeyError, match=r"no entry for metric 'metric\.a'"):
        AsyncMetricCollector(ta.MetricCollection({"a": ta.SumMetric()})).load_state_dict(state)


def test_distributed_checkpoint_save_and_load(tmp_path):
    dcp = pytest.importorskip("torch.distributed.checkpoint")
    live = ta.MetricCollection(aggregators())
    collector = AsyncMetricCollector(live)
    collector.bind()
    feed(live, values(2, 1))
    collector.schedule_collection()
    feed(live, values(1, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # DCP warns that it runs without a process group
        dcp.save({"collector": collector}, checkpoint_id=str(tmp_path))
        fresh_live = ta.MetricCollection(aggregators())
        fresh = AsyncMetricCollector(fresh_live)
        fresh.bind()
        dcp.load({"collector": fresh}, checkpoint_id=str(tmp_path))
    assert fresh.collect_results() == collector.collect_results()
    fresh.schedule_collection()
    collector.schedule_collection()
    assert fresh.collect_results() == collector.collect_results()


class _Stream:
    """A side stream that can be watched with a weak reference."""


class _TrackedSum(ta.SumMetric):
    """Its instances, copies included (``copy.deepcopy`` creates them through ``__new__``), held weakly."""

    instances: list[weakref.ref] = []  # weak references (a Metric's hash reads its states: no WeakSet)

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        instance = super().__new__(cls)
        cls.instances.append(weakref.ref(instance))
        return instance


def _alive() -> int:
    gc.collect()  # the collector's copy holds reference cycles (its hooked compute)
    return sum(ref() is not None for ref in _TrackedSum.instances)


def test_unbind_releases_the_buffers_and_the_stream():
    streams: list[weakref.ref] = []

    class Ops(FakeStreamOps):
        def new_stream(self) -> Any:
            super().new_stream()
            stream = _Stream()
            streams.append(weakref.ref(stream))
            return stream

    metric = _TrackedSum()
    collector = AsyncMetricCollector(metric, stream_ops=Ops())
    before = _alive()
    collector.bind()
    assert _alive() == before + 1  # the collector's copy of the metric, holding its buffers
    assert streams[0]() is not None
    collector.unbind()
    assert _alive() == before
    assert streams[0]() is None


def test_the_live_metric_keeps_its_own_compute_and_sync():
    metric = ta.SumMetric(nan_strategy="error")
    collector = AsyncMetricCollector(metric)
    compute = vars(metric)["compute"]  # torchmetrics' wrapped compute
    collector.bind()
    assert vars(metric)["compute"] is compute  # the collector hooks its own copy, not the user's metric
    assert metric._to_sync  # torchmetrics' own setting: the live metric still syncs in its compute()
    metric.update(torch.tensor(math.nan))
    with pytest.raises(RuntimeError, match=NAN_ERROR):  # the deferred-raise hook is on the shadow only
        metric.compute()


def _running() -> tuple[ta.MetricCollection, torchmetrics.MetricCollection]:
    ours = ta.MetricCollection({"running": ta.RunningMean(window=2), "sum": ta.SumMetric()})
    theirs = torchmetrics.MetricCollection(
        {"running": torchmetrics.RunningMean(window=2), "sum": torchmetrics.SumMetric()}
    )
    return ours, theirs


def test_wrapper_metrics_run_their_own_compute_and_say_so(monkeypatch):
    monkeypatch.setattr(window_module, "_ANNOUNCED", set())
    live, _ = _running()
    collector = AsyncMetricCollector(live)
    with pytest.warns(UserWarning, match="RunningMean has its own compute"):
        collector.bind()
    for xs in ([1.0, 2.0, 3.0], [10.0]):
        for x in xs:
            live.update(torch.tensor(x))
        collector.schedule_collection()
        _, expected = _running()
        for x in xs:
            expected.update(torch.tensor(x))
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the window's position is in the snapshot: no "compute before update"
            assert_same(collector.collect_results(), python(expected.compute()), rtol=1e-6, atol=1e-6)


def test_running_window_position_survives_a_checkpoint():
    live, _ = _running()
    collector = AsyncMetricCollector(live)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        collector.bind()
    for x in (1.0, 2.0, 3.0):
        live.update(torch.tensor(x))
    state = _roundtrip(collector.state_dict())
    assert state["rank0"]["metrics"]["metric.running"]["counters"] == {"_num_vals_seen": 3}
    fresh_live, _ = _running()
    fresh = AsyncMetricCollector(fresh_live)
    fresh.load_state_dict(state)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fresh.bind()
    results = []
    for metrics, owner in ((live, collector), (fresh_live, fresh)):
        metrics.update(torch.tensor(7.0))  # overwrites the oldest slot: (3 + 7) / 2 only if the position was kept
        owner.schedule_collection()
        results.append(owner.collect_results())
    assert results[0] == results[1] == {"running": 5.0, "sum": 13.0}


class _CountingSum(ta.SumMetric):
    computes = 0

    def compute(self) -> Any:
        type(self).computes += 1
        return super().compute()


def test_the_same_metric_under_two_keys(monkeypatch):
    monkeypatch.setattr(_CountingSum, "computes", 0)
    metric = _CountingSum()
    collector = AsyncMetricCollector({"a": metric, "b": metric})
    collector.bind()
    metric.update(torch.tensor(2.0))
    collector.schedule_collection()
    assert list(collector.state_dict()["rank0"]["window"]) == ["a"]  # one window entry: snapshotted once
    assert collector.collect_results() == {"a": 2.0, "b": 2.0}
    assert _CountingSum.computes == 1
