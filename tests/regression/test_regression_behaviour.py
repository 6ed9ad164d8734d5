"""The regression family beyond random parity: no host sync (CPU and ``meta``) under every configuration, the deferred
Tweedie domain check, merged and stacked running moments, the eager R2 checks of ``forward``, near-zero variances."""

import itertools
import math
import warnings
from typing import Any

import pytest
import torch
import torchmetrics.regression as tmr

import torchmetrics_async.regression as ours
from tests.examples import example_for
from tests.parity import assert_rejected_alike, batch_mismatches, torchmetrics_text
from tests.regression.test_regression_parity import _run
from torchmetrics_async._torchmetrics import tweedie_domain_message
from torchmetrics_async.testing import no_host_sync

N = 6
CONFIGS: list[tuple[str, dict[str, Any], tuple[int, ...]]] = [
    ("MeanSquaredError", {"num_outputs": 2, "squared": False}, (N, 2)),
    ("MeanAbsoluteError", {}, (N,)),
    ("MeanAbsolutePercentageError", {}, (N,)),
    ("SymmetricMeanAbsolutePercentageError", {}, (N,)),
    ("WeightedMeanAbsolutePercentageError", {}, (N,)),
    ("MeanSquaredLogError", {}, (N,)),
    ("LogCoshError", {"num_outputs": 2}, (N, 2)),
    ("MinkowskiDistance", {"p": 2.5}, (N,)),
    ("RelativeSquaredError", {"squared": False}, (N,)),
    ("NormalizedRootMeanSquaredError", {"normalization": "std"}, (N,)),
    ("CriticalSuccessIndex", {"threshold": 0.5, "keep_sequence_dim": 0}, (N, 3)),
    ("R2Score", {"adjusted": 2, "multioutput": "variance_weighted"}, (N, 2)),
    ("R2Score", {}, (N,)),
    ("ExplainedVariance", {"multioutput": "raw_values"}, (N, 2)),
    ("PearsonCorrCoef", {"num_outputs": 2}, (N, 2)),
    ("ConcordanceCorrCoef", {}, (N,)),
    ("KLDivergence", {"reduction": "none"}, (N, 3)),
    ("KLDivergence", {"log_prob": True}, (N, 3)),
    ("JensenShannonDivergence", {"reduction": "sum"}, (N, 3)),
    ("JensenShannonDivergence", {"log_prob": True}, (N, 3)),
    ("TweedieDevianceScore", {"power": 1}, (N,)),
    ("TweedieDevianceScore", {"power": 2.5}, (N,)),
    ("TweedieDevianceScore", {"power": -1.0}, (N,)),
    ("CosineSimilarity", {"reduction": "mean"}, (N, 3)),
]


def _inputs(shape: tuple[int, ...], seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return torch.rand(*shape, generator=generator) + 0.1, torch.rand(*shape, generator=generator) + 0.1


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize(("name", "init", "shape"), CONFIGS, ids=[f"{n}-{i}" for n, i, _ in CONFIGS])
def test_update_and_forward_make_no_host_sync(name: str, init: dict[str, Any], shape: tuple[int, ...], device: str):
    metric = getattr(ours, name)(**init).to(device)
    preds, target = (x.to(device) for x in _inputs(shape))
    with no_host_sync():
        metric.update(preds, target)
        metric(preds, target)
        metric.update(preds, target)


@pytest.mark.parametrize("name", ["SpearmanCorrCoef", "KendallRankCorrCoef"])
@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_ranked_metrics_update_without_host_sync(name: str, device: str) -> None:
    metric = getattr(ours, name)(num_outputs=2).to(device)
    preds, target = (x.to(device) for x in _inputs((N, 2)))
    with no_host_sync():
        metric.update(preds, target)


@pytest.mark.parametrize(
    ("power", "preds", "target"),
    [
        (1, [-1.0, 2.0, 3.0], [0.5, 0.5, 0.5]),
        (1, [0.5, 2.0, 3.0], [-1.0, 2.0, 3.0]),
        (2, [-1.0, 2.0, 3.0], [0.5, 0.5, 0.5]),
        (2, [0.5, 2.0, 3.0], [0.0, 2.0, 3.0]),
        (1.5, [0.0, 2.0, 3.0], [0.5, 0.5, 0.5]),
        (3, [0.5, 2.0, 3.0], [0.0, 2.0, 3.0]),
        (-2, [0.0, 2.0, 3.0], [-1.0, 2.0, 3.0]),
    ],
)
def test_tweedie_domain_error_is_deferred_with_torchmetrics_message(power: float, preds: list, target: list) -> None:
    bad = torch.tensor(preds), torch.tensor(target)
    good = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match=f"^For power={power}, ") as reference_error:
        tmr.TweedieDevianceScore(power=power)(*bad)
    assert str(reference_error.value) == tweedie_domain_message(power)
    metric = ours.TweedieDevianceScore(power=power)
    with no_host_sync():
        metric.update(*good)
        value = metric(*bad)
    assert bool(torch.isnan(value))
    with pytest.raises(RuntimeError) as error:
        metric.compute()
    assert torchmetrics_text(error.value) == str(reference_error.value)


