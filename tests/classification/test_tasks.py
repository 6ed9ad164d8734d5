"""Task wrappers (``Accuracy(task=...)``, ...): accelerated instances, torchmetrics' values, accelerate(), patch()."""

import inspect

import pytest
import torch
import torchmetrics

import torchmetrics_async as ta
import torchmetrics_async.classification as tac
from torchmetrics_async.accelerate import registry
from torchmetrics_async.metric import SyncFreeMixin

WRAPPERS = [
    "StatScores",
    "Accuracy",
    "Precision",
    "Recall",
    "F1Score",
    "FBetaScore",
    "Specificity",
    "HammingDistance",
    "NegativePredictiveValue",
    "ExactMatch",
    "ConfusionMatrix",
]
TASKS = {
    "binary": {},
    "multiclass": {"num_classes": 4},
    "multilabel": {"num_labels": 3},
}


def _inputs(task, seed):
    g = torch.Generator().manual_seed(seed)
    if task == "binary":
        return torch.rand(8, generator=g), torch.randint(0, 2, (8,), generator=g)
    if task == "multiclass":
        return torch.randn(8, 4, generator=g), torch.randint(0, 4, (8,), generator=g)
    return torch.rand(8, 3, generator=g), torch.randint(0, 2, (8, 3), generator=g)


def _cases():
    for name in WRAPPERS:
        for task in TASKS:
            if not (name == "ExactMatch" and task == "binary"):  # torchmetrics has no binary exact match
                yield name, task


@pytest.mark.parametrize(("name", "task"), list(_cases()))
def test_wrapper_returns_the_accelerated_task_metric_with_torchmetrics_values(name, task):
    kwargs = {"task": task, **TASKS[task]}
    reference = getattr(torchmetrics, name)(**kwargs)
    ours = getattr(ta, name)(**kwargs)
    assert type(ours) is registry()[type(reference)]
    assert isinstance(ours, type(reference))
    assert isinstance(ours, SyncFreeMixin)
    for seed in range(3):
        preds, target = _inputs(task, seed)
        torch.testing.assert_close(ours(preds, target), reference(preds, target))
    torch.testing.assert_close(ours.compute(), reference.compute())


def test_wrapper_arguments_reach_the_task_metric():
    metric = ta.FBetaScore(task="multilabel", beta=0.5, num_labels=3, average="none", threshold=0.3, ignore_index=-1)
    assert (metric.beta, metric.num_labels, metric.average, metric.threshold, metric.ignore_index) == (
        0.5,
        3,
        "none",
        0.3,
        -1,
    )
    assert metric.invalid_target is not None  # the deferred checks are registered on the converted instance


def test_binary_exact_match_is_rejected_like_torchmetrics():
    with pytest.raises(ValueError) as theirs:  # noqa: PT011 - compared with ours below
        torchmetrics.ExactMatch(task="binary")
    with pytest.raises(ValueError) as ours:  # noqa: PT011
        ta.ExactMatch(task="binary")
    assert str(ours.value) == str(theirs.value)


@pytest.mark.parametrize(
    "kwargs",
    [{"task": "multiclass"}, {"task": "multilabel"}, {"task": "nonsense"}, {"task": "binary", "threshold": 2.0}],
    ids=str,
)
def test_argument_errors_are_torchmetrics_own(kwargs):
    with pytest.raises(ValueError) as theirs:  # noqa: PT011 - compared with ours below
        torchmetrics.Accuracy(**kwargs)
    with pytest.raises(ValueError) as ours:  # noqa: PT011
        ta.Accuracy(**kwargs)
    assert str(ours.value) == str(theirs.value)


@pytest.mark.parametrize("name", WRAPPERS)
def test_wrappers_keep_torchmetrics_name_base_and_signature(name):
    ours, theirs = getattr(ta, name), getattr(torchmetrics, name)
    assert ours is getattr(tac, name)
    assert name in ta.__all__
    assert ours.__name__ == name
    assert issubclass(ours, theirs)
    assert inspect.signature(ours) == inspect.signature(theirs)
    assert ta.accelerate(theirs) is ours  # registered: accelerate(class) maps the wrapper too


@pytest.mark.parametrize("task", list(TASKS))
def test_accelerate_converts_a_wrapper_built_metric_mid_window(task):
    kwargs = {"task": task, **TASKS[task]}
    reference, metric = torchmetrics.Accuracy(**kwargs), torchmetrics.Accuracy(**kwargs)
    preds, target = _inputs(task, 0)
    reference.update(preds, target)
    metric.update(preds, target)
    assert ta.accelerate(metric) is metric
    assert isinstance(metric, SyncFreeMixin)
    preds, target = _inputs(task, 1)
    torch.testing.assert_close(metric(preds, target), reference(preds, target))
    torch.testing.assert_close(metric.compute(), reference.compute())


def test_patch_makes_torchmetrics_wrappers_build_accelerated_metrics():
    original_wrapper = torchmetrics.F1Score  # a name imported before patch(): still torchmetrics' own wrapper
    accelerated_multiclass = registry()[torchmetrics.classification.MulticlassAccuracy]
    with ta.patch():
        assert torchmetrics.F1Score is ta.F1Score
        assert torchmetrics.classification.MultilabelF1Score is tac.MultilabelF1Score
        metric = torchmetrics.F1Score(task="multilabel", num_labels=3)
        assert type(metric) is tac.MultilabelF1Score
        # torchmetrics' wrapper looks the task classes up in its module's globals, which patch() rebinds.
        assert type(original_wrapper(task="multilabel", num_labels=3)) is tac.MultilabelF1Score
        assert type(original_wrapper(task="binary")) is tac.BinaryF1Score
        multiclass = torchmetrics.Accuracy(task="multiclass", num_classes=3)
        assert type(multiclass) is accelerated_multiclass
    assert torchmetrics.F1Score is original_wrapper
    metric = torchmetrics.F1Score(task="multilabel", num_labels=3)
    assert type(metric) is torchmetrics.classification.MultilabelF1Score
    assert not isinstance(metric, SyncFreeMixin)
    assert type(ta.F1Score(task="multilabel", num_labels=3)) is tac.MultilabelF1Score  # ours is independent of it
