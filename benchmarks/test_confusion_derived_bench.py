"""Host time per call of the confusion-matrix-derived, calibration and hinge metrics, torchmetrics and accelerated
side by side in one run (the layout of ``benchmarks/test_classification_bench.py``).

Cases (``benchmark.group`` is ``f"{metric}.{call}[default]"``): ``update`` of ``BinaryJaccardIndex``,
``MulticlassJaccardIndex(100, ignore_index=0)``, ``MultilabelJaccardIndex(10)``, ``MulticlassCohenKappa(100)``,
``MulticlassMatthewsCorrCoef(100)``, ``BinaryCalibrationError``, ``MulticlassCalibrationError(100)``,
``BinaryHingeLoss`` and ``MulticlassHingeLoss(100)`` on a batch of 128, and ``forward`` of the multiclass Jaccard index
and Matthews coefficient. Accelerated objects are the torchmetrics objects converted with
:func:`torchmetrics_async.accelerate`. Method: :func:`benchmarks.timing.time_call`.
"""

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torchmetrics import classification as tmc

import torchmetrics_async
from benchmarks.timing import run_case

IMPLS: dict[str, Callable[[Any], Any]] = {"torchmetrics": lambda m: m, "accelerated": torchmetrics_async.accelerate}
C = 100


def _batch() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return {
        "logits": torch.randn(128, C, generator=gen),
        "labels": torch.randint(0, C, (128,), generator=gen),
        "probs": torch.rand(128, generator=gen),
        "binary": torch.randint(0, 2, (128,), generator=gen),
        "ml_probs": torch.rand(128, 10, generator=gen),
        "ml_target": torch.randint(0, 2, (128, 10), generator=gen),
    }


def _update(kind: str) -> Callable[[Any, dict], Callable[[], Any]]:
    preds, target = {"binary": ("probs", "binary"), "multiclass": ("logits", "labels")}.get(
        kind, ("ml_probs", "ml_target")
    )
    return lambda m, b: lambda: m.update(b[preds], b[target])


def _forward(m: Any, b: dict) -> Callable[[], Any]:
    return lambda: m(b["logits"], b["labels"])


#: (metric label, call label) -> builds (object to convert, the call given the converted object and the batch).
CASES: dict[tuple[str, str], Callable[[], tuple[Any, Callable[[Any, dict], Callable[[], Any]]]]] = {
    ("BinaryJaccardIndex", "update(128 probs)"): lambda: (tmc.BinaryJaccardIndex(), _update("binary")),
    ("MulticlassJaccardIndex(100, ignore_index=0)", "update(logits 128x100)"): lambda: (
        tmc.MulticlassJaccardIndex(num_classes=C, ignore_index=0),
        _update("multiclass"),
    ),
    ("MulticlassJaccardIndex(100, ignore_index=0)", "forward(logits 128x100)"): lambda: (
        tmc.MulticlassJaccardIndex(num_classes=C, ignore_index=0),
        _forward,
    ),
    ("MultilabelJaccardIndex(10)", "update(128x10 probs)"): lambda: (
        tmc.MultilabelJaccardIndex(num_labels=10),
        _update("multilabel"),
    ),
    ("MulticlassCohenKappa(100)", "update(logits 128x100)"): lambda: (
        tmc.MulticlassCohenKappa(num_classes=C),
        _update("multiclass"),
    ),
    ("MulticlassMatthewsCorrCoef(100)", "update(logits 128x100)"): lambda: (
        tmc.MulticlassMatthewsCorrCoef(num_classes=C),
        _update("multiclass"),
    ),
    ("MulticlassMatthewsCorrCoef(100)", "forward(logits 128x100)"): lambda: (
        tmc.MulticlassMatthewsCorrCoef(num_classes=C),
        _forward,
    ),
    ("BinaryCalibrationError", "update(128 probs)"): lambda: (tmc.BinaryCalibrationError(), _update("binary")),
    ("MulticlassCalibrationError(100)", "update(logits 128x100)"): lambda: (
        tmc.MulticlassCalibrationError(num_classes=C),
        _update("multiclass"),
    ),
    ("BinaryHingeLoss", "update(128 probs)"): lambda: (tmc.BinaryHingeLoss(), _update("binary")),
    ("MulticlassHingeLoss(100)", "update(logits 128x100)"): lambda: (
        tmc.MulticlassHingeLoss(num_classes=C),
        _update("multiclass"),
    ),
}


@pytest.mark.parametrize("impl", list(IMPLS))
@pytest.mark.parametrize(("metric_name", "call"), list(CASES), ids=lambda v: str(v).replace(" ", "_"))
def test_confusion_derived(benchmark: Any, metric_name: str, call: str, impl: str) -> None:
    obj, make_call = CASES[(metric_name, call)]()
    fn = make_call(IMPLS[impl](obj), _batch())
    run_case(benchmark, metric_name, call, impl, fn)
