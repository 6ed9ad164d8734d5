"""Metric updates inside ``torch.compile(fullgraph=True)``: one graph, no graph break, no recompile, eager's values.

Each case compiles a step that calls ``update()`` or ``forward()`` with ``fullgraph=True`` (a graph break raises) under
``error_on_recompile`` (a recompile raises), runs it on :data:`STEPS` batches of new values with the same shapes, counts
the graphs the backend received, and compares the step outputs, ``compute()`` and ``update_count`` with an eager twin.
Representatives only (Dynamo with the ``eager`` backend, a few seconds in all); ``python -m benchmarks.compile_sweep``
covers every registered class and argument combination.
"""

from __future__ import annotations

import math
import pickle
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torchmetrics
from torch import nn

import torchmetrics_async as ta
from tests._compile import TOLERANCE, assert_same_deferred_error, check_metric, compile_and_run
from tests.parity import assert_same
from tools.demo import build_metrics, update_metrics
from torchmetrics_async import accelerate
from torchmetrics_async.classification import (
    BinaryF1Score,
    MulticlassAccuracy,
    MulticlassConfusionMatrix,
    MulticlassF1Score,
    MultilabelPrecision,
)

STEPS = 20
NUM_CLASSES = 5


def _values(shape: tuple[int, ...], nan_at: int | None = None) -> list[tuple[torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    batches = []
    for step in range(STEPS):
        value = torch.randn(shape, generator=generator)
        if step == nan_at:
            value = value.fill_(math.nan) if not shape else value.index_fill_(0, torch.tensor([0]), math.nan)
        batches.append((value,))
    return batches


STRATEGIES = ["warn", "error", "ignore", "disable", 0.5]


@pytest.mark.sweep
@pytest.mark.parametrize("use_forward", [False, True], ids=["update", "forward"])
@pytest.mark.parametrize("shape", [(), (8,)], ids=["0dim", "batched"])
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_mean_metric_one_graph(strategy: Any, shape: tuple, use_forward: bool) -> None:
    # A NaN at step 5 exercises the strategy (under "error" the batch value is NaN and compute() raises below).
    batches = _values(shape, nan_at=5)
    if strategy == "error":
        with pytest.raises(RuntimeError, match=r"^Encountered `nan` values in tensor$"):
            check_metric(lambda: ta.MeanMetric(nan_strategy=strategy), batches, use_forward)
        return
    report = check_metric(lambda: ta.MeanMetric(nan_strategy=strategy), batches, use_forward)
    assert (report.graphs, report.recompiles, report.graph_breaks) == (1, 0, 0), report


@pytest.mark.slow
@pytest.mark.parametrize("use_forward", [False, True], ids=["update", "forward"])
@pytest.mark.parametrize(
    ("cls", "strategy"),
    [(ta.SumMetric, "warn"), (ta.SumMetric, 1.0), (ta.MaxMetric, "ignore"), (ta.MinMetric, "disable")],
)
def test_aggregators_one_graph(cls: type, strategy: Any, use_forward: bool) -> None:
    report = check_metric(lambda: cls(nan_strategy=strategy), _values((8,), nan_at=3), use_forward)
    assert (report.graphs, report.recompiles) == (1, 0), report


@pytest.mark.slow
def test_weights_and_constant_numbers_one_graph() -> None:
    """Tensor weights, and Python numbers that are constants of the step (values, weights), trace into one graph."""
    generator = torch.Generator().manual_seed(1)
    batches = [(torch.randn(6, generator=generator), torch.rand(6, generator=generator)) for _ in range(STEPS)]
    report = check_metric(lambda: ta.MeanMetric(nan_strategy="ignore"), batches, use_forward=True)
    assert (report.graphs, report.recompiles) == (1, 0), report

    eager, compiled = ta.MeanMetric(), ta.MeanMetric()

    def step(metric: Any, x: torch.Tensor) -> None:
        metric.update(x, weight=2.0)
        metric.update(1.5)

    _, report = compile_and_run(lambda x: step(compiled, x), _values((4,)))
    for (x,) in _values((4,)):
        step(eager, x)
    assert (report.graphs, report.recompiles) == (1, 0), report
    assert_same(compiled.compute(), eager.compute(), **TOLERANCE)
    assert compiled.update_count == eager.update_count == 2 * STEPS


class _DoubledMean(ta.MeanMetric):
    """A user's subclass: its own ``update``, so ``forward()`` is torchmetrics' (reset, update, compute, merge)."""

    def update(self, value: torch.Tensor, weight: float = 1.0) -> None:
        super().update(value * 2, weight)


class _FullStateDoubledMean(_DoubledMean):
    """torchmetrics' full-state forward (update twice, save and restore every state and the update count)."""

    full_state_update = True


@pytest.mark.slow
@pytest.mark.parametrize("cls", [_DoubledMean, _FullStateDoubledMean], ids=["reduce-state", "full-state"])
def test_torchmetrics_forward_one_graph(cls: type) -> None:
    """torchmetrics' forward saves and restores the update count: compiled, the count stays on the device.

    A NaN at step 6 under ``nan_strategy="error"``: that batch's value is NaN and ``compute()`` names update 6, as in
    an eager twin; eager forwards after the compiled ones go on counting the same window.
    """
    batches = _values((4,), nan_at=5)
    compiled, eager = cls(nan_strategy="error"), cls(nan_strategy="error")
    outputs, report = compile_and_run(compiled, batches[:12])
    assert (report.graphs, report.recompiles, report.graph_breaks) == (1, 0, 0), report
    outputs += [compiled(*batch) for batch in batches[12:]]
    assert_same(outputs, [eager(*batch) for batch in batches], **TOLERANCE)
    assert compiled.update_count == eager.update_count == STEPS
    assert_same_deferred_error(compiled, eager, update=6)


def _classification_batches(kind: str, samples: int = 8) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(2)
    batches = []
    for _ in range(STEPS):
        if kind == "binary":
            batches.append((torch.rand(samples, generator=generator), torch.randint(0, 2, (samples,))))
        elif kind == "multilabel":
            batches.append((torch.rand(samples, 3, generator=generator), torch.randint(0, 2, (samples, 3))))
        elif kind == "samplewise":
            preds = torch.randn(samples, NUM_CLASSES, 4, generator=generator)
            batches.append((preds, torch.randint(0, NUM_CLASSES, (samples, 4), generator=generator)))
        else:
            preds = torch.randn(samples, NUM_CLASSES, generator=generator)
            target = torch.randint(-1, NUM_CLASSES, (samples,), generator=generator)  # -1: ignore_index below
            batches.append((preds, target.clamp(min=0) if kind == "multiclass" else target))
    return batches


CLASSIFICATION = {
    "multiclass-micro": (lambda: MulticlassAccuracy(NUM_CLASSES, average="micro"), "multiclass"),
    "multiclass-macro-top2": (lambda: MulticlassF1Score(NUM_CLASSES, top_k=2), "multiclass"),
    "multiclass-ignore-index": (lambda: MulticlassAccuracy(NUM_CLASSES, ignore_index=-1), "ignored"),
    "confusion-matrix-normalized": (lambda: MulticlassConfusionMatrix(NUM_CLASSES, normalize="true"), "multiclass"),
    "binary-f1": (lambda: BinaryF1Score(threshold=0.3), "binary"),
    "multilabel-precision-macro": (lambda: MultilabelPrecision(3, average="macro"), "multilabel"),
}


@pytest.mark.slow
@pytest.mark.parametrize("use_forward", [False, True], ids=["update", "forward"])
@pytest.mark.parametrize("case", sorted(CLASSIFICATION))
def test_classification_one_graph(case: str, use_forward: bool) -> None:
    make, kind = CLASSIFICATION[case]
    report = check_metric(make, _classification_batches(kind), use_forward)
    assert (report.graphs, report.recompiles, report.graph_breaks) == (1, 0, 0), report


LIST_STATES = {
    "CatMetric": (lambda: ta.CatMetric(nan_strategy="disable"), lambda: _values((4,))),
    "MulticlassAccuracy-samplewise": (
        lambda: MulticlassAccuracy(NUM_CLASSES, multidim_average="samplewise", average="none"),
        lambda: _classification_batches("samplewise"),
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(LIST_STATES))
def test_growing_states_recompile_up_to_the_limit_then_run_eagerly(case: str) -> None:
    """List states grow: Dynamo guards on their lengths, so every step recompiles.

    Documented (docs/compile.md): with ``fullgraph=False`` each step compiles a new graph until
    Dynamo's ``recompile_limit``, then the step runs eagerly, with eager's values; ``fullgraph=True`` fails there.
    """
    import torch._dynamo

    from tests._compile import CountingBackend

    make, batches = LIST_STATES[case]
    compiled, eager = make(), make()
    torch._dynamo.reset()
    counting = CountingBackend()
    step = torch.compile(compiled.update, backend=counting)
    for batch in batches()[:12]:
        step(*batch)
        eager.update(*batch)
    assert counting.graphs == torch._dynamo.config.recompile_limit
    assert_same(compiled.compute(), eager.compute(), **TOLERANCE)


@pytest.mark.slow
def test_deferred_check_under_compile_is_raised_by_compute() -> None:
    """A label out of range at step 7 of a compiled window: compute() raises it, reset() starts over."""
    batches = _classification_batches("multiclass")
    batches[6] = (batches[6][0], torch.full_like(batches[6][1], NUM_CLASSES + 3))
    metric = MulticlassAccuracy(NUM_CLASSES)
    _, report = compile_and_run(metric.update, batches)
    assert (report.graphs, report.recompiles) == (1, 0), report
    with pytest.raises(RuntimeError, match=r"^Detected more unique values in `target`"):
        metric.compute()
    metric.reset()
    assert metric.update_count == 0
    metric.update(*batches[0])  # eager after compiled: the count goes on from the host side
    assert metric.update_count == 1


def _received(door: str) -> Any:
    """A ``MeanMetric`` whose states arrived through a door: unpickled, or loaded from another metric's state dict."""
    source = ta.MeanMetric()
    source.persistent(True)
    if door == "unpickled":
        return pickle.loads(pickle.dumps(source))
    metric = ta.MeanMetric()
    metric.load_state_dict(source.state_dict())
    return metric


@pytest.mark.slow
@pytest.mark.parametrize("use_forward", [False, True], ids=["update", "forward"])
@pytest.mark.parametrize("door", ["unpickled", "loaded"])
def test_one_graph_after_states_arrive_at_a_door(door: str, use_forward: bool) -> None:
    """States are copied at the door they arrive by: the compiled step finds them owned from its first call."""
    report = check_metric(lambda: _received(door), _values((8,)), use_forward)
    assert (report.graphs, report.recompiles, report.graph_breaks) == (1, 0, 0), report


@pytest.mark.slow
def test_compiled_and_eager_updates_mix() -> None:
    """Eager updates, then compiled ones, then eager again: one count, one window, eager's values."""
    batches = _values((4,), nan_at=8)
    mixed, eager = ta.MeanMetric(nan_strategy="error"), ta.MeanMetric(nan_strategy="error")
    for batch in batches[:3]:
        mixed.update(*batch)
    compile_and_run(mixed.update, batches[3:10])
    for batch in batches[10:]:
        mixed.update(*batch)
    for batch in batches:
        eager.update(*batch)
    assert mixed.update_count == eager.update_count == STEPS
    assert mixed.state_dict().keys() == eager.state_dict().keys()
    for metric in (mixed, eager):
        with pytest.raises(RuntimeError, match=r"^Encountered `nan` values in tensor$"):
            metric.compute()


def _collection(compute_groups: bool) -> Any:
    metrics = {name: m for name, m in build_metrics(NUM_CLASSES).items() if name != "avg_loss"}
    return accelerate(torchmetrics.MetricCollection(metrics, compute_groups=compute_groups))


@pytest.mark.slow
@pytest.mark.parametrize("groups", ["unformed", "formed-eagerly", "disabled"])
def test_metric_collection_one_graph(groups: str) -> None:
    batches = _classification_batches("multiclass")
    compiled, eager = _collection(groups != "disabled"), _collection(groups != "disabled")
    if groups == "formed-eagerly":  # the first update (eager) forms the compute groups: compiled steps use them
        compiled.update(*batches[0])
        eager.update(*batches[0])
        batches = batches[1:]
        assert len(compiled._groups) == 1
    _, report = compile_and_run(compiled.update, batches)
    for batch in batches:
        eager.update(*batch)
    assert (report.graphs, report.recompiles, report.graph_breaks) == (1, 0, 0), report
    assert_same(compiled.compute(), eager.compute(), **TOLERANCE)
    for name in compiled:
        assert compiled[name].update_count == eager[name].update_count


class _Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, NUM_CLASSES))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def _model_batches(steps: int = STEPS) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(3)
    return [(torch.randn(32, 16, generator=generator), torch.randint(0, NUM_CLASSES, (32,))) for _ in range(steps)]


def _eval_step(model: nn.Module, metrics: dict[str, Any]) -> Callable:
    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            output = model(x)
            loss = nn.functional.cross_entropy(output, y)
            update_metrics(metrics, loss, output, y)
        return loss

    return step


@pytest.mark.slow
def test_eval_step_with_the_five_demo_metrics_compiles_to_one_graph() -> None:
    """The article's eval step (model, loss, five metrics), AOTAutograd traced: one graph, no recompile, eager's values.

    ``benchmarks/compile_bench.py`` runs the same step through Inductor (and compares its values with eager's).
    """
    torch.manual_seed(0)
    model = _Model().eval()
    compiled, eager = accelerate(build_metrics(NUM_CLASSES)), accelerate(build_metrics(NUM_CLASSES))
    batches = _model_batches()
    losses, report = compile_and_run(_eval_step(model, compiled), batches, backend="aot_eager")
    expected = [_eval_step(model, eager)(*batch) for batch in batches]
    assert (report.graphs, report.recompiles, report.graph_breaks) == (1, 0, 0), report
    assert_same(losses, expected, **TOLERANCE)
    for name in eager:
        assert_same(compiled[name].compute(), eager[name].compute(), **TOLERANCE)


@pytest.mark.slow
def test_training_step_breaks_only_at_backward() -> None:
    """A training step with the metrics: Dynamo splits it where ``backward()`` is, and nowhere because of metrics."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch.manual_seed(0)
    model = _Model()
    metrics = accelerate(build_metrics(NUM_CLASSES))

    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        output = model(x)
        loss = nn.functional.cross_entropy(output, y)
        loss.backward()
        update_metrics(metrics, loss, output, y)
        return loss

    torch._dynamo.reset()
    counters.clear()
    explained = torch._dynamo.explain(step)(*_model_batches(1)[0])
    reasons = [reason.reason for reason in explained.break_reasons]
    assert explained.graph_break_count <= 1, reasons
    assert all("backward" in reason for reason in reasons), reasons
    # ... and the compiled step runs every batch without a recompile.
    _, report = _compile_training(step)
    assert report.recompiles == 0, report
    assert report.graphs <= 2, report


def _compile_training(step: Callable) -> tuple[list, Any]:
    import torch._dynamo
    from torch._dynamo.utils import counters

    from tests._compile import CompileReport, CountingBackend

    torch._dynamo.reset()
    counters.clear()
    counting = CountingBackend("eager")
    compiled = torch.compile(step, backend=counting)
    with torch._dynamo.config.patch(error_on_recompile=True):
        outputs = [compiled(*batch) for batch in _model_batches()]
    return outputs, CompileReport(counting.graphs, 0, sum(counters["recompiles"].values()), 0)


def _indexed_step(metrics: Any, access: str) -> Callable:
    """A step that reaches the collection's members one by one: by key, as attributes, or by iterating."""

    def step(preds: torch.Tensor, target: torch.Tensor) -> None:
        if access == "key":
            metrics["acc"].update(preds, target)
            metrics["f1"].update(preds, target)
        elif access == "attribute":
            metrics.acc.update(preds, target)
            metrics.f1.update(preds, target)
        elif access == "values":
            for metric in metrics.values():
                metric.update(preds, target)
        else:
            for _, metric in metrics.items():
                metric.update(preds, target)

    return step


@pytest.mark.slow
@pytest.mark.parametrize("access", ["key", "attribute", "values", "items"])
@pytest.mark.parametrize("groups", ["unformed", "disabled"])
def test_members_reached_inside_the_compiled_step_one_graph(access: str, groups: str) -> None:
    """``metrics["acc"].update(...)`` in a compiled step: one graph, no recompile (torchmetrics flips a guarded flag).

    ``MetricCollection.__getitem__`` (and ``values()``/``items()``) set ``_state_is_copy``; Dynamo guards on it, so the
    flag's change after the first call recompiled the step once. Not covered: members of a compute group formed
    eagerly and then updated one by one in the compiled step stop sharing their states at its first call (as they do
    eagerly), a change of aliasing Dynamo recompiles for once.
    """

    def make() -> Any:
        members = {"acc": MulticlassAccuracy(NUM_CLASSES), "f1": MulticlassF1Score(NUM_CLASSES)}
        return ta.MetricCollection(members, compute_groups=groups != "disabled")

    batches = _classification_batches("multiclass")
    compiled, eager = make(), make()
    _, report = compile_and_run(_indexed_step(compiled, access), batches[:3])
    for batch in batches[:3]:
        _indexed_step(eager, access)(*batch)
    assert (report.graphs, report.recompiles, report.graph_breaks) == (1, 0, 0), report
    assert_same(compiled.compute(), eager.compute(), **TOLERANCE)
    for name in ("acc", "f1"):
        assert compiled[name].update_count == eager[name].update_count
