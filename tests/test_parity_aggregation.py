"""Property-based parity of the accelerated aggregators with the installed torchmetrics.

Generated floats sit on a 1/8 grid in [-64, 64] (plus NaN and +-inf): every partial sum is then exact in float32, so
a different summation order (masking instead of compaction) cannot hide or fake a difference.
"""

import math
import re

import pytest
import torch
import torchmetrics
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import torchmetrics_async as ta
from tests.parity import Step, assert_rejected_alike, run_side_by_side

STRATEGIES = ["error", "warn", "ignore", "disable", 0.5, -2.0]
FLOAT_DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
INT_DTYPES = [torch.int32, torch.int64]
PAIRS = {
    "sum": (torchmetrics.SumMetric, ta.SumMetric),
    "mean": (torchmetrics.MeanMetric, ta.MeanMetric),
    "max": (torchmetrics.MaxMetric, ta.MaxMetric),
    "min": (torchmetrics.MinMetric, ta.MinMetric),
    "cat": (torchmetrics.CatMetric, ta.CatMetric),
}
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

grid = st.integers(-512, 512).map(lambda i: i / 8)
special = st.sampled_from([math.nan, math.inf, -math.inf])
element = st.one_of(grid, grid, special)
shapes = st.lists(st.integers(0, 4), min_size=0, max_size=2).map(tuple)


@st.composite
def tensors(draw, shape=None, dtype=None, allow_special=True):
    shape = draw(shapes) if shape is None else shape
    dtype = draw(st.sampled_from(FLOAT_DTYPES + INT_DTYPES)) if dtype is None else dtype
    n = math.prod(shape)
    if dtype in INT_DTYPES:
        values = draw(st.lists(st.integers(-64, 64), min_size=n, max_size=n))
    else:
        values = draw(st.lists(element if allow_special else grid, min_size=n, max_size=n))
    return torch.tensor(values, dtype=torch.float64).reshape(shape).to(dtype)


numbers = st.one_of(grid, special, st.integers(-64, 64), st.booleans())
values = st.one_of(tensors(), tensors(), numbers)


@st.composite
def mean_steps(draw):
    value = draw(values)
    shape = tuple(value.shape) if isinstance(value, torch.Tensor) else ()
    kind = draw(st.sampled_from(["none", "number", "scalar", "broadcast", "full"]))
    if kind == "none":
        weight = None
    elif kind == "number":
        weight = draw(st.one_of(grid, special, st.integers(0, 8)))
    elif kind == "scalar":
        weight = draw(tensors(shape=(), dtype=draw(st.sampled_from(FLOAT_DTYPES))))
    elif kind == "broadcast":
        bshape = tuple(draw(st.sampled_from([1, d])) for d in shape)[draw(st.integers(0, len(shape))) :]
        weight = draw(tensors(shape=bshape, dtype=draw(st.sampled_from(FLOAT_DTYPES)))) if shape else None
    else:
        weight = draw(tensors(shape=shape, dtype=draw(st.sampled_from(FLOAT_DTYPES))))
    return value, weight


def _step(kind, value, weight=None, nan_strategy=None, with_weight=False):
    kwargs = {"weight": weight} if with_weight else {}
    step = Step(kind, (value,), kwargs)
    if with_weight and isinstance(nan_strategy, float) and weight is not None:
        # torchmetrics writes the fill weight through the broadcast view (changing every weight that shares its
        # memory); give it a materialised copy so the reference computes what it means (README: deviations).
        shape = value.shape if isinstance(value, torch.Tensor) else ()
        full = weight if isinstance(weight, torch.Tensor) else torch.tensor(weight, dtype=torch.float32)
        step.reference_kwargs = {"weight": torch.broadcast_to(full, shape).clone()}
    return step


@pytest.mark.sweep
@pytest.mark.parametrize("nan_strategy", STRATEGIES)
@pytest.mark.parametrize("name", ["sum", "max", "min", "cat"])
@SETTINGS
@given(data=st.data())
def test_value_only_aggregators_match_torchmetrics(name, nan_strategy, data):
    reference_cls, accelerated_cls = PAIRS[name]
    value_strategy = st.one_of(tensors(), numbers)
    if name == "cat":
        # torchmetrics' CatMetric concatenates along dim 0: keep batches 1-D/0-D so its own compute can succeed.
        value_strategy = st.one_of(tensors(shape=data.draw(st.sampled_from([(), (0,), (1,), (4,)]))), numbers)
    kinds = data.draw(st.lists(st.sampled_from(["update", "forward"]), min_size=1, max_size=6))
    steps = [Step(kind, (data.draw(value_strategy),)) for kind in kinds]
    run_side_by_side(reference_cls(nan_strategy=nan_strategy), accelerated_cls(nan_strategy=nan_strategy), steps)