def test_tweedie_power_zero_has_no_domain_check() -> None:
    metric = ours.TweedieDevianceScore()
    metric.update(torch.tensor([-1.0, 2.0]), torch.tensor([-3.0, 2.0]))
    reference = tmr.TweedieDevianceScore()
    reference.update(torch.tensor([-1.0, 2.0]), torch.tensor([-3.0, 2.0]))
    torch.testing.assert_close(metric.compute(), reference.compute())
    assert not metric._deferred_checks_registered()


@pytest.mark.parametrize("name", ["R2Score", "ExplainedVariance", "MeanSquaredError", "KLDivergence"])
def test_merge_state_matches_torchmetrics(name: str) -> None:
    shape = (N, 3) if name == "KLDivergence" else (N,)
    first, second = getattr(ours, name)(), getattr(ours, name)()
    ref_first, ref_second = getattr(tmr, name)(), getattr(tmr, name)()
    for metric, reference, seed in ((first, ref_first, 1), (second, ref_second, 2)):
        metric.update(*_inputs(shape, seed))
        reference.update(*_inputs(shape, seed))
    first.merge_state(second)
    ref_first.merge_state(ref_second)
    torch.testing.assert_close(first.compute(), ref_first.compute())
    third = getattr(ours, name)()  # merged with a plain torchmetrics instance too
    third.update(*_inputs(shape, 1))
    third.merge_state(ref_second)
    torch.testing.assert_close(third.compute(), ref_first.compute())


@pytest.mark.parametrize("name", ["PearsonCorrCoef", "ConcordanceCorrCoef"])
def test_running_moments_refuse_merge_state_like_torchmetrics(name: str) -> None:
    """torchmetrics' full_state_update=True metrics do not merge; the error is its own."""
    metric, reference = getattr(ours, name)(), getattr(tmr, name)()
    with pytest.raises(RuntimeError) as error:
        metric.merge_state(getattr(ours, name)())
    with pytest.raises(RuntimeError) as reference_error:
        reference.merge_state(getattr(tmr, name)())
    assert str(error.value) == str(reference_error.value)


@pytest.mark.parametrize("name", ["PearsonCorrCoef", "ConcordanceCorrCoef"])
@pytest.mark.parametrize("num_outputs", [1, 2])
def test_synced_running_moments_are_stacked_and_aggregated_like_torchmetrics(name: str, num_outputs: int) -> None:
    """A sync gathers every process's moments (dist_reduce_fx=None: stacked); compute() combines them with
    torchmetrics' ``_final_aggregation``. Two processes are stood in for by a gather giving each state's two halves."""
    shape = (N,) if num_outputs == 1 else (N, num_outputs)
    other = getattr(tmr, name)(num_outputs=num_outputs)
    other.update(*_inputs(shape, 2))

    def gather(metric: Any) -> Any:
        names = iter(list(metric._reductions))

        def fake_gather(tensor: torch.Tensor, group: Any = None) -> list[torch.Tensor]:
            return [tensor, getattr(other, next(names))]

        return fake_gather

    values = []
    for module in (ours, tmr):
        metric = getattr(module, name)(num_outputs=num_outputs, sync_on_compute=False)
        metric.update(*_inputs(shape, 1))
        metric.sync(dist_sync_fn=gather(metric), distributed_available=lambda: True)
        values.append(metric.compute())
    torch.testing.assert_close(values[0], values[1])
    whole = getattr(tmr, name)(num_outputs=num_outputs)
    whole.update(
        torch.cat([_inputs(shape, 1)[0], _inputs(shape, 2)[0]]), torch.cat([_inputs(shape, 1)[1], _inputs(shape, 2)[1]])
    )
    torch.testing.assert_close(values[0], whole.compute(), rtol=1e-4, atol=1e-5)


def test_r2_forward_on_one_sample_raises_eagerly_like_torchmetrics() -> None:
    metric, reference = ours.R2Score(), tmr.R2Score()
    with pytest.raises(ValueError, match="Needs at least two samples") as error:
        metric(torch.tensor([1.0]), torch.tensor([2.0]))
    with pytest.raises(ValueError, match="Needs at least two samples") as reference_error:
        reference(torch.tensor([1.0]), torch.tensor([2.0]))
    assert str(error.value) == str(reference_error.value)


@pytest.mark.parametrize("adjusted", [2, 3, 4])
def test_r2_adjusted_warnings_of_forward_are_torchmetrics_own(adjusted: int) -> None:
    preds, target = torch.tensor([1.0, 2.0, 4.0, 3.0]), torch.tensor([1.5, 2.0, 3.0, 3.5])
    with warnings.catch_warnings(record=True) as ours_record:
        warnings.simplefilter("always")
        value = ours.R2Score(adjusted=adjusted)(preds, target)
    with warnings.catch_warnings(record=True) as reference_record:
        warnings.simplefilter("always")
        expected = tmr.R2Score(adjusted=adjusted)(preds, target)
    torch.testing.assert_close(value, expected)
    assert [str(w.message) for w in ours_record] == [str(w.message) for w in reference_record]


