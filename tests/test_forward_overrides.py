"""forward() honours a subclass's update()/compute(): torchmetrics' semantics, without host syncs.

For every registered class, a subclass that overrides ``update`` (remapping its inputs) or ``compute`` (returning a
dict, as torchmetrics' ``test_with_custom_prefix_postfix`` does) is built twice, on the accelerated class and on the
torchmetrics class, and both are fed the same ``forward``/``update`` steps, alone and in a ``MetricCollection``.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
import torchmetrics
from torch import Tensor

import torchmetrics_async as ta
from tests.example_families import is_task_wrapper as _is_task_wrapper
from tests.examples import example_for
from tools.coverage import FORWARD_CAVEATS
from torchmetrics_async.accelerate import patch, registry
from torchmetrics_async.metric import uses_one_pass_forward
from torchmetrics_async.registry import torchmetrics_origin
from torchmetrics_async.testing import count_host_syncs, no_host_sync

# Task wrappers (Accuracy(task=...)) build another class in __new__: a subclass of one is not a subclass of what it
# builds, so there is nothing to override.
CLASSES = sorted(
    (cls for origin, cls in registry().items() if not _is_task_wrapper(origin)), key=lambda cls: cls.__name__
)
# The documented host reads of forward() under the examples' arguments (coverage.FORWARD_CAVEATS): CatMetric drops NaNs,
# Spearman/Kendall rank the batch, unbinned curves have data-dependent shapes, retrieval groups per query.
SYNCS_IN_FORWARD = {origin.__name__ for origin in FORWARD_CAVEATS}
# Their compute() is torchmetrics' own (it reads the host); an overriding subclass's forward() runs it on the batch
# (README, "What is accelerated"). Only the one-pass forward of the class itself computes the batch on the device.
COMPUTE_READS_HOST = {cls.__name__ for cls in CLASSES if cls.__module__ == "torchmetrics_async.clustering"}


def _remapped(x: Any) -> Any:
    """What the update override feeds its base: values (scores become logits) doubled, labels reordered.

    Detection's lists of per-image dicts: each tensor remapped.
    """
    if isinstance(x, list):
        return [{key: _remapped(value) for key, value in item.items()} for item in x]
    return x * 2 if x.is_floating_point() else x.flip(0)


def _overriding(base: type, what: str) -> type:
    if what == "update":

        class UpdateOverride(base):
            def update(self, *args: Any, **kwargs: Any) -> None:
                super().update(*(_remapped(a) for a in args), **kwargs)

        return UpdateOverride

    class ComputeOverride(base):
        def compute(self) -> Any:
            return {"value": super().compute(), "extra": torch.tensor(1.0)}

    return ComputeOverride


def _steps(cls: type) -> list[tuple[str, tuple[Tensor, ...]]]:
    return [(kind, example_for(cls, seed).inputs) for seed, kind in enumerate(["forward", "update", "forward"] * 2)]


def _run(metric: Any, steps: list[tuple[str, tuple[Tensor, ...]]]) -> list[Any]:
    out = []
    for kind, inputs in steps:
        out.append(metric(*inputs) if kind == "forward" else metric.update(*inputs))
    out.append(metric.compute())
    return out


@pytest.mark.sweep
@pytest.mark.parametrize("what", ["update", "compute"])
@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_overriding_subclass_matches_torchmetrics(cls: type, what: str) -> None:
    init = example_for(cls).init
    ours, theirs = _overriding(cls, what)(**init), _overriding(torchmetrics_origin(cls), what)(**init)
    assert not uses_one_pass_forward(type(ours))
    torch.testing.assert_close(_run(ours, _steps(cls)), _run(theirs, _steps(cls)), equal_nan=True)


@pytest.mark.sweep
@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_overriding_subclass_in_a_collection_matches_torchmetrics(cls: type) -> None:
    init = example_for(cls).init
    ours = ta.MetricCollection({"u": _overriding(cls, "update")(**init), "c": _overriding(cls, "compute")(**init)})
    theirs = torchmetrics.MetricCollection(
        {
            "u": _overriding(torchmetrics_origin(cls), "update")(**init),
            "c": _overriding(torchmetrics_origin(cls), "compute")(**init),
        }
    )
    torch.testing.assert_close(_run(ours, _steps(cls)), _run(theirs, _steps(cls)), equal_nan=True)


@pytest.mark.parametrize("what", ["update", "compute"])
@pytest.mark.parametrize(
    "cls", [c for c in CLASSES if c.__name__ not in SYNCS_IN_FORWARD | COMPUTE_READS_HOST], ids=lambda c: c.__name__
)
def test_forward_of_an_overriding_subclass_makes_no_host_sync(cls: type, what: str) -> None:
    example = example_for(cls)
    metric = _overriding(cls, what)(**example.init)
    inputs = example.inputs
    with no_host_sync():
        metric(*inputs)
        metric(*inputs)


@pytest.mark.parametrize("cls", [c for c in CLASSES if c.__name__ in COMPUTE_READS_HOST], ids=lambda c: c.__name__)
def test_forward_of_an_overriding_subclass_reads_the_host_where_compute_does(cls: type) -> None:
    example = example_for(cls)
    with no_host_sync():
        cls(**example.init)(*example.inputs)  # the class itself: its one-pass forward
    with count_host_syncs() as syncs:
        _overriding(cls, "update")(**example.init)(*example.inputs)
    assert syncs.total > 0


def test_one_pass_forward_applies_to_every_registered_class_that_has_one() -> None:
    # The classes that implement the batch-statistics hooks (``_batch_value`` among them).
    one_pass = [cls for cls in registry().values() if isinstance(cls, type) and hasattr(cls, "_batch_value")]
    assert len(one_pass) > 50
    for cls in one_pass:
        assert uses_one_pass_forward(cls), cls


def test_an_override_assigned_after_the_class_was_made_is_honoured() -> None:
    class Late(ta.MeanMetric):
        pass

    metric, reference = Late(), torchmetrics.MeanMetric()
    assert uses_one_pass_forward(Late)
    torch.testing.assert_close(metric(torch.tensor([1.0, 2.0])), reference(torch.tensor([1.0, 2.0])))

    def doubled(self: Any, value: Tensor, weight: Any = 1.0) -> None:
        ta.MeanMetric.update(self, value * 2, weight)

    Late.update = doubled
    metric = Late()
    assert not uses_one_pass_forward(Late)
    assert metric(torch.tensor([1.0, 2.0])).item() == 3.0


def test_the_issue_example_doubled_mean() -> None:
    """``Doubled(MeanMetric)`` through forward gave 2.6 where torchmetrics gives 5.0."""

    class Doubled(ta.MeanMetric):
        def update(self, value: Any, weight: Any = 1.0) -> None:
            super().update(value * 2, weight)

    class TmDoubled(torchmetrics.MeanMetric):
        def update(self, value: Any, weight: Any = 1.0) -> None:
            super().update(value * 2, weight)

    ours, theirs = Doubled(), TmDoubled()
    for value in (torch.tensor([1.0, 2.0]), torch.tensor(3.0), torch.tensor([4.0])):
        torch.testing.assert_close(ours(value), theirs(value))
    assert ours.compute().item() == theirs.compute().item() == 5.0


def test_subclasses_defined_after_patch_inherit_the_accelerated_class_and_its_semantics() -> None:
    with patch():

        class Remapped(torchmetrics.classification.MulticlassAccuracy):
            def update(self, preds: Tensor, target: Tensor) -> None:
                super().update(preds, (target + 1) % 3)

    class Reference(torchmetrics.classification.MulticlassAccuracy):
        def update(self, preds: Tensor, target: Tensor) -> None:
            super().update(preds, (target + 1) % 3)

    assert issubclass(Remapped, ta.classification.MulticlassAccuracy)
    ours, theirs = Remapped(num_classes=3), Reference(num_classes=3)
    for seed in range(3):
        preds, target = example_for(ta.classification.MulticlassAccuracy, seed).inputs
        torch.testing.assert_close(ours(preds, target), theirs(preds, target))
    torch.testing.assert_close(ours.compute(), theirs.compute())
    assert not math.isnan(ours.compute().item())


def test_a_raising_forward_of_an_overriding_subclass_keeps_what_the_metric_held() -> None:
    """A batch-size mismatch in ``forward`` raises and changes nothing (torchmetrics' forward had reset first)."""

    class Checked(ta.MeanSquaredError):
        def update(self, preds: Tensor, target: Tensor) -> None:
            super().update(preds, target)

    good = [(torch.tensor([1.0, 2.0, 4.0]), torch.tensor([0.0, 2.0, 1.0])), (torch.tensor([3.0]), torch.tensor([5.0]))]
    metric, reference = Checked(), torchmetrics.MeanSquaredError()
    metric(*good[0])
    reference.update(*good[0])
    compute_on_cpu, enable_grad = metric.compute_on_cpu, metric._enable_grad
    with pytest.raises(RuntimeError, match="same shape"):
        metric(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0, 3.0]))
    assert (metric.update_count, metric.compute_on_cpu, metric._enable_grad) == (1, compute_on_cpu, enable_grad)
    metric(*good[1])
    reference.update(*good[1])
    torch.testing.assert_close(metric.compute(), reference.compute())
