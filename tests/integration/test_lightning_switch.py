"""Switching the plugin off and on across a Lightning checkpoint: ``trainer.fit(ckpt_path=...)`` with strict loading.

A module's metrics are persistent (``persistent(True)`` before or after ``accelerate()``) and never reset, so the
checkpoint holds a window in flight. One run trains 3 steps with the plugin on (or off) and checkpoints; a new module
with the plugin off (or on) resumes from it for 3 more steps, under Lightning's default ``strict_loading``. Its final
values must equal those of an uninterrupted plain torchmetrics run over the same 6 steps.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("lightning", reason="Lightning integration tests need `lightning` (pip install '.[lightning]')")

import lightning as L
import torchmetrics
from torch import nn

import torchmetrics_async
from tests.integration import lit
from torchmetrics_async.metric import SyncFreeMixin

STEPS_PER_EPOCH = 3  # 12 samples in batches of 4


def _metrics() -> dict[str, nn.Module]:
    c = torchmetrics.classification
    return {
        "acc": c.MulticlassAccuracy(num_classes=lit.NUM_CLASSES),  # invalid-label checks
        "loss": torchmetrics.MeanMetric(nan_strategy="error"),  # a NaN check
        "scores": torchmetrics.MetricCollection(  # a compute group
            {"f1": c.MulticlassF1Score(num_classes=lit.NUM_CLASSES), "prec": c.MulticlassPrecision(lit.NUM_CLASSES)}
        ),
    }


class Switchable(L.LightningModule):
    """A linear classifier whose persistent metrics are plain (``plugin=None``) or accelerated, ``persistent(True)``
    called ``"before"`` or ``"after"`` ``accelerate()``; the final values land in ``self.values``."""

    def __init__(self, plugin: str | None) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layer = nn.Linear(lit.FEATURES, lit.NUM_CLASSES)
        self.metrics = nn.ModuleDict(_metrics())
        for metric in self.metrics.values():
            if plugin == "before":
                metric.persistent(True)
            if plugin is not None:
                torchmetrics_async.accelerate(metric)
            metric.persistent(True)
        self.values: dict[str, Any] = {}

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        logits = self.layer(x)
        loss = nn.functional.cross_entropy(logits, y)
        preds = logits.argmax(-1)
        self.metrics["acc"].update(preds, y)
        self.metrics["loss"].update(loss.detach())
        self.metrics["scores"].update(preds, y)
        return loss

    def on_train_end(self) -> None:
        values = {name: self.metrics[name].compute() for name in ("acc", "loss")}
        values.update(self.metrics["scores"].compute())
        self.values = {name: value.tolist() for name, value in values.items()}

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _fit(model: Switchable, epochs: int, ckpt_path: Path | None = None) -> L.Trainer:
    trainer = lit.trainer(max_epochs=epochs)
    trainer.fit(model, lit.loader(lit.BATCH * STEPS_PER_EPOCH, seed=1), ckpt_path=ckpt_path)
    return trainer


@pytest.fixture(scope="module")
def uninterrupted() -> dict[str, Any]:
    model = Switchable(plugin=None)
    _fit(model, epochs=2)
    return model.values


@pytest.mark.parametrize(
    ("before", "after"), [("before", None), ("after", None), (None, "before"), (None, "after"), ("after", "before")]
)
def test_resume_with_the_plugin_switched(
    tmp_path: Path, uninterrupted: dict[str, Any], before: Any, after: Any
) -> None:
    first = Switchable(plugin=before)
    trainer = _fit(first, epochs=1)
    checkpoint = tmp_path / "switch.ckpt"
    trainer.save_checkpoint(checkpoint)
    resumed = Switchable(plugin=after)
    assert resumed.strict_loading  # Lightning's default: unexpected or missing keys raise
    assert isinstance(resumed.metrics["acc"], SyncFreeMixin) == (after is not None)
    _fit(resumed, epochs=2, ckpt_path=checkpoint)
    assert resumed.values == uninterrupted
