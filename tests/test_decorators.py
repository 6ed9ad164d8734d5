"""Class decorators for users' own metrics: ``suppress_nan_check``, ``scalar_to_tensor_updates``, ``sync_free``.

Expected values come from the undecorated class (torchmetrics' or the user's) fed the same inputs.
"""

import copy
import pickle
import warnings
from typing import Any

import pytest
import torch
import torchmetrics
from torch import Tensor
from torchmetrics import Metric
from torchmetrics.aggregation import BaseAggregator
from torchmetrics.classification import BinaryAccuracy

import torchmetrics_async as tma
from tests.parity import assert_same
from torchmetrics_async import scalar_to_tensor_updates, suppress_nan_check, sync_free
from torchmetrics_async.testing import no_host_sync

NAN_ERROR = "Encountered `nan` values in tensor"
NAN_STRATEGIES = ("error", "warn", "ignore", "disable", 0.5)
AGGREGATORS = ("MeanMetric", "SumMetric", "MaxMetric", "MinMetric", "CatMetric")


# ---------------------------------------------------------------------------------------------------------------------
# Users' metrics (module level so that instances pickle by reference)


class _WeightedSumBody:
    def __init__(self, nan_strategy: Any = "warn", **kwargs: Any) -> None:
        super().__init__("sum", torch.tensor(0.0), nan_strategy=nan_strategy, state_name="total", **kwargs)

    def update(self, value: Any, weight: Any = None) -> None:
        value, weight = self._cast_and_nan_check_input(value, weight)
        self.total += (value * weight).sum()


class WeightedSum(_WeightedSumBody, BaseAggregator):
    """A user's aggregator: the sum of value * weight."""


class _LargestBody:
    def __init__(self, nan_strategy: Any = "warn", **kwargs: Any) -> None:
        super().__init__("max", torch.tensor(-float("inf")), nan_strategy=nan_strategy, state_name="largest", **kwargs)

    def update(self, value: Any) -> None:
        value, _ = self._cast_and_nan_check_input(value)
        if value.numel():
            self.largest = torch.maximum(self.largest, value.max())


class Largest(_LargestBody, BaseAggregator):
    """A user's max aggregator: dropped NaNs must not win the max."""


class Collect(BaseAggregator):
    """A user's cat-state aggregator."""

    def __init__(self, nan_strategy: Any = "warn", **kwargs: Any) -> None:
        super().__init__("cat", [], nan_strategy=nan_strategy, state_name="items", **kwargs)

    def update(self, value: Any) -> None:
        value, _ = self._cast_and_nan_check_input(value)
        if value.numel():
            self.items.append(value)

    def compute(self) -> Tensor:
        return torch.cat(self.items) if self.items else torch.zeros(0)


class SquaredTotal(Metric):
    """A user's plain Metric whose update only accepts tensors (``value.square()``)."""

    full_state_update = False

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.add_state("total", torch.tensor(0.0), dist_reduce_fx="sum")

    def update(self, value: Tensor) -> None:
        self.total += value.square().sum()

    def compute(self) -> Tensor:
        return self.total


# `X = decorator(Y)`: Y stays reachable under its own name.
SyncFreeWeightedSum = sync_free(WeightedSum)
SyncFreeLargest = sync_free(Largest)
NoNanMeanMetric = suppress_nan_check(torchmetrics.MeanMetric)
ScalarMaxMetric = scalar_to_tensor_updates(torchmetrics.MaxMetric)
ScalarSquaredTotal = scalar_to_tensor_updates(SquaredTotal)
SyncFreeSquaredTotal = sync_free(SquaredTotal)


# `@decorator` on a module-level class: the name now refers to the decorated class.
@sync_free
class DecoratedWeightedSum(_WeightedSumBody, BaseAggregator):
    """The same user aggregator, decorated where it is defined."""


@suppress_nan_check
class DecoratedNoNanMean(torchmetrics.MeanMetric):
    """torchmetrics' mean without NaN checks, decorated where it is defined."""


@scalar_to_tensor_updates
class DecoratedScalarSquaredTotal(SquaredTotal):
    """A plain Metric taking Python numbers, decorated where it is defined."""


