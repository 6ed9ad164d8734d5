"""Host time per ``update`` of the curve family, torchmetrics and accelerated side by side in one run.

Cases (``benchmark.group`` is ``f"{metric}.{call}[default]"``; ``extra_info`` as in ``test_classification_bench``):
``BinaryAUROC(thresholds=50)`` on ``(128,)`` probabilities, ``MulticlassAUROC(10, thresholds=50)`` on ``(128, 10)``
logits, ``MultilabelAveragePrecision(10, thresholds=50)`` on ``(128, 10)`` probabilities with ``ignore_index=-1``,
and the unbinned ``BinaryROC()`` (``thresholds=None``: list states). Accelerated objects are the torchmetrics objects
converted with :func:`torchmetrics_async.accelerate`. Method: :func:`benchmarks.timing.time_call`.
"""

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torchmetrics import classification as tmc

import torchmetrics_async
from benchmarks.timing import run_case

IMPLS: dict[str, Callable[[Any], Any]] = {"torchmetrics": lambda m: m, "accelerated": torchmetrics_async.accelerate}


def _batch() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return {
        "probs": torch.rand(128, generator=gen),
        "binary": torch.randint(0, 2, (128,), generator=gen),
        "logits": torch.randn(128, 10, generator=gen),
        "labels": torch.randint(0, 10, (128,), generator=gen),
        "ml_probs": torch.rand(128, 10, generator=gen),
        "ml_target": torch.randint(-1, 2, (128, 10), generator=gen),
    }


#: (metric label, call label) -> (object to convert, the call given the converted object and the batch).
CASES: dict[tuple[str, str], Callable[[], tuple[Any, Callable[[Any, dict], Callable[[], Any]]]]] = {
    ("BinaryAUROC(thresholds=50)", "update(128 probs)"): lambda: (
        tmc.BinaryAUROC(thresholds=50),
        lambda m, b: lambda: m.update(b["probs"], b["binary"]),
    ),
    ("MulticlassAUROC(10, thresholds=50)", "update(logits 128x10)"): lambda: (
        tmc.MulticlassAUROC(num_classes=10, thresholds=50),
        lambda m, b: lambda: m.update(b["logits"], b["labels"]),
    ),
    ("MultilabelAveragePrecision(10, thresholds=50, ignore_index=-1)", "update(128x10 probs)"): lambda: (
        tmc.MultilabelAveragePrecision(num_labels=10, thresholds=50, ignore_index=-1),
        lambda m, b: lambda: m.update(b["ml_probs"], b["ml_target"]),
    ),
    ("BinaryROC()", "update(128 probs)"): lambda: (
        tmc.BinaryROC(),
        lambda m, b: lambda: m.update(b["probs"], b["binary"]),
    ),
}


@pytest.mark.parametrize("impl", list(IMPLS))
@pytest.mark.parametrize(("metric_name", "call"), list(CASES), ids=lambda v: str(v).replace(" ", "_"))
def test_curves(benchmark: Any, metric_name: str, call: str, impl: str) -> None:
    obj, make_call = CASES[(metric_name, call)]()
    fn = make_call(IMPLS[impl](obj), _batch())
    run_case(benchmark, metric_name, call, impl, fn)
