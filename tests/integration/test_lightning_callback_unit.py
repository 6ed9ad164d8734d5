"""``torchmetrics_async.lightning`` without a Trainer: a Lightning Callback, pickling, arguments, metric discovery."""

from __future__ import annotations

import pickle

import pytest
import torch

import torchmetrics_async
from torchmetrics_async.lightning import AsyncMetricLogging

pytest.importorskip("lightning", reason="needs `lightning` (pip install '.[lightning]')")


def test_is_a_lightning_callback_and_pickles() -> None:
    from lightning.pytorch import Callback

    callback = AsyncMetricLogging(metrics=["train_loss"], every_n_steps=5, prefix="train/")
    assert isinstance(callback, Callback)
    assert isinstance(callback, AsyncMetricLogging)
    assert callback.state_key == "AsyncMetricLogging{'prefix': 'train/'}"
    copy = pickle.loads(pickle.dumps(callback))
    assert type(copy) is type(callback)
    assert (copy.metric_names, copy.every_n_steps, copy.prefix) == (["train_loss"], 5, "train/")


@pytest.mark.parametrize(
    ("kwargs", "message"), [({"every_n_steps": -1}, ">= 0"), ({"every_n_steps": 0, "on_epoch_end": False}, "never")]
)
def test_rejects_arguments_that_never_log(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        AsyncMetricLogging(**kwargs)


class _Module(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(2, 2)
        self.train_loss = torchmetrics_async.MeanMetric()
        self.tokens = torchmetrics_async.SumMetric()
        self.train_metrics = torchmetrics_async.MetricCollection({"peak": torchmetrics_async.MaxMetric()})
        self.val_loss = torchmetrics_async.MeanMetric()
        self.test_metrics = torchmetrics_async.MetricCollection({"low": torchmetrics_async.MinMetric()})
        self.heads = torch.nn.ModuleDict({"aux": torchmetrics_async.MeanMetric()})


def test_setup_discovers_training_metrics_or_takes_names() -> None:
    module = _Module()
    callback = AsyncMetricLogging()
    callback.setup(None, module, "fit")
    assert list(callback._metrics) == ["train_loss", "tokens", "train_metrics"]
    named = AsyncMetricLogging(metrics=["val_loss", "heads.aux"])
    named.setup(None, module, "fit")
    assert named._metrics == {"val_loss": module.val_loss, "heads.aux": module.heads["aux"]}
    with pytest.raises(TypeError, match="layer"):
        AsyncMetricLogging(metrics=["layer"]).setup(None, module, "fit")
    with pytest.raises(AttributeError):
        AsyncMetricLogging(metrics=["missing"]).setup(None, module, "fit")
    with pytest.raises(ValueError, match="no Metric/MetricCollection"):
        AsyncMetricLogging().setup(None, torch.nn.Linear(2, 2), "fit")
    untouched = AsyncMetricLogging()
    untouched.setup(None, torch.nn.Linear(2, 2), "validate")  # only fit is managed
    assert untouched._metrics == {}