def clone(x: Any) -> Any:
    return x.clone() if isinstance(x, Tensor) else x


def batches(n: int, seed: int = 0, nan: bool = False) -> list[Tensor]:
    g = torch.Generator().manual_seed(seed)
    xs = [torch.randn(3, generator=g) for _ in range(n)]
    if nan:
        for x in xs[::2]:
            x[1] = float("nan")
    return xs


# ---------------------------------------------------------------------------------------------------------------------
# suppress_nan_check


@pytest.mark.parametrize("given", [{}, {"nan_strategy": "disable"}], ids=["default", "disable"])
@pytest.mark.parametrize("name", AGGREGATORS)
def test_suppress_nan_check_lets_nan_through(name: str, given: dict) -> None:
    cls = suppress_nan_check(getattr(torchmetrics, name))
    metric = cls(**given)
    ref = getattr(torchmetrics, name)(nan_strategy="disable")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no NaN error or warning, whatever the strategy says
        for x in batches(4, nan=True):
            metric.update(clone(x))
            ref.update(clone(x))
        value = metric.compute()
    assert torch.isnan(value).any()
    assert_same(value, ref.compute())


WEIGHTED_INPUTS = [
    (torch.tensor([1.0, 2.0, 4.0]), torch.tensor([3.0, 1.0, 0.5])),
    (torch.tensor([[1.0, 2.0], [3.0, 5.0]]), torch.tensor([[1.0, 4.0]])),
    (torch.tensor([1.0, 7.0]), 2.5),
    (3.0, 2),
    (torch.tensor(2.0), torch.tensor(5.0)),
]


@pytest.mark.parametrize("kind", ["update", "forward"])
def test_suppress_nan_check_keeps_user_weights(kind: str) -> None:
    metric = NoNanMeanMetric()
    ref = torchmetrics.MeanMetric(nan_strategy="ignore")  # keeps weights on NaN-free data
    dropping = torchmetrics.MeanMetric(nan_strategy="disable")  # torchmetrics' own path drops them (#3434)
    for value, weight in WEIGHTED_INPUTS:
        out = getattr(metric, kind)(clone(value), weight=clone(weight))
        expected = getattr(ref, kind)(clone(value), weight=clone(weight))
        dropping.update(clone(value), weight=clone(weight))
        if kind == "forward":
            assert_same(out, expected)
    assert_same(metric.compute(), ref.compute())
    assert not torch.allclose(metric.compute(), dropping.compute())  # the inputs really have non-trivial weights


def _docstring_example(metric: Any, device: str) -> None:
    """The module docstring's example, with its Python numbers (the article's migration path)."""
    metric.update(torch.tensor([1.0, 3.0], device=device), weight=torch.tensor([3.0, 1.0], device=device))
    metric.update(5.0, weight=2.0)  # Python numbers: no host-to-device copy
    metric.update(2)


@pytest.mark.parametrize("cls", [NoNanMeanMetric, DecoratedNoNanMean], ids=["X=suppress_nan_check(Mean)", "@"])
def test_suppress_nan_check_copies_no_python_number_to_the_device(cls: type) -> None:
    """torchmetrics' MeanMetric.update turns numbers into tensors (``torch.as_tensor``) before the hook we override.

    ``meta`` stands in for an accelerator: a number made into a tensor there by ``as_tensor`` is a host-to-device copy.
    """
    metric = cls().to("meta")
    inputs = [torch.empty(2, device="meta") for _ in range(2)]  # made outside the checked block
    with no_host_sync():
        metric.update(inputs[0], weight=inputs[1])
        metric.update(5.0, weight=2.0)
        metric.update(2)
        metric(4.0, weight=0.5)
        metric(torch.empty(3, device="meta"), 1.5)
    metric, ref = cls(), torchmetrics.MeanMetric(nan_strategy="ignore")  # ignore: keeps weights on clean data
    _docstring_example(metric, "cpu")
    _docstring_example(ref, "cpu")
    assert_same(metric.compute(), ref.compute())
    assert_same(metric(4.0, weight=0.5), ref(4.0, weight=0.5))
    assert_same(metric.compute(), ref.compute())


