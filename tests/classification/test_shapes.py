"""Mismatched ``preds``/``target`` shapes: every classification class raises at once, never returns a number.

For each accelerated classification class (not the curves) and each argument setting that matters to its ``update``
(``average``, ``multidim_average``, ``top_k``, ``ignore_index``, ``validate_args``, the hinge mode), torchmetrics' twin
and ours get the same mismatched batch (batch sizes that differ, or that torchmetrics would broadcast: ``(1, C)``
against ``(4,)``). Ours must raise in ``update()`` and in ``forward()``, with the task's shape error: where torchmetrics
raises its own validation error, the same type and message; where it fails in a kernel or returns a number (a listed
deviation), ours still raises the shape error. Afterwards the metric holds nothing of the bad batch.
"""

import itertools
import warnings
from typing import Any

import pytest
import torch
import torchmetrics.classification as tmc

import torchmetrics_async.classification as ours

C, L = 4, 3
STAT_FAMILY = [
    "Accuracy",
    "Precision",
    "Recall",
    "FBetaScore",
    "F1Score",
    "Specificity",
    "HammingDistance",
    "NegativePredictiveValue",
    "StatScores",
]
CONFUSION_FAMILY = ["ConfusionMatrix", "JaccardIndex", "MatthewsCorrCoef", "CohenKappa"]


def _scores(*shape: int) -> torch.Tensor:
    return torch.rand(*shape, generator=torch.Generator().manual_seed(sum(shape)))


def _labels(high: int, *shape: int) -> torch.Tensor:
    return torch.randint(0, high, shape, generator=torch.Generator().manual_seed(sum(shape) + high))


# Batch sizes that differ (one of them 1: what torchmetrics broadcasts), with and without extra dimensions.
MULTICLASS_CASES = {
    "scores(4,C)-target(1,)": (_scores(4, C), _labels(C, 1)),
    "scores(1,C)-target(4,)": (_scores(1, C), _labels(C, 4)),
    "scores(4,C)-target(3,)": (_scores(4, C), _labels(C, 3)),
    "scores(4,C,2)-target(1,2)": (_scores(4, C, 2), _labels(C, 1, 2)),
    "scores(1,C,2)-target(4,2)": (_scores(1, C, 2), _labels(C, 4, 2)),
    "labels(4,)-target(1,)": (_labels(C, 4), _labels(C, 1)),
    "labels(1,)-target(4,)": (_labels(C, 1), _labels(C, 4)),
    "labels(1,2)-target(4,2)": (_labels(C, 1, 2), _labels(C, 4, 2)),
}
# Score-only metrics (calibration error, hinge loss) take no label preds.
MULTICLASS_SCORE_CASES = {k: v for k, v in MULTICLASS_CASES.items() if k.startswith("scores")}
BINARY_CASES = {
    "probs(4,)-target(1,)": (_scores(4), _labels(2, 1)),
    "probs(1,)-target(4,)": (_scores(1), _labels(2, 4)),
    "probs(4,)-target(3,)": (_scores(4), _labels(2, 3)),
    "probs(1,2)-target(4,2)": (_scores(1, 2), _labels(2, 4, 2)),
    "labels(1,)-target(4,)": (_labels(2, 1), _labels(2, 4)),
}
BINARY_SCORE_CASES = {k: v for k, v in BINARY_CASES.items() if k.startswith("probs")}
MULTILABEL_CASES = {
    "probs(4,L)-target(1,L)": (_scores(4, L), _labels(2, 1, L)),
    "probs(1,L)-target(4,L)": (_scores(1, L), _labels(2, 4, L)),
    "probs(4,L)-target(3,L)": (_scores(4, L), _labels(2, 3, L)),
    "probs(1,L,2)-target(4,L,2)": (_scores(1, L, 2), _labels(2, 4, L, 2)),
    "labels(1,L)-target(4,L)": (_labels(2, 1, L), _labels(2, 4, L)),
    "probs(4,1)-target(4,1)": (_scores(4, 1), _labels(2, 4, 1)),  # one label where the metric has L
}
VALID = {
    "Binary": (_scores(6), _labels(2, 6)),
    "Multiclass": (_scores(6, C), _labels(C, 6)),
    "Multilabel": (_scores(6, L), _labels(2, 6, L)),
}


