"""accelerate() and patch() with torchmetrics' wrappers (issue 13, point 4): the metrics a wrapper holds are
accelerated, the wrapper stays torchmetrics' own, and every value equals plain torchmetrics'."""

import copy
import importlib
import pickle
import re
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torchmetrics
from torchmetrics import wrappers
from torchmetrics.classification import BinaryAccuracy, MulticlassAccuracy

import torchmetrics_async as ta
from tests.parity import assert_same
from torchmetrics_async.metric import SyncFreeMixin
from torchmetrics_async.registry import registry
from torchmetrics_async.testing import count_host_syncs


def _binary(n: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.rand(n), torch.randint(0, 2, (n,))


def _multiclass(n: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(n, 3).softmax(-1), torch.randint(0, 3, (n,))


def _two_outputs(n: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.rand(n, 2), torch.randint(0, 2, (n, 2))


def _tasks(n: int = 8) -> tuple[dict, dict]:
    (pa, ta_), (pb, tb) = _binary(n), _multiclass(n)
    return {"a": pa, "b": pb}, {"a": ta_, "b": tb}


# name -> (builder, batch maker); builders look names up at call time (patch() rebinds them).
WRAPPERS: dict[str, tuple[Callable[[], Any], Callable[[], tuple]]] = {
    "MinMaxMetric": (lambda: wrappers.MinMaxMetric(torchmetrics.classification.BinaryAccuracy()), _binary),
    "ClasswiseWrapper": (
        lambda: wrappers.ClasswiseWrapper(torchmetrics.classification.MulticlassAccuracy(num_classes=3, average=None)),
        _multiclass,
    ),
    "ClasswiseWrapper-labels": (
        lambda: wrappers.ClasswiseWrapper(
            torchmetrics.classification.MulticlassAccuracy(num_classes=3, average=None), labels=["x", "y", "z"]
        ),
        _multiclass,
    ),
    "MultioutputWrapper": (
        lambda: wrappers.MultioutputWrapper(torchmetrics.classification.BinaryAccuracy(), num_outputs=2),
        _two_outputs,
    ),
    "BootStrapper": (
        lambda: wrappers.BootStrapper(
            torchmetrics.classification.BinaryAccuracy(), num_bootstraps=3, sampling_strategy="multinomial"
        ),
        _binary,
    ),
    "BootStrapper-poisson": (
        lambda: wrappers.BootStrapper(torchmetrics.classification.BinaryAccuracy(), num_bootstraps=3),
        _binary,
    ),
    "MultitaskWrapper": (
        lambda: wrappers.MultitaskWrapper(
            {
                "a": torchmetrics.classification.BinaryAccuracy(),
                "b": torchmetrics.classification.MulticlassAccuracy(num_classes=3),
            }
        ),
        _tasks,
    ),
    "MultitaskWrapper-collection": (
        lambda: wrappers.MultitaskWrapper(
            {
                "a": torchmetrics.MetricCollection([torchmetrics.classification.BinaryAccuracy()]),
                "b": torchmetrics.classification.MulticlassAccuracy(num_classes=3),
            }
        ),
        _tasks,
    ),
    "BinaryTargetTransformer": (
        lambda: wrappers.BinaryTargetTransformer(torchmetrics.classification.BinaryAccuracy(), threshold=0),
        lambda: (torch.rand(8), torch.randint(0, 3, (8,))),
    ),
    "MultitaskWrapper-of-MinMaxMetric": (
        lambda: wrappers.MultitaskWrapper({"a": wrappers.MinMaxMetric(torchmetrics.classification.BinaryAccuracy())}),
        lambda: ({"a": torch.rand(8)}, {"a": torch.randint(0, 2, (8,))}),
    ),
}


def _inner_metrics(wrapper: torch.nn.Module) -> list:
    """The leaf metrics a wrapper holds (not wrappers or collections)."""
    leaves = (BinaryAccuracy, MulticlassAccuracy)
    return [m for m in wrapper.modules() if isinstance(m, leaves)]


def _run(wrapper: Any, steps: list[tuple], seed: int) -> list:
    """update/forward/compute over the steps, a reset, and again: everything the user reads."""
    out = []
    torch.manual_seed(seed)  # BootStrapper samples with torch's generator
    for i, (preds, target) in enumerate(steps):
        if i % 2:
            out.append(wrapper(preds, target))
        else:
            wrapper.update(preds, target)
        out.append(wrapper.compute())
    wrapper.reset()
    preds, target = steps[0]
    wrapper.update(preds, target)
    out.append(wrapper.compute())
    return out


# Wrappers that still sync after accelerate() (their held metrics are accelerated): one warning names the cause.
SYNCING = {"MultioutputWrapper", "BootStrapper-poisson"}


def _accelerated_type(name: str, ref: Any) -> type:
    """The wrapper's class after accelerate(): torchmetrics' own, unless it is accelerated itself (MinMaxMetric)."""
    return type(ref) if name in SYNCING else registry().get(type(ref), type(ref))


@pytest.mark.parametrize("name", list(WRAPPERS))
def test_accelerated_wrapper_equals_torchmetrics(name: str) -> None:
    build, make = WRAPPERS[name]
    torch.manual_seed(0)
    steps = [make() for _ in range(4)]
    ref, ours = build(), build()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")  # every inner metric here is accelerable: a warning only for a syncing wrapper
        assert ta.accelerate(ours) is ours
    warned = [str(w.message).split(":")[0] for w in record]
    assert warned == ([f"torchmetrics_async cannot accelerate {type(ref).__name__}"] if name in SYNCING else [])
    assert type(ours) is _accelerated_type(name, ref)
    assert isinstance(ours, SyncFreeMixin) is (type(ours) is not type(ref))
    inner = _inner_metrics(ours)
    assert inner
    assert all(isinstance(m, SyncFreeMixin) for m in inner)
    expected = _run(ref, steps, seed=1)
    got = _run(ours, steps, seed=1)
    torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("name", list(WRAPPERS))
def test_wrappers_built_under_patch_hold_accelerated_metrics(name: str) -> None:
    build, make = WRAPPERS[name]
    torch.manual_seed(0)
    steps = [make() for _ in range(4)]
    ref = build()
    with ta.patch(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a syncing wrapper's warning (tests below)
        ours = build()
    assert type(ours) is _accelerated_type(name, ref)
    inner = _inner_metrics(ours)
    assert inner
    assert all(isinstance(m, SyncFreeMixin) for m in inner)
    torch.testing.assert_close(_run(ours, steps, seed=1), _run(ref, steps, seed=1))


def test_metric_tracker() -> None:
    torch.manual_seed(0)
    steps = [[_binary() for _ in range(2)] for _ in range(3)]
    ref = wrappers.MetricTracker(BinaryAccuracy())
    ours = wrappers.MetricTracker(BinaryAccuracy())
    ref.increment()
    ours.increment()
    ta.accelerate(ours)  # after an increment: the base and the tracked copy are both converted
    assert type(ours) is wrappers.MetricTracker
    results = []
    for tracker in (ref, ours):
        values = []
        for i, epoch in enumerate(steps):
            if i:
                tracker.increment()
            for preds, target in epoch:
                values.append(tracker(preds, target))
            values.append(tracker.compute())
        values.append(tracker.compute_all())
        values.append(tracker.best_metric(return_step=True))
        results.append(values)
    assert all(isinstance(m, SyncFreeMixin) for m in ours)  # every tracked copy, later increments included
    assert isinstance(ours._base_metric, SyncFreeMixin)
    torch.testing.assert_close(results[1], results[0])


# Base metrics for the generic Running: (builder, batch maker). The builders look torchmetrics' names up when called,
# so under patch() they build the accelerated classes.
RUNNING_BASES: dict[str, tuple[Callable[[], Any], Callable[[], tuple]]] = {
    "MeanMetric": (lambda: torchmetrics.MeanMetric(), lambda: (torch.randn(6),)),  # noqa: PLW0108
    "SumMetric": (lambda: torchmetrics.SumMetric(), lambda: (torch.randn(6),)),  # noqa: PLW0108
    "MulticlassAccuracy": (
        lambda: torchmetrics.classification.MulticlassAccuracy(num_classes=3),
        lambda: (torch.randn(6, 3), torch.randint(0, 3, (6,))),
    ),
    "MeanSquaredError": (lambda: torchmetrics.MeanSquaredError(), lambda: (torch.randn(6), torch.randn(6))),  # noqa: PLW0108
}


def _running_steps(running: Any, steps: list[tuple]) -> list:
    """update/forward/compute through two window lengths, a reset, and again."""
    out = []
    for i, batch in enumerate(steps):
        out.append(running(*batch) if i % 2 else running.update(*batch))
        out.append(running.compute())
    running.reset()
    running.update(*steps[0])
    out.append(running.compute())
    return out


def _generic_running_three_ways(name: str) -> tuple[Any, list[Any]]:
    """torchmetrics' Running over torchmetrics' base; ours built directly, under patch() and by accelerate()."""
    build, _ = RUNNING_BASES[name]
    with ta.patch():
        direct = ta.wrappers.Running(build(), window=3)
        patched = wrappers.Running(build(), window=3)
    converted = ta.accelerate(wrappers.Running(build(), window=3))
    return wrappers.Running(build(), window=3), [direct, patched, converted]


@pytest.mark.parametrize("name", list(RUNNING_BASES))
def test_generic_running_around_an_accelerated_metric_equals_torchmetrics(name: str) -> None:
    """Issue 19 item 14: every path gives the accelerated Running, with torchmetrics' values, states and pickles."""
    torch.manual_seed(0)
    steps = [RUNNING_BASES[name][1]() for _ in range(5)]
    reference, ours = _generic_running_three_ways(name)
    expected = _running_steps(reference, steps)
    for running in ours:
        assert type(running) is ta.wrappers.Running
        assert isinstance(running.base_metric, SyncFreeMixin)
        torch.testing.assert_close(_running_steps(running, steps), expected)
    for running in (reference, *ours):
        running.persistent(True)
        for batch in steps[1:]:
            running.update(*batch)
    saved = ours[0].state_dict()
    assert {key for key in reference.state_dict()} <= set(saved)
    loaded = _generic_running_three_ways(name)[1][0]
    loaded.persistent(True)
    loaded.load_state_dict(saved)
    for other in (*ours, loaded, pickle.loads(pickle.dumps(ours[0])), copy.deepcopy(ours[1])):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a loaded window's count is torchmetrics' warning case, both sides
            torch.testing.assert_close(other.compute(), reference.compute())


@pytest.mark.parametrize("name", list(RUNNING_BASES))
def test_generic_running_update_and_forward_make_no_host_sync(name: str) -> None:
    build, make = RUNNING_BASES[name]
    running = ta.accelerate(wrappers.Running(build(), window=2))
    running.update(*make())
    running(*make())
    with count_host_syncs() as syncs:
        for _ in range(3):
            running.update(*make())
            running(*make())
    assert syncs.total == 0, syncs


def test_generic_running_around_an_unaccelerated_metric_is_left_unchanged() -> None:
    """A base that stays torchmetrics' keeps torchmetrics' Running (its window slots mirror that base's states)."""
    running = wrappers.Running(torchmetrics.text.CharErrorRate(), window=2)
    with pytest.warns(UserWarning, match="cannot accelerate") as record:
        ta.accelerate(running)
    cannot = "torchmetrics_async cannot accelerate"
    assert [str(w.message).split(":")[0] for w in record] == [f"{cannot} CharErrorRate", f"{cannot} Running"]
    assert type(running) is wrappers.Running
    assert type(running.base_metric) is torchmetrics.text.CharErrorRate
    with pytest.raises(TypeError, match="Running: its base metric CharErrorRate is not accelerated"):
        ta.accelerate(wrappers.Running(torchmetrics.text.CharErrorRate(), window=2), strict=True)
    with pytest.warns(UserWarning, match="torchmetrics' own Running is used"):
        fallback = ta.wrappers.Running(torchmetrics.text.CharErrorRate(), window=2)
    assert type(fallback) is wrappers.Running


@pytest.mark.parametrize("read", ["compute", "reset"])
def test_generic_running_keeps_an_error_that_has_left_the_window(read: str) -> None:
    """As RunningMean: the window's checks are the wrapper's since its last reset, raised by compute() or reset()."""
    running = ta.accelerate(wrappers.Running(torchmetrics.MeanMetric(nan_strategy="error"), window=2))
    for value in (1.0, float("nan"), 2.0, 3.0):  # at the last step the bad one has left the window
        running(torch.tensor(value))
    with pytest.raises(RuntimeError, match="Encountered `nan` values in tensor"):
        getattr(running, read)()
    running.reset()  # the error was reported: the window starts clean
    running(torch.tensor(4.0))
    torch.testing.assert_close(running.compute(), torch.tensor(4.0))


def test_wrapper_of_an_unaccelerated_metric_names_it() -> None:
    wrapper = wrappers.MinMaxMetric(torchmetrics.text.CharErrorRate())
    with pytest.warns(UserWarning, match="cannot accelerate CharErrorRate"):
        assert ta.accelerate(wrapper) is wrapper
    with pytest.raises(TypeError, match="CharErrorRate"):
        ta.accelerate(wrappers.MinMaxMetric(torchmetrics.text.CharErrorRate()), strict=True)


def test_generic_running_around_an_accelerated_metric_never_loses_an_error() -> None:
    """Issue 19 item 14, the limit: torchmetrics' own Running, logged per step (forward, then its reset), calls only
    the base's forward() and reset(), and its own reset() never reaches the base. A NaN error can only surface in the
    base's reset() inside that forward(): its one host read per step is what "never lost" costs there (torchmetrics
    raises in that same call). RunningMean/RunningSum keep the error window-long instead, sync-free."""
    running = wrappers.Running(ta.MeanMetric(nan_strategy="error"), window=2)
    raised = []
    for value in (1.0, float("nan"), 2.0, 3.0):  # at the last step the bad one has left the window
        try:
            running(torch.tensor(value))
        except RuntimeError as err:
            raised.append((value, str(err)))
    running.reset()  # torchmetrics' own: it does not reach the base, so nothing can be raised here
    assert len(raised) == 1, raised
    assert raised[0][0] != raised[0][0]  # raised by the bad (NaN) step itself, as torchmetrics raises it
    assert raised[0][1].startswith("Encountered `nan` values in tensor")
    reference = wrappers.Running(torchmetrics.MeanMetric(nan_strategy="error"), window=2)
    reference(torch.tensor(1.0))
    with pytest.raises(RuntimeError, match="Encountered `nan` values in tensor"):
        reference(torch.tensor(float("nan")))


# MinMaxMetric (issue 29 item 4): base builders (looked up at call time) and a batch maker each.
MINMAX_BASES: dict[str, tuple[Callable[[], Any], Callable[[torch.Generator], tuple]]] = {
    "SumMetric": (lambda: torchmetrics.SumMetric(), lambda g: (torch.randn(5, generator=g),)),  # noqa: PLW0108
    # a NaN batch: the value is NaN, which moves neither bound (the first one leaves them at +inf/-inf)
    "MeanMetric-nan": (
        lambda: torchmetrics.MeanMetric(nan_strategy="disable"),
        lambda g: (torch.where(torch.rand(5, generator=g) < 0.3, float("nan"), torch.randn(5, generator=g)),),
    ),
    "BinaryAccuracy": (
        lambda: torchmetrics.classification.BinaryAccuracy(),  # noqa: PLW0108 - looked up at call time (patch())
        lambda g: (torch.rand(6, generator=g), torch.randint(0, 2, (6,), generator=g)),
    ),
    "MeanSquaredError-float64": (
        lambda: torchmetrics.MeanSquaredError().double(),
        lambda g: (torch.randn(4, generator=g).double(), torch.randn(4, generator=g).double()),
    ),
}


def _wrapper_run(metric: Any, batches: list[tuple], keyword_batches: bool = False) -> list:
    """forward/update/compute in a mixed order (every third batch by keyword, if asked), a reset, and again."""
    out = []
    for i, batch in enumerate(batches):
        if i % 3 == 1:
            metric.update(*batch)
        elif keyword_batches and i % 3 == 2 and len(batch) == 2:
            out.append(metric(preds=batch[0], target=batch[1]))
        else:
            out.append(metric(*batch))
        if i % 2:
            out.append(metric.compute())
    metric.reset()  # MinMaxMetric keeps its bounds, as torchmetrics
    out.append(metric(*batches[0]))
    metric.update(*batches[1])
    out.append(metric.compute())
    return out


@pytest.mark.parametrize("name", list(MINMAX_BASES))
def test_minmax_equals_torchmetrics_bit_for_bit(name: str) -> None:
    build, make = MINMAX_BASES[name]
    generator = torch.Generator().manual_seed(29)
    batches = [make(generator) for _ in range(8)]
    with ta.patch():
        patched = wrappers.MinMaxMetric(build())
    ours = [ta.accelerate(wrappers.MinMaxMetric(build())), ta.wrappers.MinMaxMetric(build()), patched]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torchmetrics' compute-before-update warning, alike
        expected = _wrapper_run(wrappers.MinMaxMetric(build()), batches)
        for metric in ours:
            assert type(metric) is ta.wrappers.MinMaxMetric
            assert isinstance(metric._base_metric, SyncFreeMixin)
            assert_same(_wrapper_run(metric, batches), expected, exact=True)


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("name", list(MINMAX_BASES))
def test_minmax_update_and_forward_make_no_host_sync(name: str, device: str) -> None:
    build, make = MINMAX_BASES[name]
    generator = torch.Generator().manual_seed(0)
    metric = ta.accelerate(wrappers.MinMaxMetric(build())).to(device)
    batches = [tuple(x.to(device) for x in make(generator)) for _ in range(3)]
    with count_host_syncs() as syncs:
        for batch in batches:
            metric.update(*batch)
            metric(*batch)
    assert syncs.total == 0, syncs


def test_minmax_of_a_non_scalar_value_raises_torchmetrics_error() -> None:
    preds, target = torch.randn(4, 2), torch.randn(4, 2)
    theirs = wrappers.MinMaxMetric(torchmetrics.MeanSquaredError(num_outputs=2))
    ours = ta.accelerate(wrappers.MinMaxMetric(torchmetrics.MeanSquaredError(num_outputs=2)))
    for call in (lambda m: m(preds, target), lambda m: (m.update(preds, target), m.compute())):
        with pytest.raises(RuntimeError, match="should be a float or scalar tensor") as expected:
            call(theirs)
        with pytest.raises(RuntimeError) as got:
            call(ours)
        assert str(got.value) == str(expected.value)


@pytest.mark.parametrize("read", ["compute", "reset"])
def test_minmax_forward_keeps_the_base_error_for_compute_or_reset(read: str) -> None:
    """torchmetrics raises in forward(); ours gives a NaN batch value and raises it later, also after forward() has
    reset the base for the next batch (torchmetrics' full-state forward)."""
    with pytest.raises(RuntimeError, match="Encountered `nan`"):
        wrappers.MinMaxMetric(torchmetrics.MeanMetric(nan_strategy="error"))(torch.tensor(float("nan")))
    metric = ta.accelerate(wrappers.MinMaxMetric(torchmetrics.MeanMetric(nan_strategy="error")))
    assert torch.isnan(metric(torch.tensor(float("nan")))["raw"])
    metric(torch.tensor(1.0))  # the base is reset for this batch: the error stays
    with pytest.raises(RuntimeError, match="Encountered `nan`"):
        getattr(metric, read)()


def test_minmax_forward_of_a_batch_whose_nans_are_dropped_keeps_the_bounds() -> None:
    """Fuzz finding (seed 29): a "warn" check (NaNs dropped, torchmetrics warns) is no error: its batch value is
    torchmetrics' (NaN raw, bounds unchanged), not a violating batch's NaNs."""
    ours = ta.accelerate(wrappers.MinMaxMetric(torchmetrics.MeanMetric()))
    theirs = wrappers.MinMaxMetric(torchmetrics.MeanMetric())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for value in (float("nan"), 1.0, float("nan")):
            assert_same(ours(torch.tensor(value)), theirs(torch.tensor(value)), exact=True)


# BootStrapper (issue 29 item 4): (base builder, wrapper options, batch maker); builders look names up at call time.
BOOTSTRAP_CASES: dict[str, tuple[Callable[[], Any], dict, Callable[[torch.Generator], tuple]]] = {
    "BinaryAccuracy": (
        lambda: torchmetrics.classification.BinaryAccuracy(),  # noqa: PLW0108 - looked up at call time (patch())
        {},
        lambda g: (torch.rand(7, generator=g), torch.randint(0, 2, (7,), generator=g)),
    ),
    "MeanSquaredError-float64-quantile-raw": (
        lambda: torchmetrics.MeanSquaredError().double(),
        {"quantile": 0.25, "raw": True, "num_bootstraps": 4},
        lambda g: (torch.randn(5, generator=g).double(), torch.randn(5, generator=g).double()),
    ),
    # NaNs dropped with torchmetrics' warning: a "warn" check, not an error (the batch value is a number). The
    # accelerated MeanMetric itself sums the kept values with the NaNs as zeros: its last bit may differ from
    # torchmetrics' (the base alone, without a wrapper), so this case is compared to the usual tolerance.
    "MeanMetric-nan-dropped": (
        lambda: torchmetrics.MeanMetric(),  # noqa: PLW0108
        {"std": False},
        lambda g: (torch.where(torch.rand(6, generator=g) < 0.2, float("nan"), torch.randn(6, generator=g)),),
    ),
}


def _bootstrap(name: str) -> Any:
    build, options, _ = BOOTSTRAP_CASES[name]
    return wrappers.BootStrapper(build(), **{"num_bootstraps": 3, **options, "sampling_strategy": "multinomial"})


def _bootstrap_run(metric: Any, batches: list[tuple], seed: int) -> list:
    """:func:`_wrapper_run` (a keyword batch too) from one torch seed, then the generator's next draw."""
    torch.manual_seed(seed)  # both draw from torch's global generator
    return [*_wrapper_run(metric, batches, keyword_batches=True), torch.rand(3)]  # the same number of draws


@pytest.mark.parametrize("name", list(BOOTSTRAP_CASES))
def test_bootstrapper_multinomial_equals_torchmetrics_bit_for_bit(name: str) -> None:
    """The same draws in the same order (torchmetrics' own sampler), so the same values under the same seed."""
    generator = torch.Generator().manual_seed(29)
    batches = [BOOTSTRAP_CASES[name][2](generator) for _ in range(7)]
    with ta.patch():
        patched = _bootstrap(name)
    ours = [ta.accelerate(_bootstrap(name)), patched]
    with ta.patch():
        ours.append(ta.wrappers.BootStrapper(BOOTSTRAP_CASES[name][0](), sampling_strategy="multinomial"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torchmetrics' NaN warning, alike
        expected = _bootstrap_run(_bootstrap(name), batches, seed=3)
        for metric in ours[:2]:
            assert type(metric) is ta.wrappers.BootStrapper
            assert all(isinstance(copy, SyncFreeMixin) for copy in metric.metrics)
            assert_same(_bootstrap_run(metric, batches, seed=3), expected, exact="nan-dropped" not in name)
    assert type(ours[2]) is ta.wrappers.BootStrapper


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("name", list(BOOTSTRAP_CASES))
def test_bootstrapper_multinomial_update_and_forward_make_no_host_sync(name: str, device: str) -> None:
    generator = torch.Generator().manual_seed(0)
    metric = ta.accelerate(_bootstrap(name)).to(device)
    batches = [tuple(x.to(device) for x in BOOTSTRAP_CASES[name][2](generator)) for _ in range(3)]
    with count_host_syncs() as syncs:
        for batch in batches:
            metric.update(*batch)
            metric(*batch)
    assert syncs.total == 0, syncs


@pytest.mark.parametrize("read", ["compute", "reset"])
def test_bootstrapper_forward_keeps_the_copies_error_for_compute_or_reset(read: str) -> None:
    """torchmetrics raises in forward(); ours gives a NaN batch value and raises later, reading every copy's checks
    in one host read (also after forward() has reset the copies for the next batch)."""
    build = lambda: wrappers.BootStrapper(  # noqa: E731
        torchmetrics.MeanMetric(nan_strategy="error"), num_bootstraps=3, sampling_strategy="multinomial"
    )
    bad = torch.full((4,), float("nan"))
    with pytest.raises(RuntimeError, match="Encountered `nan`"):
        build()(bad)
    metric = ta.accelerate(build())
    assert all(torch.isnan(value) for value in metric(bad).values())
    metric(torch.ones(4))  # the copies are reset for this batch: the error stays
    with count_host_syncs() as syncs, pytest.raises(RuntimeError, match="Encountered `nan`"):
        getattr(metric, read)()
    assert syncs.total == 1, syncs.summary()


def _syncs_per_update_and_forward(metric: Any, batch: tuple) -> tuple[int, int]:
    metric.update(*batch)
    with count_host_syncs() as update:
        metric.update(*batch)
    with count_host_syncs() as forward:
        metric(*batch)
    return update.total, forward.total


def test_poisson_bootstrapper_stays_torchmetrics_with_one_warning_giving_the_measured_syncs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # torch's default: Poisson(1) validates its rate (a host read). torch.compile turns the default off for the whole
    # process (torch._dynamo), so a compile test earlier in the same worker would change the count.
    monkeypatch.setattr(torch.distributions.Distribution, "_validate_args", True)
    reason = ta.registry.SYNCING_ARGUMENTS[wrappers.BootStrapper][2]
    for build in (
        lambda: ta.accelerate(wrappers.BootStrapper(BinaryAccuracy(), num_bootstraps=3)),
        lambda: ta.wrappers.BootStrapper(BinaryAccuracy(), num_bootstraps=3),
    ):
        with pytest.warns(UserWarning, match="cannot accelerate BootStrapper") as record:
            metric = build()
        assert [str(w.message) for w in record] == [
            f"torchmetrics_async cannot accelerate BootStrapper: {reason}. It is left unchanged."
        ]
        assert type(metric) is wrappers.BootStrapper
        assert all(isinstance(copy, SyncFreeMixin) for copy in metric.metrics)
    with pytest.raises(TypeError, match="sampling_strategy='poisson'"):
        ta.accelerate(wrappers.BootStrapper(BinaryAccuracy(), num_bootstraps=3), strict=True)
    update, forward = _syncs_per_update_and_forward(metric, _binary())
    assert f"({update} host syncs per update() and {forward} per forward() measured with 3 bootstraps" in reason


def test_multioutput_wrapper_warns_once_giving_the_measured_syncs() -> None:
    reason = ta.registry.EXPLAINED[wrappers.MultioutputWrapper]
    with pytest.warns(UserWarning, match="cannot accelerate MultioutputWrapper") as record:
        metric = ta.accelerate(wrappers.MultioutputWrapper(BinaryAccuracy(), num_outputs=2))
    assert [str(w.message) for w in record] == [
        f"torchmetrics_async cannot accelerate MultioutputWrapper: {reason}. It is left unchanged."
    ]
    assert all(isinstance(copy, SyncFreeMixin) for copy in metric.metrics)
    masks = _syncs_per_update_and_forward(metric, _two_outputs())
    copies = ta.accelerate(wrappers.MultioutputWrapper(BinaryAccuracy(), num_outputs=2, remove_nans=False))
    copies = _syncs_per_update_and_forward(copies.to("meta"), tuple(x.to("meta") for x in _two_outputs()))
    assert masks[0] == masks[1]  # forward() as update()
    assert copies[0] == copies[1]
    assert f"({copies[0]} host syncs per update() measured with 2 outputs on the meta device" in reason
    assert f"({masks[0]} more on the CPU)" in reason
    importlib.import_module("torchmetrics_async.accelerate")._CANNOT.discard(wrappers.MultioutputWrapper)  # once each
    with (
        ta.patch(),
        pytest.warns(UserWarning, match=re.escape(f"patch() cannot accelerate MultioutputWrapper: {reason}")),
    ):
        wrappers.MultioutputWrapper(torchmetrics.classification.BinaryAccuracy(), num_outputs=2)


def test_a_users_bootstrapper_subclass_keeps_its_class_and_update_with_poisson() -> None:
    # torchmetrics' own test subclass, defined while patched (upstream's test_bootstrapping.py), records its draws.
    class Recording(ta.wrappers.BootStrapper):
        def update(self, *args: Any) -> None:
            self.out = len(args)
            super().update(*args)

    metric = Recording(BinaryAccuracy(), num_bootstraps=3, sampling_strategy="poisson")
    assert type(metric) is Recording
    metric.update(*_binary())
    assert metric.out == 2