@pytest.mark.parametrize("nan_strategy", ["error", "warn", "ignore", 0.5, -2.0])
@SETTINGS
@given(data=st.data())
def test_mean_matches_torchmetrics(nan_strategy, data):
    steps = []
    for kind in data.draw(st.lists(st.sampled_from(["update", "forward"]), min_size=1, max_size=6)):
        value, weight = data.draw(mean_steps())
        with_weight = weight is not None or data.draw(st.booleans())
        steps.append(_step(kind, value, weight, nan_strategy, with_weight))
    run_side_by_side(
        torchmetrics.MeanMetric(nan_strategy=nan_strategy), ta.MeanMetric(nan_strategy=nan_strategy), steps
    )


@SETTINGS
@given(data=st.data())
def test_mean_disable_keeps_weights(data):
    """torchmetrics' "disable" drops user weights (its issue #3434); ours keeps them: the reference is torchmetrics'
    weighted mean on NaN-free data (where "error" changes nothing) and its "disable" when no weight is given."""
    weighted = data.draw(st.booleans())
    steps = []
    for kind in data.draw(st.lists(st.sampled_from(["update", "forward"]), min_size=1, max_size=5)):
        if weighted:
            value = data.draw(tensors(shape=(3,), allow_special=False))
            weight = data.draw(tensors(shape=(3,), dtype=torch.float32, allow_special=False))
            steps.append(Step(kind, (value,), {"weight": weight}))
        else:
            steps.append(Step(kind, (data.draw(values),)))
    reference = torchmetrics.MeanMetric(nan_strategy="error" if weighted else "disable")
    run_side_by_side(reference, ta.MeanMetric(nan_strategy="disable"), steps)


@pytest.mark.parametrize("name", ["sum", "mean", "max", "min"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float16])
@SETTINGS
@given(data=st.data())
def test_set_dtype_matches_torchmetrics(name, dtype, data):
    reference_cls, accelerated_cls = PAIRS[name]
    reference, accelerated = reference_cls(nan_strategy="ignore"), accelerated_cls(nan_strategy="ignore")
    reference.set_dtype(dtype)
    accelerated.set_dtype(dtype)
    value_strategy = st.one_of(tensors(allow_special=False), st.floats(-100, 100), st.integers(-64, 64))
    steps = [
        Step(k, (data.draw(value_strategy),))
        for k in data.draw(st.lists(st.sampled_from(["update", "forward"]), min_size=1, max_size=4))
    ]
    run_side_by_side(reference, accelerated, steps)


@pytest.mark.parametrize("name", ["sum", "mean", "max", "min"])
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_arbitrary_floats_match_torchmetrics(name, data):
    """Off the exact grid: values anywhere in float32's range, compared with assert_close's float32 tolerance."""
    reference_cls, accelerated_cls = PAIRS[name]
    floats = st.floats(-1e6, 1e6, allow_nan=False, width=32)
    steps = []
    for kind in data.draw(st.lists(st.sampled_from(["update", "forward"]), min_size=1, max_size=4)):
        size = data.draw(st.integers(0, 50))
        tensor = torch.tensor(data.draw(st.lists(floats, min_size=size, max_size=size)))
        value = data.draw(st.sampled_from([tensor, data.draw(st.floats(-1e6, 1e6, allow_nan=False))]))
        kwargs = {}
        if name == "mean" and data.draw(st.booleans()):
            kwargs["weight"] = data.draw(st.floats(0, 10))
        steps.append(Step(kind, (value,), kwargs))
    run_side_by_side(reference_cls(nan_strategy="error"), accelerated_cls(nan_strategy="error"), steps)


@pytest.mark.parametrize("window", [1, 3])
@pytest.mark.parametrize("name", ["mean", "sum"])
@SETTINGS
@given(data=st.data())
def test_running_matches_torchmetrics(name, window, data):
    reference_cls = torchmetrics.aggregation.RunningMean if name == "mean" else torchmetrics.aggregation.RunningSum
    accelerated_cls = ta.RunningMean if name == "mean" else ta.RunningSum
    kinds = data.draw(st.lists(st.sampled_from(["update", "forward"]), min_size=1, max_size=7))
    steps = [Step(kind, (data.draw(st.one_of(tensors(allow_special=False), grid)),)) for kind in kinds]
    run_side_by_side(
        reference_cls(window=window, nan_strategy="ignore"),
        accelerated_cls(window=window, nan_strategy="ignore"),
        steps,
    )


