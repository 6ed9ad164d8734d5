"""``patch()`` accelerates what is built while patched, whatever name its class was found by (issue 29, item 2).

The classes below are bound at import time, before any test patches: the Hydra/Lightning way, where a module imports
``torchmetrics`` names at its top and ``patch()`` runs later. Every value is compared with torchmetrics' own class.
"""

import copy
import pickle
import sys
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torchmetrics
from torchmetrics import MetricCollection  # bound before patch()
from torchmetrics.aggregation import MeanMetric, SumMetric  # bound before patch()
from torchmetrics.classification import MulticlassF1Score  # bound before patch()
from torchmetrics.wrappers import Running  # bound before patch()

import torchmetrics_async as tma
from tests.example_families import is_task_wrapper
from tests.examples import example_for
from tests.parity import assert_same
from tests.test_decorators import SquaredTotal
from tests.test_distributed_unit import UserCollection
from torchmetrics_async import accelerate, patch, unpatch
from torchmetrics_async.distributed.collection import fused_collection_class
from torchmetrics_async.metric import SyncFreeMixin
from torchmetrics_async.registry import accelerated_class_for, registry
from torchmetrics_async.testing import no_host_sync


class UserF1(MulticlassF1Score):
    """A user's subclass of a torchmetrics class, defined before ``patch()``, with its own state and ``__init__``."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.add_state("batches", torch.tensor(0), dist_reduce_fx="sum")

    def update(self, preds: torch.Tensor, target: torch.Tensor) -> None:
        super().update(preds, target)
        self.batches += 1


class UserMean(MeanMetric):
    """A user's subclass without an ``__init__`` of its own."""


class Tangled(MeanMetric, SyncFreeMixin):
    """No consistent MRO with the accelerated ``MeanMetric`` (its mixin comes after torchmetrics' class here)."""


@pytest.fixture(autouse=True)
def _always_unpatch() -> Iterator[None]:
    unpatch()
    yield
    unpatch()


