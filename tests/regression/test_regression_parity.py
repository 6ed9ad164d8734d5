"""Parity of the accelerated regression metrics with the installed torchmetrics, on the same inputs.

Property-based runs draw a class, its arguments (``num_outputs``, ``multioutput``, ``adjusted``, ``squared``,
``reduction``, ``log_prob``, ``power``, ``normalization``, ``keep_sequence_dim``, ...) and a few ``update``/``forward``
steps on values from a coarse grid (ties and zero variances on purpose), with NaNs, batches of zero, one and more
samples and float32/float64 inputs, and compare ``forward``'s batch values, the states after every step, ``compute()``
and a window after ``reset()``. Both must reject malformed inputs alike (same exception type, eagerly).
"""

import math
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torchmetrics
import torchmetrics.regression as tmr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import torchmetrics_async.regression as ours
from tests.parity import assert_same

SETTINGS = settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
GRID = [0.0, 0.5, 1.0, 2.0, 3.5]


def _values(draw: st.DrawFn, shape: tuple[int, ...], dtype: torch.dtype, low: float = 0.0, nan: bool = True) -> Any:
    flat = draw(st.lists(st.sampled_from(GRID), min_size=math.prod(shape), max_size=math.prod(shape)))
    if flat and draw(st.integers(0, 3)) == 0:  # a constant batch: zero variance, the degenerate branches
        flat = [flat[0]] * len(flat)
    x = torch.tensor(flat, dtype=dtype).reshape(shape) + low
    if nan and x.numel() and draw(st.booleans()) and draw(st.booleans()):
        x.view(-1)[draw(st.integers(0, x.numel() - 1))] = math.nan
    return x


def _outputs(draw: st.DrawFn) -> int:
    return draw(st.sampled_from([1, 1, 2, 3]))


def _shape(n: int, outputs: int) -> tuple[int, ...]:
    return (n,) if outputs == 1 else (n, outputs)


# name -> draw(init kwargs, a function drawing one batch of inputs)
Case = Callable[[st.DrawFn], tuple[dict[str, Any], Callable[[st.DrawFn, int, torch.dtype], tuple]]]


def _pair_maker(shape_of: Callable[[int], tuple[int, ...]], low: float = 0.0) -> Callable:
    def make(draw: st.DrawFn, n: int, dtype: torch.dtype) -> tuple:
        return _values(draw, shape_of(n), dtype, low), _values(draw, shape_of(n), dtype, low)

    return make


def _with_outputs(extra: Callable[[st.DrawFn], dict[str, Any]] = lambda draw: {}, low: float = 0.0) -> Case:
    def case(draw: st.DrawFn) -> tuple[dict[str, Any], Callable]:
        outputs = _outputs(draw)
        return {"num_outputs": outputs, **extra(draw)}, _pair_maker(lambda n: _shape(n, outputs), low)

    return case


def _vector(extra: Callable[[st.DrawFn], dict[str, Any]] = lambda draw: {}, low: float = 0.0) -> Case:
    def case(draw: st.DrawFn) -> tuple[dict[str, Any], Callable]:
        return extra(draw), _pair_maker(lambda n: (n,), low)

    return case


def _multioutput(adjusted: bool) -> Case:
    def case(draw: st.DrawFn) -> tuple[dict[str, Any], Callable]:
        outputs = _outputs(draw)
        init = {"multioutput": draw(st.sampled_from(["raw_values", "uniform_average", "variance_weighted"]))}
        if adjusted:
            init["adjusted"] = draw(st.integers(0, 3))
        return init, _pair_maker(lambda n: _shape(n, outputs))

    return case


def _distributions(draw: st.DrawFn) -> tuple[dict[str, Any], Callable]:
    log_prob = draw(st.booleans())
    init = {"log_prob": log_prob, "reduction": draw(st.sampled_from(["mean", "sum", "none", None]))}

    def make(draw: st.DrawFn, n: int, dtype: torch.dtype) -> tuple:
        p, q = _values(draw, (n, 3), dtype, low=0.0), _values(draw, (n, 3), dtype, low=0.25)
        return (p.log(), q.log()) if log_prob else (p, q)

    return init, make


def _csi(draw: st.DrawFn) -> tuple[dict[str, Any], Callable]:
    init = {"threshold": draw(st.sampled_from([0.5, 1.0])), "keep_sequence_dim": draw(st.sampled_from([None, 0, 1]))}
    return init, _pair_maker(lambda n: (n, 3))


def _crps(draw: st.DrawFn) -> tuple[dict[str, Any], Callable]:
    members = draw(st.integers(1, 3))

    def make(draw: st.DrawFn, n: int, dtype: torch.dtype) -> tuple:
        return _values(draw, (n, members), dtype), _values(draw, (n,), dtype)

    return {}, make


def _tweedie(draw: st.DrawFn) -> tuple[dict[str, Any], Callable]:
    # Inputs inside every power's domain (strictly positive): the deferred domain checks are tested below.
    return {"power": draw(st.sampled_from([0.0, 1.0, 1.5, 2.0, 3.0, -1.0]))}, _pair_maker(lambda n: (n,), low=0.25)


def _cosine(draw: st.DrawFn) -> tuple[dict[str, Any], Callable]:
    return {"reduction": draw(st.sampled_from(["mean", "sum", "none", None]))}, _pair_maker(lambda n: (n, 3))