NAN, INF = math.nan, math.inf
EDGE_VALUES = {
    "nan-vector": torch.tensor([1.0, NAN, 3.0]),
    "all-nan": torch.tensor([NAN, NAN]),
    "inf-and-nan": torch.tensor([INF, NAN, -2.0]),
    "inf-minus-inf": torch.tensor([INF, -INF]),
    "empty": torch.tensor([]),
    "empty-2d": torch.zeros(0, 3),
    "0-dim-nan": torch.tensor(NAN),
    "0-dim": torch.tensor(0.1),
    "2d-fp16": torch.tensor([[0.1, NAN], [2.5, -1.0]], dtype=torch.float16),
    "bf16": torch.tensor([0.1, 7.3, NAN], dtype=torch.bfloat16),
    "fp64": torch.tensor([0.1, 1e300, NAN], dtype=torch.float64),
    "int64": torch.tensor([3, -7, 2]),
    "bool": torch.tensor([True, False, True]),
    "py-float": 0.1,
    "py-nan": NAN,
    "py-inf": -INF,
    "py-int": 7,
    "py-bool": True,
}


@pytest.mark.parametrize("nan_strategy", STRATEGIES)
@pytest.mark.parametrize("name", ["sum", "mean", "max", "min", "cat"])
@pytest.mark.parametrize("edge", list(EDGE_VALUES))
@pytest.mark.parametrize("kind", ["update", "forward"])
def test_edge_values_match_torchmetrics(kind, edge, name, nan_strategy):
    reference_cls, accelerated_cls = PAIRS[name]
    steps = [Step("update", (torch.tensor([0.5, 2.0]),)), Step(kind, (EDGE_VALUES[edge],)), Step(kind, (1.25,))]
    run_side_by_side(reference_cls(nan_strategy=nan_strategy), accelerated_cls(nan_strategy=nan_strategy), steps)


EDGE_WEIGHTS = {
    "none": None,
    "py-third": 1 / 3,
    "py-nan": NAN,
    "py-zero": 0.0,
    "0-dim": torch.tensor(0.3),
    "0-dim-nan": torch.tensor(NAN),
    "full": torch.tensor([0.5, NAN, 2.0]),
    "full-inf": torch.tensor([INF, 1.0, 0.0]),
    "fp16": torch.tensor([0.1, 0.2, 0.3], dtype=torch.float16),
    "negative": torch.tensor([-1.0, 2.0, 0.5]),
}


def _broadcastable(value_name, weight_name):
    value, weight = EDGE_VALUES[value_name], EDGE_WEIGHTS[weight_name]
    shape = value.shape if isinstance(value, torch.Tensor) else ()
    return not (isinstance(weight, torch.Tensor) and weight.dim() and weight.shape != shape)


@pytest.mark.parametrize("nan_strategy", ["error", "warn", "ignore", 0.5])
@pytest.mark.parametrize(
    ("value", "weight"),
    [
        (v, w)
        for v in ["py-float", "py-nan", "nan-vector", "inf-and-nan", "0-dim", "empty"]
        for w in EDGE_WEIGHTS
        if _broadcastable(v, w)
    ],
)
@pytest.mark.parametrize("kind", ["update", "forward"])
def test_mean_edge_weights_match_torchmetrics(kind, weight, value, nan_strategy):
    value, weight = EDGE_VALUES[value], EDGE_WEIGHTS[weight]
    steps = [Step("update", (torch.tensor([0.5, 2.0]),)), _step(kind, value, weight, nan_strategy, True)]
    steps.append(Step(kind, (0.7,), {"weight": 3}))
    run_side_by_side(
        torchmetrics.MeanMetric(nan_strategy=nan_strategy), ta.MeanMetric(nan_strategy=nan_strategy), steps
    )


# (value shape, weight shape): a weight that does not broadcast to the value's shape, as torchmetrics' broadcast_to
# requires (it expands the weight only): per-sample weights of another batch size, or along the wrong dimension.
WEIGHT_MISMATCHES = [((4,), (3,)), ((4,), (4, 1)), ((4,), (1, 4)), ((2, 3), (2,)), ((2, 3), (3, 1)), ((), (4,))]


@pytest.mark.parametrize("nan_strategy", ["warn", "error", "ignore", "disable", 0.5])
@pytest.mark.parametrize(("value_shape", "weight_shape"), WEIGHT_MISMATCHES)
@pytest.mark.parametrize("name", ["MeanMetric", "RunningMean"])
def test_a_weight_that_does_not_broadcast_to_the_value_is_rejected_at_once(
    name: str, value_shape: tuple, weight_shape: tuple, nan_strategy: str | float
) -> None:
    generator = torch.Generator().manual_seed(0)
    good = (torch.rand(4, generator=generator), torch.ones(4))  # ones: "disable" drops torchmetrics' weights
    bad = (torch.rand(value_shape, generator=generator), torch.rand(weight_shape, generator=generator))
    assert_rejected_alike(
        lambda: getattr(torchmetrics, name)(nan_strategy=nan_strategy),
        lambda: getattr(ta, name)(nan_strategy=nan_strategy),
        good,
        bad,
    )
    with pytest.raises(ValueError, match=rf"`weight` of shape {re.escape(str(weight_shape))} does not broadcast"):
        getattr(ta, name)(nan_strategy=nan_strategy).update(*bad)