@pytest.mark.parametrize("name", AGGREGATORS)
def test_suppress_nan_check_copies_no_number_in_any_aggregator(name: str) -> None:
    metric = suppress_nan_check(getattr(torchmetrics, name))().to("meta")
    with no_host_sync():
        metric.update(2.5)
        metric(3)
    metric, ref = suppress_nan_check(getattr(torchmetrics, name))(), getattr(torchmetrics, name)()
    for v in (2.5, 3, True, torch.tensor([1.0, -2.0])):
        assert_same(metric(clone(v)), ref(clone(v)))
    assert_same(metric.compute(), ref.compute())


@pytest.mark.parametrize("target", [BinaryAccuracy, SquaredTotal, torch.nn.Linear, Metric, torchmetrics.MeanMetric()])
def test_suppress_nan_check_rejects_non_aggregators(target: Any) -> None:
    with pytest.raises(TypeError, match="BaseAggregator") as err:
        suppress_nan_check(target)
    message = str(err.value)
    assert "_cast_and_nan_check_input" in message  # says why
    assert (target.__name__ if isinstance(target, type) else type(target).__name__) in message


# ---------------------------------------------------------------------------------------------------------------------
# scalar_to_tensor_updates


@pytest.mark.parametrize("target", [torch.nn.Linear, object, int, torchmetrics.MeanMetric(), "MeanMetric"])
def test_scalar_to_tensor_updates_rejects_non_metrics(target: Any) -> None:
    with pytest.raises(TypeError, match="Metric"):
        scalar_to_tensor_updates(target)


@pytest.mark.parametrize("cls", [ScalarSquaredTotal, DecoratedScalarSquaredTotal, SyncFreeSquaredTotal])
def test_scalar_to_tensor_updates_leaves_a_plain_update_its_numbers(cls: type) -> None:
    """A user's own ``update`` gets what the plain class gets: it fails (or works) on a number as the plain one does."""
    for v in (3, 2.5, True):
        with pytest.raises(AttributeError) as plain:
            SquaredTotal().update(v)  # the undecorated update needs tensors
        with pytest.raises(AttributeError) as decorated:
            cls().update(v)
        assert str(decorated.value) == str(plain.value)
    metric, ref = cls(), SquaredTotal()
    for v in (torch.tensor(1.5), torch.tensor([1.0, -2.0])):
        metric.update(v)
        ref.update(v)
    assert_same(metric.compute(), ref.compute())
    assert_same(metric(torch.tensor(4.0)), ref(torch.tensor(4.0)))
    assert_same(metric.compute(), ref.compute())


def test_scalar_to_tensor_updates_on_torchmetrics_class() -> None:
    metric, ref = ScalarMaxMetric(), torchmetrics.MaxMetric()
    for v in (1, -3.5, True, torch.tensor(2.25), torch.tensor([0.5, 9.0])):
        assert_same(metric(clone(v)), ref(clone(v)))
    assert_same(metric.compute(), ref.compute())


# ---------------------------------------------------------------------------------------------------------------------
# sync_free


@pytest.mark.parametrize("name", [*AGGREGATORS, "RunningMean", "RunningSum"])
def test_sync_free_on_torchmetrics_class_is_the_accelerated_class(name: str) -> None:
    assert sync_free(getattr(torchmetrics, name)) is getattr(tma, name)
    assert sync_free(getattr(tma, name)) is getattr(tma, name)


@pytest.mark.parametrize("target", [torch.nn.Linear, object, torchmetrics.SumMetric(), "SumMetric"])
def test_sync_free_rejects_non_metrics(target: Any) -> None:
    with pytest.raises(TypeError, match="Metric"):
        sync_free(target)


USER_AGGREGATORS = [
    pytest.param(SyncFreeWeightedSum, WeightedSum, True, id="WeightedSum"),
    pytest.param(DecoratedWeightedSum, WeightedSum, True, id="DecoratedWeightedSum"),
    pytest.param(SyncFreeLargest, Largest, False, id="Largest"),
]


