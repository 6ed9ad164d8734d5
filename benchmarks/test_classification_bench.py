"""Host time per call of the classification metrics, torchmetrics and accelerated side by side in one run.

Cases (``benchmark.group`` is ``f"{metric}.{call}[default]"``; ``extra_info`` has impl/metric/call/variant and
``aten_ops``, the ATen ops one call dispatches):

- ``MulticlassAccuracy(1000)``: ``update`` on logits ``(128, 1000)`` and labels ``(128,)`` (default ``average="macro"``:
  torchmetrics ``bincount``s ``num_classes**2`` bins);
- ``MulticlassF1Score(1000)``: ``forward`` on the same batch;
- ``article step``: one training step of the profiling article's metrics: ``MeanMetric.update(loss)`` and
  ``update(output, target)`` of ``Accuracy``/``Precision``/``Recall``/``F1Score(task="multiclass",
  num_classes=1000)``, as the article builds them (the task wrappers' default ``average="micro"``), and the same with
  ``average="macro"``;
- ``BinaryAccuracy``: ``update`` on ``(128,)`` probabilities; ``MultilabelF1Score(10)``: ``update`` on ``(128, 10)``.

Accelerated objects are the torchmetrics objects converted with :func:`torchmetrics_async.accelerate`, exactly what a
user gets from the one-line change. Method: :func:`benchmarks.timing.time_call`.
"""

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torchmetrics
from torchmetrics import classification as tmc

import torchmetrics_async
from benchmarks.timing import run_case
from tools.demo import build_metrics, update_metrics

IMPLS: dict[str, Callable[[Any], Any]] = {"torchmetrics": lambda m: m, "accelerated": torchmetrics_async.accelerate}


def _batch() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return {
        "logits": torch.randn(128, 1000, generator=gen),
        "labels": torch.randint(0, 1000, (128,), generator=gen),
        "loss": torch.tensor(6.9),
        "probs": torch.rand(128, generator=gen),
        "binary": torch.randint(0, 2, (128,), generator=gen),
        "ml_probs": torch.rand(128, 10, generator=gen),
        "ml_target": torch.randint(0, 2, (128, 10), generator=gen),
    }


def _article_step(metrics: dict[str, torchmetrics.Metric], b: dict[str, torch.Tensor]) -> Callable[[], None]:
    return lambda: update_metrics(metrics, b["loss"], b["logits"], b["labels"])


#: (metric label, call label) -> builds (object to convert, the call given the converted object and the batch).
CASES: dict[tuple[str, str], Callable[[], tuple[Any, Callable[[Any, dict], Callable[[], Any]]]]] = {
    ("MulticlassAccuracy(1000)", "update(logits 128x1000)"): lambda: (
        tmc.MulticlassAccuracy(num_classes=1000),
        lambda m, b: lambda: m.update(b["logits"], b["labels"]),
    ),
    ("MulticlassF1Score(1000)", "forward(logits 128x1000)"): lambda: (
        tmc.MulticlassF1Score(num_classes=1000),
        lambda m, b: lambda: m(b["logits"], b["labels"]),
    ),
    ("article step", "5 updates, micro (as the article)"): lambda: (build_metrics(1000), _article_step),
    ("article step", "5 updates, macro"): lambda: (build_metrics(1000, "macro"), _article_step),
    ("BinaryAccuracy", "update(128 probs)"): lambda: (
        tmc.BinaryAccuracy(),
        lambda m, b: lambda: m.update(b["probs"], b["binary"]),
    ),
    ("MultilabelF1Score(10)", "update(128x10 probs)"): lambda: (
        tmc.MultilabelF1Score(num_labels=10),
        lambda m, b: lambda: m.update(b["ml_probs"], b["ml_target"]),
    ),
}


@pytest.mark.parametrize("impl", list(IMPLS))
@pytest.mark.parametrize(("metric_name", "call"), list(CASES), ids=lambda v: str(v).replace(" ", "_"))
def test_classification(benchmark: Any, metric_name: str, call: str, impl: str) -> None:
    obj, make_call = CASES[(metric_name, call)]()
    fn = make_call(IMPLS[impl](obj), _batch())
    run_case(benchmark, metric_name, call, impl, fn)