def _settings(**grid: list) -> list[dict[str, Any]]:
    return [dict(zip(grid, values, strict=True)) for values in itertools.product(*grid.values())]


COMMON = {"ignore_index": [None, -100, 0], "validate_args": [True, False]}


def _registry() -> list[tuple[str, list[dict[str, Any]], dict[str, tuple[torch.Tensor, torch.Tensor]]]]:
    table = []
    for name in STAT_FAMILY:
        extra = {"beta": [2.0]} if name == "FBetaScore" else {}
        averages = ["micro", "macro", "weighted", "none"]
        samplewise = ["global", "samplewise"]
        multiclass = _settings(
            num_classes=[C], average=averages, multidim_average=samplewise, top_k=[1, 2], **COMMON, **extra
        )
        table.append(("Multiclass" + name, multiclass, MULTICLASS_CASES))
        table.append(("Binary" + name, _settings(multidim_average=samplewise, **COMMON, **extra), BINARY_CASES))
        multilabel = _settings(num_labels=[L], average=averages, multidim_average=samplewise, **COMMON, **extra)
        table.append(("Multilabel" + name, multilabel, MULTILABEL_CASES))
    for name in CONFUSION_FAMILY:
        table.append(("Multiclass" + name, _settings(num_classes=[C], **COMMON), MULTICLASS_CASES))
        table.append(("Binary" + name, _settings(**COMMON), BINARY_CASES))
        if name != "CohenKappa":
            table.append(("Multilabel" + name, _settings(num_labels=[L], **COMMON), MULTILABEL_CASES))
    samplewise = ["global", "samplewise"]
    table.append(
        ("MulticlassExactMatch", _settings(num_classes=[C], multidim_average=samplewise, **COMMON), MULTICLASS_CASES)
    )
    table.append(
        ("MultilabelExactMatch", _settings(num_labels=[L], multidim_average=samplewise, **COMMON), MULTILABEL_CASES)
    )
    table.append(("MulticlassCalibrationError", _settings(num_classes=[C], **COMMON), MULTICLASS_SCORE_CASES))
    table.append(("BinaryCalibrationError", _settings(**COMMON), BINARY_SCORE_CASES))
    modes = ["crammer-singer", "one-vs-all"]
    table.append(
        ("MulticlassHingeLoss", _settings(num_classes=[C], multiclass_mode=modes, **COMMON), MULTICLASS_SCORE_CASES)
    )
    table.append(("BinaryHingeLoss", _settings(**COMMON), BINARY_SCORE_CASES))
    return table


REGISTRY = _registry()


def _shape_error(name: str, preds: torch.Tensor, target: torch.Tensor) -> type[Exception]:
    """The task's shape error, of torchmetrics' type: multiclass validation, or ``_check_same_shape`` (binary and
    multilabel) and the multilabel ``num_labels`` check."""
    return ValueError if name.startswith("Multiclass") or preds.shape == target.shape else RuntimeError