def _feed_user(metric: Any, ref: Any, weighted: bool, nan: bool, kind: str = "update") -> None:
    xs = batches(6, nan=nan)
    for i, x in enumerate(xs):
        args = (x, torch.full_like(x, 0.5 + i)) if weighted else (x,)
        out = getattr(metric, kind)(*(clone(a) for a in args))
        expected = getattr(ref, kind)(*(clone(a) for a in args))
        if kind == "forward":
            assert_same(out, expected)


@pytest.mark.parametrize("kind", ["update", "forward"])
@pytest.mark.parametrize("nan_strategy", NAN_STRATEGIES)
@pytest.mark.parametrize(("cls", "reference_cls", "weighted"), USER_AGGREGATORS)
def test_sync_free_user_aggregator_on_clean_data(
    cls: type, reference_cls: type, weighted: bool, nan_strategy: Any, kind: str
) -> None:
    # Deliberate difference: "disable" keeps user weights; torchmetrics replaces them by ones (its issue #3434), and
    # "ignore" is its strategy that keeps them on NaN-free data.
    ref_strategy = "ignore" if nan_strategy == "disable" and weighted else nan_strategy
    metric, ref = cls(nan_strategy=nan_strategy), reference_cls(nan_strategy=ref_strategy)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _feed_user(metric, ref, weighted, nan=False, kind=kind)
        assert_same(metric.compute(), ref.compute())


@pytest.mark.parametrize("kind", ["update", "forward"])
@pytest.mark.parametrize("nan_strategy", ["ignore", 0.5])
@pytest.mark.parametrize(("cls", "reference_cls", "weighted"), USER_AGGREGATORS)
def test_sync_free_user_aggregator_on_nan_data(
    cls: type, reference_cls: type, weighted: bool, nan_strategy: Any, kind: str
) -> None:
    metric, ref = cls(nan_strategy=nan_strategy), reference_cls(nan_strategy=nan_strategy)
    _feed_user(metric, ref, weighted, nan=True, kind=kind)
    value = metric.compute()
    assert not torch.isnan(value).any()
    assert_same(value, ref.compute())


@pytest.mark.parametrize(("cls", "reference_cls", "weighted"), USER_AGGREGATORS)
def test_sync_free_user_aggregator_defers_error_to_compute(cls: type, reference_cls: type, weighted: bool) -> None:
    with pytest.raises(RuntimeError, match=NAN_ERROR):
        _feed_user(reference_cls(nan_strategy="error"), reference_cls(nan_strategy="error"), weighted, nan=True)
    metric = cls(nan_strategy="error")
    _feed_user(metric, reference_cls(nan_strategy="disable"), weighted, nan=True)  # no raise in update
    with pytest.raises(RuntimeError, match=NAN_ERROR):
        metric.compute()
    metric.reset()
    _feed_user(metric, reference_cls(nan_strategy="disable"), weighted, nan=False)
    metric.compute()  # the flag was reset with the window


