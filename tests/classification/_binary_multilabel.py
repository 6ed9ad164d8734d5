"""Shared by the binary/multilabel test modules: the classes under test, their arguments, input builders."""

import warnings
from typing import Any

import torch
import torchmetrics.classification as tmc
from torch import Tensor

import torchmetrics_async.classification as tac
from tests.parity import assert_same

BINARY = [
    "BinaryStatScores",
    "BinaryAccuracy",
    "BinaryPrecision",
    "BinaryRecall",
    "BinaryF1Score",
    "BinaryFBetaScore",
    "BinarySpecificity",
    "BinaryHammingDistance",
    "BinaryNegativePredictiveValue",
    "BinaryConfusionMatrix",
]
MULTILABEL = [
    "MultilabelStatScores",
    "MultilabelAccuracy",
    "MultilabelPrecision",
    "MultilabelRecall",
    "MultilabelF1Score",
    "MultilabelFBetaScore",
    "MultilabelSpecificity",
    "MultilabelHammingDistance",
    "MultilabelNegativePredictiveValue",
    "MultilabelExactMatch",
    "MultilabelConfusionMatrix",
]
NAMES = BINARY + MULTILABEL
NUM_LABELS = 3
_ZERO_DIVISION = ("Precision", "Recall", "F1Score", "FBetaScore", "Specificity", "NegativePredictiveValue")


def is_multilabel(name: str) -> bool:
    return name.startswith("Multilabel")


def is_confmat(name: str) -> bool:
    return name.endswith("ConfusionMatrix")


def has_average(name: str) -> bool:
    """Multilabel stat-score family: takes ``average``."""
    return is_multilabel(name) and not is_confmat(name) and name != "MultilabelExactMatch"


def has_zero_division(name: str) -> bool:
    return name.endswith(_ZERO_DIVISION)


def base_kwargs(name: str, num_labels: int = NUM_LABELS) -> dict[str, Any]:
    """The arguments a class cannot do without."""
    kwargs: dict[str, Any] = {}
    if "FBeta" in name:
        kwargs["beta"] = 2.0
    if is_multilabel(name):
        kwargs["num_labels"] = num_labels
    return kwargs


def make_pair(name: str, **kwargs: Any) -> tuple[Any, Any]:
    """(torchmetrics, accelerated), built with the same arguments."""
    kwargs = {**base_kwargs(name), **kwargs}
    return getattr(tmc, name)(**kwargs), getattr(tac, name)(**kwargs)


def shape_for(name: str, batch: int, extra: tuple[int, ...] = ()) -> tuple[int, ...]:
    return (batch, NUM_LABELS, *extra) if is_multilabel(name) else (batch, *extra)


def call(metric: Any, kind: str, preds: Tensor, target: Tensor) -> tuple[Any, Exception | None]:
    """``metric.update`` or ``metric(...)``; returns (output, exception). Warnings (0/0 in a normalized confusion
    matrix) are torchmetrics' business here, not what these tests compare."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return (metric(preds, target) if kind == "forward" else metric.update(preds, target)), None
        except Exception as err:  # compared by type with torchmetrics' exception
            return None, err


def compute(metric: Any) -> tuple[Any, Exception | None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return metric.compute(), None
        except Exception as err:  # compared by type with torchmetrics' exception
            return None, err


def assert_states_equal(ours: Any, reference: Any) -> None:
    """Every torchmetrics state (ours may have more: the deferred-check flags) holds the same values."""
    for key in reference._defaults:
        assert_same(getattr(ours, key), getattr(reference, key), exact=True, where=key)


def run_side_by_side(reference: Any, ours: Any, steps: list[tuple[str, Tensor, Tensor]]) -> None:
    """Same steps on both: same eager exceptions (type and message), forward values, compute and states.

    After an eager exception the states are not comparable (torchmetrics' ``forward`` leaves its states reset when
    its batch ``compute`` raises), so the run stops there.
    """
    for kind, preds, target in steps:
        expected, ref_err = call(reference, kind, preds.clone(), target.clone())
        before = preds.clone(), target.clone()
        actual, err = call(ours, kind, preds, target)
        torch.testing.assert_close((preds, target), before, rtol=0, atol=0, equal_nan=True)  # inputs untouched
        assert isinstance(err, type(ref_err)), f"{kind}: torchmetrics {ref_err!r}, accelerated {err!r}"
        if ref_err is not None:
            assert str(err) == str(ref_err)
            return
        if kind == "forward":
            torch.testing.assert_close(actual, expected, equal_nan=True)
    actual, err = compute(ours)
    expected, ref_err = compute(reference)
    assert type(err) is type(ref_err), f"compute: torchmetrics {ref_err!r}, accelerated {err!r}"
    if ref_err is None:
        torch.testing.assert_close(actual, expected, equal_nan=True)
    assert_states_equal(ours, reference)