def _batch(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(8, 3, generator=g).softmax(-1), torch.randint(0, 3, (8,), generator=g)


CLASSES = sorted(
    ((origin, cls) for origin, cls in registry().items() if not is_task_wrapper(origin)),
    key=lambda item: (item[0].__module__, item[0].__name__),
)


@pytest.mark.parametrize(("origin", "accelerated"), CLASSES, ids=[o.__name__ for o, _ in CLASSES])
def test_every_torchmetrics_class_bound_before_patch_builds_its_accelerated_class(
    origin: type, accelerated: type
) -> None:
    """torchmetrics' class object itself (not a rebound name) builds the accelerated class while patched, not after."""
    init = example_for(origin).init
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with patch():
            built = origin(**init)
        after = origin(**init)
    assert type(built) is accelerated
    assert type(after) is origin


def test_class_imported_before_patch_is_accelerated_and_equal() -> None:
    with patch():
        metric = MulticlassF1Score(num_classes=3)
    ref = MulticlassF1Score(num_classes=3)
    assert type(metric) is tma.classification.MulticlassF1Score
    assert isinstance(metric, MulticlassF1Score)
    inputs = [_batch(seed) for seed in range(3)]
    with no_host_sync():
        for preds, target in inputs:
            metric.update(preds, target)
    for preds, target in inputs:
        ref.update(preds, target)
    assert_same(metric.compute(), ref.compute(), exact=True)


def test_user_subclass_defined_before_patch_is_rebased_as_accelerate_does() -> None:
    for cls, init in ((UserF1, {"num_classes": 3}), (UserMean, {})):
        with patch():
            metric = cls(**init)
        assert type(metric) is accelerated_class_for(cls)  # what accelerate() makes of it
        assert type(metric) is type(accelerate(cls(**init)))
        assert type(metric).__name__ == cls.__name__
        assert isinstance(metric, cls)
        assert isinstance(metric, SyncFreeMixin)
    with patch():
        metric = UserF1(num_classes=3)
    ref = UserF1(num_classes=3)
    assert type(ref) is UserF1
    inputs = [_batch(seed) for seed in range(3)]
    with no_host_sync():
        for preds, target in inputs[:2]:
            metric.update(preds, target)
    for preds, target in inputs[:2]:
        ref.update(preds, target)
    copied = pickle.loads(pickle.dumps(metric))  # pickles by re-deriving from the user's class
    assert type(copied) is type(metric)
    for m in (copied, ref):
        m.update(*inputs[2])
    assert_same(copied.compute(), ref.compute(), exact=True)
    assert copied.batches.item() == 3


def test_collection_built_after_patch_is_the_fused_collection() -> None:
    with patch():
        collection = MetricCollection({"mean": MeanMetric(), "sum": SumMetric()})
        mine = UserCollection([MeanMetric()])
    assert type(collection) is tma.MetricCollection
    assert type(mine) is fused_collection_class(UserCollection)
    assert mine.describe() == "mine"
    assert all(isinstance(member, SyncFreeMixin) for member in collection.values())
    assert type(MetricCollection([MeanMetric()])) is MetricCollection  # unpatched again
    assert type(pickle.loads(pickle.dumps(collection))) is tma.MetricCollection


def test_torchmetrics_running_bound_before_patch_is_adopted_as_accelerate_does() -> None:
    with patch():
        running = Running(SumMetric(), window=2)
    ref = Running(SumMetric(), window=2)
    assert type(running) is tma.wrappers.Running
    for x in (1.0, 2.0, 4.0):
        assert_same(running(torch.tensor(x)), ref(torch.tensor(x)))
    assert_same(running.compute(), ref.compute())
    with patch(), pytest.warns(UserWarning, match="SquaredTotal"):
        fallback = Running(SquaredTotal(), window=2)  # accelerate() cannot take it: it is left as it is, and says so
    assert type(fallback) is Running


def test_patch_names_once_what_it_cannot_accelerate() -> None:
    with patch():
        with pytest.warns(UserWarning, match=r"patch\(\) cannot accelerate Tangled: .*consistent MRO") as first:
            Tangled()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert type(Tangled()) is Tangled  # once per class

        class Late(MulticlassF1Score):  # defined while patched from a name bound before, with its own __init__
            def __init__(self) -> None:
                super().__init__(num_classes=2)

        with pytest.warns(UserWarning, match=r"patch\(\) cannot accelerate .*Late: its own __init__") as late:
            assert type(Late()) is Late
    assert len(first) == 1
    assert len(late) == 1
    assert first[0].filename == __file__  # points at the user's line


def test_copies_made_while_patched_keep_their_class() -> None:
    """No ``__init__`` runs for a copy: it stays what it was. Unpickling finds the class by its (rebound) name."""
    plain = MeanMetric()
    plain.update(torch.tensor([1.0, 2.0]))
    pickled = pickle.dumps(plain)  # while patched, torchmetrics' names are the accelerated classes: pickle refuses
    with patch():
        copies = [copy.deepcopy(plain), plain.clone()]
        unpickled = pickle.loads(pickled)
    for copied in copies:
        assert type(copied) is MeanMetric
        assert_same(copied.compute(), plain.compute())
    assert type(unpickled) is tma.MeanMetric
    assert_same(unpickled.compute(), plain.compute())


def _class_attributes() -> dict[tuple[str, str], int]:
    """``{(class, attribute): id(value)}`` for every torchmetrics metric/collection class and subclass loaded."""
    found, todo = set(), [torchmetrics.Metric, MetricCollection]
    while todo:
        cls = todo.pop()
        if cls not in found:
            found.add(cls)
            todo.extend(cls.__subclasses__())
    return {
        (f"{cls.__module__}.{cls.__qualname__}", attr): id(value) for cls in found for attr, value in vars(cls).items()
    }


def _module_attributes() -> dict[tuple[str, str], int]:
    return {
        (name, attr): id(value)
        for name, module in list(sys.modules.items())
        if module is not None and name.split(".")[0] == "torchmetrics"
        for attr, value in list(vars(module).items())
    }


def test_unpatch_restores_every_name_and_hook() -> None:
    UserF1(num_classes=3)  # derived classes made while patched may be new; those that existed must be as they were
    modules, classes = _module_attributes(), _class_attributes()
    patch()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            MulticlassF1Score(num_classes=3), UserF1(num_classes=3), MetricCollection([MeanMetric()])
        hooked_now = _class_attributes()
        assert any(hooked_now.get(key) != ident for key, ident in classes.items())  # patch() did hook something
        assert _module_attributes() != modules
    finally:
        unpatch()
    after = _class_attributes()
    assert {key: after.get(key) for key in classes} == classes
    assert not {key for key in after if key not in classes and key[0] in {cls for cls, _ in classes}}
    assert _module_attributes() == modules
    assert type(MulticlassF1Score(num_classes=3)) is MulticlassF1Score