def _kendall_args(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "variant": draw(st.sampled_from(["a", "b", "c"])),
        "t_test": draw(st.booleans()),
        "alternative": draw(st.sampled_from(["two-sided", "less", "greater"])),
    }


CASES: dict[str, Case] = {
    "MeanSquaredError": _with_outputs(lambda draw: {"squared": draw(st.booleans())}),
    "MeanAbsoluteError": _with_outputs(),
    "MeanAbsolutePercentageError": _vector(),
    "SymmetricMeanAbsolutePercentageError": _vector(),
    "WeightedMeanAbsolutePercentageError": _vector(),
    "MeanSquaredLogError": _vector(),
    "LogCoshError": _with_outputs(),
    "MinkowskiDistance": _vector(lambda draw: {"p": draw(st.sampled_from([1, 2, 3.5]))}),
    "RelativeSquaredError": _with_outputs(lambda draw: {"squared": draw(st.booleans())}),
    "NormalizedRootMeanSquaredError": _with_outputs(
        lambda draw: {"normalization": draw(st.sampled_from(["mean", "range", "std", "l2"]))}
    ),
    "CriticalSuccessIndex": _csi,
    "ContinuousRankedProbabilityScore": _crps,
    "R2Score": _multioutput(adjusted=True),
    "ExplainedVariance": _multioutput(adjusted=False),
    "PearsonCorrCoef": _with_outputs(),
    "ConcordanceCorrCoef": _with_outputs(),
    "KLDivergence": _distributions,
    "JensenShannonDivergence": _distributions,
    "TweedieDevianceScore": _tweedie,
    "CosineSimilarity": _cosine,
    "SpearmanCorrCoef": _with_outputs(),
    "KendallRankCorrCoef": _with_outputs(_kendall_args),
}


def test_every_accelerated_regression_class_has_a_parity_case() -> None:
    assert set(CASES) == set(ours.__all__)


def _torchmetrics_states(reference: Any, accelerated: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    names = list(reference._defaults)
    return {n: getattr(accelerated, n) for n in names}, {n: getattr(reference, n) for n in names}


def _call(fn: Callable, *args: Any) -> tuple[Any, Exception | None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return fn(*args), None
        except (RuntimeError, ValueError, TypeError, IndexError) as err:
            return None, err


def _run(reference: Any, accelerated: Any, steps: list[tuple[str, tuple]]) -> bool:
    """Run the steps on both; compare what they return and hold. False once both rejected an input."""
    for kind, inputs in steps:
        ref_fn = reference if kind == "forward" else reference.update
        acc_fn = accelerated if kind == "forward" else accelerated.update
        ref_out, ref_err = _call(ref_fn, *(x.clone() for x in inputs))
        acc_out, acc_err = _call(acc_fn, *inputs)
        assert type(acc_err) is type(ref_err), f"{kind}: torchmetrics {ref_err!r}, accelerated {acc_err!r}"
        if ref_err is not None:
            return False
        if kind == "forward":
            assert_same(acc_out, ref_out)
        assert_same(*_torchmetrics_states(reference, accelerated))
    ref_value, ref_err = _call(reference.compute)
    acc_value, acc_err = _call(accelerated.compute)
    assert type(acc_err) is type(ref_err), f"compute: torchmetrics {ref_err!r}, accelerated {acc_err!r}"
    if ref_err is None:
        assert_same(acc_value, ref_value)
    return True


@st.composite
def scenarios(draw: st.DrawFn, name: str) -> tuple[dict[str, Any], list[tuple[str, tuple]], list[tuple[str, tuple]]]:
    init, make = CASES[name](draw)
    dtype = draw(st.sampled_from([torch.float32, torch.float64]))

    def steps(count: int) -> list[tuple[str, tuple]]:
        return [
            (draw(st.sampled_from(["update", "forward"])), make(draw, draw(st.sampled_from([0, 1, 2, 3, 5])), dtype))
            for _ in range(count)
        ]

    return init, steps(draw(st.integers(1, 4))), steps(draw(st.integers(1, 2)))


@pytest.mark.sweep
@pytest.mark.parametrize("name", sorted(CASES))
@SETTINGS
@given(data=st.data())
def test_update_forward_compute_reset_match_torchmetrics(name: str, data: st.DataObject) -> None:
    init, first, second = data.draw(scenarios(name))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference, accelerated = getattr(tmr, name)(**init), getattr(ours, name)(**init)
    if not _run(reference, accelerated, first):
        return
    reference.reset()
    accelerated.reset()
    _run(reference, accelerated, second)


@pytest.mark.parametrize("compute_groups", [True, False])
def test_collection_matches_torchmetrics(compute_groups: bool) -> None:
    names = ["MeanSquaredError", "MeanAbsoluteError", "R2Score", "PearsonCorrCoef", "ExplainedVariance"]
    ref = torchmetrics.MetricCollection({n: getattr(tmr, n)() for n in names}, compute_groups=compute_groups)
    acc = torchmetrics.MetricCollection({n: getattr(ours, n)() for n in names}, compute_groups=compute_groups)
    generator = torch.Generator().manual_seed(0)
    for step in range(4):
        preds, target = torch.randn(8, generator=generator), torch.randn(8, generator=generator)
        if step % 2:
            assert_same(acc(preds, target), ref(preds, target))
        else:
            acc.update(preds, target)
            ref.update(preds, target)
    assert_same(acc.compute(), ref.compute())
