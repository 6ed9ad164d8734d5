"""Host reads per Lightning log on the plain path (no collector), torchmetrics against ``accelerate()``.

Counted, not timed: a fit that logs and the same fit that does not (same updates) differ by the logging's reads. Per
log with N metrics: Lightning reads each logged value once (N, as torchmetrics costs); an accelerated metric's
``compute()`` also reads its deferred checks, once per metric when Lightning computes the metrics one by one
(``self.log(name, metric)``, and ``self.log_dict(collection)``, which Lightning splits into its members), and once for
all of them when the collection computes (``self.log_dict(collection.compute())``): N + 1. Why the first two cannot
share one read: ``docs/gpu-report.md`` ("Reads per log on the plain path").
"""

import logging
import warnings

import pytest
import torch
import torchmetrics
from torch import nn

from torchmetrics_async import accelerate
from torchmetrics_async.testing import count_host_syncs

lightning = pytest.importorskip("lightning.pytorch")

EPOCHS = 2
MEMBERS = 3


class _Module(lightning.LightningModule):
    def __init__(self, accelerated: bool, how: str) -> None:
        super().__init__()
        self.layer = nn.Linear(8, 4)
        members = {
            "acc": torchmetrics.Accuracy(task="multiclass", num_classes=4),
            "f1": torchmetrics.F1Score(task="multiclass", num_classes=4),
            "loss": torchmetrics.MeanMetric(),
        }
        self.metrics = torchmetrics.MetricCollection(members, compute_groups=False)
        if accelerated:
            accelerate(self.metrics)
        self.how = how

    def training_step(self, batch: tuple, batch_idx: int) -> torch.Tensor:
        x, y = batch
        output = self.layer(x)
        loss = nn.functional.cross_entropy(output, y)
        self.metrics["acc"].update(output, y)
        self.metrics["f1"].update(output, y)
        self.metrics["loss"].update(loss.detach())
        if self.how == "log":
            for name, metric in self.metrics.items():
                self.log(name, metric, on_step=False, on_epoch=True)
        elif self.how == "log_dict":
            self.log_dict(self.metrics, on_step=False, on_epoch=True)
        return loss

    def on_train_epoch_end(self) -> None:
        if self.how == "compute":
            self.log_dict(self.metrics.compute())
            self.metrics.reset()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _fit_reads(accelerated: bool, how: str, tmp_path) -> int:
    generator = torch.Generator().manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(48, 8, generator=generator), torch.randint(0, 4, (48,)))
    trainer = lightning.Trainer(
        max_epochs=EPOCHS,
        logger=lightning.loggers.CSVLogger(tmp_path / how),
        accelerator="cpu",
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        log_every_n_steps=1,
    )
    with warnings.catch_warnings(), count_host_syncs(record_events=False) as syncs:
        warnings.simplefilter("ignore")  # Lightning's advice (workers, small logging interval)
        trainer.fit(_Module(accelerated, how), torch.utils.data.DataLoader(data, batch_size=16))
    return syncs.total


@pytest.mark.slow
@pytest.mark.parametrize("how", ["log", "log_dict", "compute"])
def test_host_reads_per_log(how, tmp_path):
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    per_log = {}
    for accelerated in (False, True):
        logged = _fit_reads(accelerated, how, tmp_path / str(accelerated))
        silent = _fit_reads(accelerated, "none", tmp_path / f"{accelerated}-none")
        per_log[accelerated] = (logged - silent) / EPOCHS
    assert per_log[False] == MEMBERS  # torchmetrics: Lightning reads each value
    extra = 1 if how == "compute" else MEMBERS  # the deferred checks: per collection, or per metric
    assert per_log[True] == MEMBERS + extra