def _reference_outcome(metric: Any, preds: torch.Tensor, target: torch.Tensor) -> Exception | None:
    """torchmetrics' ``update`` and ``compute`` on the batch: what it raises, or None where it gives a value."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            metric.update(preds.clone(), target.clone())
            metric.compute()
        except Exception as err:  # kernels raise RuntimeError, IndexError, NotImplementedError, ...
            return err
    return None


def test_registry_covers_every_accelerated_classification_class() -> None:
    """Each class of the families above (every accelerated classification class except the curves) is in the table."""
    covered = {name for name, _, _ in REGISTRY}
    curves = ("AUROC", "AveragePrecision", "PrecisionRecallCurve", "ROC", "AtFixed", "AtSensitivity", "AtSpecificity")
    # ... and the families with shape tests of their own (test_roc_scores, test_ranking, test_group_fairness).
    curves += ("EER", "LogAUC", "Ranking", "CoverageError", "Fairness", "GroupStatRates")
    task_specific = {
        name
        for name in ours.__all__
        if name.startswith(("Binary", "Multiclass", "Multilabel")) and not any(c in name for c in curves)
    }
    assert task_specific == covered


@pytest.mark.sweep
@pytest.mark.parametrize(("name", "settings", "cases"), REGISTRY, ids=[name for name, _, _ in REGISTRY])
def test_mismatched_shapes_raise_at_once(name: str, settings: list[dict[str, Any]], cases: dict) -> None:
    for kwargs, (case, (preds, target)) in itertools.product(settings, cases.items()):
        try:
            reference = getattr(tmc, name)(**kwargs)
        except ValueError:
            continue  # torchmetrics rejects the arguments (top_k > 1 with ignore_index, ...): nothing to compare
        accelerated = getattr(ours, name)(**kwargs)
        context = f"{name}({kwargs}) on {case}"
        error = _shape_error(name, preds, target)
        expected = _reference_outcome(reference, preds, target)
        with pytest.raises(error) as raised:
            accelerated.update(preds.clone(), target.clone())
        with pytest.raises(error) as raised_forward:
            accelerated(preds.clone(), target.clone())
        assert str(raised_forward.value) == str(raised.value), context
        assert isinstance(raised.value, ValueError), context  # every shape mismatch (ShapeMismatchError: RuntimeError)
        # Where torchmetrics returns a number, or fails in a kernel, ours raises all the same (listed deviations).
        if expected is not None and str(expected) == str(raised.value):
            assert isinstance(raised.value, type(expected)), context  # torchmetrics' own validation error
        if kwargs is settings[0]:
            # Nothing of the bad batch stayed: a valid batch then gives torchmetrics' value on that batch alone.
            good = VALID[next(task for task in VALID if name.startswith(task))]
            reference = getattr(tmc, name)(**kwargs)
            reference.update(*good)
            accelerated.update(*good)
            torch.testing.assert_close(accelerated.compute(), reference.compute(), equal_nan=True, msg=context)


@pytest.mark.parametrize(
    ("name", "kwargs", "preds", "target"),
    [
        ("MulticlassExactMatch", {"num_classes": 4, "ignore_index": -100}, _scores(4, 4), _labels(4, 1)),
        ("MulticlassAccuracy", {"num_classes": 4, "top_k": 1}, _scores(4, 4), _labels(4, 1)),
        ("MulticlassHingeLoss", {"num_classes": 4}, _scores(1, 4), _labels(4, 4)),
    ],
)
def test_batch_mismatch_message_names_both_shapes_in_order(
    name: str, kwargs: dict[str, Any], preds: torch.Tensor, target: torch.Tensor
) -> None:
    """torchmetrics' wording, then ``preds``' shape first and ``target``'s second (never swapped, never a kernel's)."""
    with pytest.raises(ValueError, match=r"^If `preds` have one dimension more than `target`, the shape of") as raised:
        getattr(ours, name)(**kwargs).update(preds, target)
    assert str(raised.value).endswith(f"Got `preds` with shape={preds.shape} and `target` with shape={target.shape}.")


@pytest.mark.parametrize("name", [f"Multiclass{name}" for name in STAT_FAMILY])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("ignore_index", [None, -1])
def test_top_k_with_float_labels_raises_at_once(name: str, dtype: torch.dtype, ignore_index: int | None) -> None:
    """``top_k > 1`` scatters the labels as indices: float labels fail in torchmetrics' update, and in ours at once."""
    kwargs = {"num_classes": 3, "top_k": 2, "ignore_index": ignore_index} | ({"beta": 2.0} if "FBeta" in name else {})
    preds, target = _scores(2, 3), torch.tensor([2.0, 0.0], dtype=dtype)
    with pytest.raises(RuntimeError) as expected:
        getattr(tmc, name)(**kwargs).update(preds, target)
    accelerated = getattr(ours, name)(**kwargs)
    for step in (accelerated.update, accelerated):
        with pytest.raises(type(expected.value), match="integer `target`"):
            step(preds, target)
    reference = getattr(tmc, name)(**kwargs)
    reference.update(preds, target.long())
    accelerated.update(preds, target.long())
    torch.testing.assert_close(accelerated.compute(), reference.compute(), equal_nan=True)