@pytest.mark.parametrize("name", ["PearsonCorrCoef", "ConcordanceCorrCoef"])
def test_zero_variance_batch_value_is_nan_as_torchmetrics_without_the_warning(name: str) -> None:
    preds = torch.tensor([1.0, 1.0, 1.0, 1.0])  # zero variance: torchmetrics warns in compute(), even in forward()
    target = torch.tensor([1.0, 2.0, 3.0, 4.0])
    metric = getattr(ours, name)()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        with no_host_sync():
            value = metric(preds, target)
    assert not record
    with pytest.warns(UserWarning, match="The variance of predictions or target is close to zero"):
        expected = getattr(tmr, name)()(preds, target)
    assert bool(torch.isnan(expected))
    torch.testing.assert_close(value, expected, equal_nan=True)
    with pytest.warns(UserWarning, match="The variance of predictions or target is close to zero"):
        metric.compute()  # compute() keeps torchmetrics' warning (and its host read)


@pytest.mark.parametrize("name", ["PearsonCorrCoef", "R2Score", "ExplainedVariance", "MeanSquaredError"])
@pytest.mark.parametrize("grad", [True, False])
def test_forward_value_carries_grad_as_torchmetrics_but_states_do_not(name: str, grad: bool) -> None:
    preds, target = _inputs((N,))
    preds.requires_grad_(True)
    metric, reference = getattr(ours, name)(), getattr(tmr, name)()
    with torch.set_grad_enabled(grad):
        value, expected = metric(preds, target), reference(preds, target)
    assert value.requires_grad == expected.requires_grad
    assert not any(getattr(metric, state).requires_grad for state in metric._defaults)
    torch.testing.assert_close(value.detach(), expected.detach())


def test_float64_inputs_keep_torchmetrics_state_dtypes() -> None:
    preds, target = (x.double() for x in _inputs((N,)))
    for name in ("MeanSquaredError", "R2Score", "PearsonCorrCoef", "KLDivergence"):
        shape_inputs = (preds, target) if name != "KLDivergence" else (preds.view(2, 3), target.view(2, 3))
        metric, reference = getattr(ours, name)(), getattr(tmr, name)()
        metric(*shape_inputs)
        reference(*shape_inputs)
        metric.update(*shape_inputs)
        reference.update(*shape_inputs)
        for state in reference._defaults:
            assert getattr(metric, state).dtype == getattr(reference, state).dtype, (name, state)
        assert not math.isnan(float(metric.compute().sum())) or name == "KLDivergence"


_DTYPES = (torch.float16, torch.float32, torch.float64)
_DTYPE_SEQUENCES = [*itertools.product(_DTYPES, repeat=2), (torch.float64, torch.float16, torch.float32)]


@pytest.mark.parametrize("dtypes", _DTYPE_SEQUENCES)
@pytest.mark.parametrize("log_prob", [False, True])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("name", ["KLDivergence", "JensenShannonDivergence"])
def test_divergence_dtypes_follow_torchmetrics_over_mixed_dtype_batches(
    name: str, reduction: str, log_prob: bool, dtypes: tuple[torch.dtype, ...]
) -> None:
    """forward() after a float64 batch was accumulated: torchmetrics' batch value has the batch's dtype (issue 19.8)."""
    init = {"reduction": reduction, "log_prob": log_prob}
    metric, reference = getattr(ours, name)(**init), getattr(tmr, name)(**init)
    steps = []
    for seed, dtype in enumerate(dtypes):
        p, q = (x.to(dtype) for x in _inputs((N, 3), seed))
        steps.append(("forward", (p.log(), q.log()) if log_prob else (p, q)))
        steps.append(("update", steps[-1][1]))
    assert _run(reference, metric, steps)  # forward values, states and compute(): values and dtypes


@pytest.mark.sweep
@pytest.mark.parametrize(("name", "init", "shape"), CONFIGS, ids=[f"{n}-{i}" for n, i, _ in CONFIGS])
def test_jit_script_works_where_torchmetrics_scripts(name: str, init: dict[str, Any], shape: tuple[int, ...]) -> None:
    try:
        torch.jit.script(getattr(tmr, name)(**init))
    except Exception as err:  # whatever torchmetrics fails with, ours may fail with too
        pytest.xfail(f"torchmetrics' class does not script: {err!r}"[:200])
    torch.jit.script(getattr(ours, name)(**init))


@pytest.mark.parametrize("name", ours.__all__)
def test_batch_size_mismatches_are_rejected_at_once_as_torchmetrics_rejects_them(name: str) -> None:
    """Every input cut to another batch size (shapes are metadata: no read), in ``update`` and ``forward``."""
    example = example_for(getattr(tmr, name))
    for bad in batch_mismatches(example.inputs):
        assert_rejected_alike(
            lambda: getattr(tmr, name)(**example.init), lambda: getattr(ours, name)(**example.init), example.inputs, bad
        )