@pytest.mark.parametrize(("cls", "reference_cls", "weighted"), USER_AGGREGATORS)
def test_sync_free_user_aggregator_defers_warning_to_compute(cls: type, reference_cls: type, weighted: bool) -> None:
    metric, ref = cls(nan_strategy="warn"), reference_cls(nan_strategy="warn")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for x in batches(6, nan=True):
            ref.update(*((clone(x), torch.full_like(x, 2.0)) if weighted else (clone(x),)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing in update
        for x in batches(6, nan=True):
            metric.update(*((clone(x), torch.full_like(x, 2.0)) if weighted else (clone(x),)))
    with pytest.warns(UserWarning, match=NAN_ERROR):
        value = metric.compute()
    assert_same(value, ref.compute())


@pytest.mark.parametrize("nan_strategy", ["ignore", "warn"])
def test_sync_free_user_cat_aggregator_keeps_torchmetrics_nan_check(nan_strategy: str) -> None:
    with pytest.warns(UserWarning, match="cat state"):
        metric = sync_free(Collect)(nan_strategy=nan_strategy)
    ref = Collect(nan_strategy=nan_strategy)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for x in batches(4, nan=True):
            metric.update(clone(x))
            ref.update(clone(x))
        assert_same(metric.compute(), ref.compute())


def test_decorators_return_the_same_class_each_time() -> None:
    assert suppress_nan_check(torchmetrics.MeanMetric) is NoNanMeanMetric
    assert scalar_to_tensor_updates(torchmetrics.MaxMetric) is ScalarMaxMetric
    assert sync_free(WeightedSum) is SyncFreeWeightedSum
    assert sync_free(SyncFreeWeightedSum) is SyncFreeWeightedSum


# ---------------------------------------------------------------------------------------------------------------------
# Decorated classes: names, isinstance, pickle, deepcopy

# (decorated class, class it must be an instance of, undecorated class giving the expected values, how it was made)
DECORATED = [
    pytest.param(SyncFreeWeightedSum, WeightedSum, WeightedSum, id="X=sync_free(WeightedSum)"),
    pytest.param(SyncFreeLargest, Largest, Largest, id="X=sync_free(Largest)"),
    pytest.param(NoNanMeanMetric, torchmetrics.MeanMetric, torchmetrics.MeanMetric, id="X=suppress_nan_check(Mean)"),
    pytest.param(ScalarMaxMetric, torchmetrics.MaxMetric, torchmetrics.MaxMetric, id="X=scalar_to_tensor_updates(Max)"),
    pytest.param(ScalarSquaredTotal, SquaredTotal, SquaredTotal, id="X=scalar_to_tensor_updates(SquaredTotal)"),
    pytest.param(SyncFreeSquaredTotal, SquaredTotal, SquaredTotal, id="X=sync_free(SquaredTotal)"),
    pytest.param(DecoratedWeightedSum, BaseAggregator, WeightedSum, id="@sync_free"),
    pytest.param(DecoratedNoNanMean, torchmetrics.MeanMetric, torchmetrics.MeanMetric, id="@suppress_nan_check"),
    pytest.param(DecoratedScalarSquaredTotal, SquaredTotal, SquaredTotal, id="@scalar_to_tensor_updates"),
]


def _update_args(cls: type, x: Tensor) -> tuple:
    return (x, torch.full_like(x, 2.0)) if issubclass(cls, _WeightedSumBody) else (x,)


@pytest.mark.parametrize(("cls", "parent", "reference_cls"), DECORATED)
def test_decorated_class_keeps_name_and_isinstance(cls: type, parent: type, reference_cls: type) -> None:
    metric = cls()
    assert isinstance(metric, parent)
    assert isinstance(metric, cls)
    assert cls is not parent
    expected_name = {
        NoNanMeanMetric: "MeanMetric",
        ScalarMaxMetric: "MaxMetric",
        SyncFreeWeightedSum: "WeightedSum",
        SyncFreeLargest: "Largest",
        ScalarSquaredTotal: "SquaredTotal",
        SyncFreeSquaredTotal: "SquaredTotal",
    }.get(cls)
    if expected_name is None:  # decorated where defined: the name of the class statement
        expected_name = {
            DecoratedWeightedSum: "DecoratedWeightedSum",
            DecoratedNoNanMean: "DecoratedNoNanMean",
            DecoratedScalarSquaredTotal: "DecoratedScalarSquaredTotal",
        }[cls]
    assert cls.__name__ == expected_name
    assert type(metric).__name__ == expected_name


def _round_trip_params() -> list:
    return [
        pytest.param(*p.values, how, id=f"{p.id}-{how}") for p in DECORATED for how in ("pickle", "deepcopy", "clone")
    ]


@pytest.mark.parametrize(("cls", "parent", "reference_cls", "how"), _round_trip_params())
def test_decorated_instance_round_trip(cls: type, parent: type, reference_cls: type, how: str) -> None:
    metric, ref = cls(), reference_cls()
    xs = batches(6)
    for x in xs[:3]:
        metric.update(*_update_args(reference_cls, clone(x)))
        ref.update(*_update_args(reference_cls, clone(x)))
    if how == "pickle":
        copied = pickle.loads(pickle.dumps(metric))
    elif how == "deepcopy":
        copied = copy.deepcopy(metric)
    else:
        copied = metric.clone()
    assert type(copied) is cls
    assert isinstance(copied, parent)
    for x in xs[3:]:
        copied.update(*_update_args(reference_cls, clone(x)))
        ref.update(*_update_args(reference_cls, clone(x)))
    assert_same(copied.compute(), ref.compute())
