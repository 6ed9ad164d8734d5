"""Lightning test helpers, shared by the in-process tests and the multi-process script (``ddp_main.py``).

One tiny LightningModule carries up to three *sets* of the same metrics, updated with the same batches and logged with
``self.log``/``self.log_dict`` under their set's name: ``plain/...`` (torchmetrics' classes), ``explicit/...``
(``torchmetrics_async`` classes, its fused ``MetricCollection``) and ``patched/...`` (torchmetrics' public names,
created under ``torchmetrics_async.patch()``). The plain set is the reference: in one run, every value Lightning logs
for an accelerated set must equal the plain set's value under the same name, at the same step. The reference metrics
get private states in every process (:meth:`LitClassifier.setup`), so under ``ddp_spawn`` they are per-rank plain
torchmetrics too, not both ranks writing into the launching process's shared-memory states.

For :class:`~torchmetrics_async.lightning.AsyncMetricLogging` the module also carries ``cb_*`` metrics (accelerated,
managed by the callback, never logged by the module) and ``ref_*`` metrics (plain torchmetrics, updated identically);
:class:`BlockingWindows` computes and resets the ``ref_*`` metrics at the callback's window boundaries (the blocking
path), so the windows the callback logs can be compared with it.

:class:`Recorder` saves what a process saw (the loggers' records, ``callback_metrics``, the callbacks' windows) at
every stage's teardown, in memory and, when given a directory, in ``rank{R}-{stage}.pt``: that is how the values of
spawned or relaunched processes reach the test.
"""

from __future__ import annotations

import math
import os
from typing import Any

import lightning as L
import torch
import torchmetrics
import torchmetrics.classification
from lightning.pytorch.callbacks import Checkpoint
from lightning.pytorch.loggers import Logger
from lightning.pytorch.utilities import rank_zero_only
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import torchmetrics_async
import torchmetrics_async.classification
from torchmetrics_async.lightning import AsyncMetricLogging

SETS = ("plain", "explicit", "patched")
#: The attributes of the plain torchmetrics reference metrics (the ``plain`` set and the ``ref_*`` metrics).
REFERENCE_PREFIXES = ("plain_", "ref_")
NUM_CLASSES = 4
BATCH = 4
FEATURES = 8


def _classes(kind: str) -> dict[str, Any]:
    if kind == "plain":
        tm, tmc, collection = torchmetrics, torchmetrics.classification, torchmetrics.MetricCollection
    elif kind == "explicit":
        tm, tmc = torchmetrics_async, torchmetrics_async.classification
        collection = torchmetrics_async.MetricCollection
    else:  # "patched": torchmetrics' own names, looked up while patch() is active
        tm, tmc, collection = torchmetrics, torchmetrics.classification, torchmetrics.MetricCollection
    return {
        "Mean": tm.MeanMetric,
        "Accuracy": tm.Accuracy,
        "MulticlassAccuracy": tmc.MulticlassAccuracy,
        "MulticlassF1Score": tmc.MulticlassF1Score,
        "MulticlassPrecision": tmc.MulticlassPrecision,
        "MulticlassRecall": tmc.MulticlassRecall,
        "Collection": collection,
    }


def _metric_set(kind: str, check: str | None) -> dict[str, nn.Module]:
    c = _classes(kind)
    metrics: dict[str, nn.Module] = {
        "loss": c["Mean"](),
        "acc": c["Accuracy"](task="multiclass", num_classes=NUM_CLASSES),
        "train": c["Collection"](
            {
                "f1": c["MulticlassF1Score"](num_classes=NUM_CLASSES, average="macro"),
                "prec": c["MulticlassPrecision"](num_classes=NUM_CLASSES, average="micro"),
            },
            prefix=f"{kind}/train_",
        ),
        "val_acc": c["MulticlassAccuracy"](num_classes=NUM_CLASSES, average="macro"),
        "val_loss": c["Mean"](),
        "test": c["Collection"](
            {
                "acc": c["Accuracy"](task="multiclass", num_classes=NUM_CLASSES),
                "recall": c["MulticlassRecall"](num_classes=NUM_CLASSES),
            },
            prefix=f"{kind}/test_",
        ),
        "test_loss": c["Mean"](),
    }
    if check == "label":
        metrics["check"] = c["MulticlassAccuracy"](num_classes=NUM_CLASSES)
    elif check == "nan":
        metrics["check"] = c["Mean"](nan_strategy="error")
    return metrics


class LitClassifier(L.LightningModule):
    """A linear classifier logging its metric sets; ``callback_metrics=True`` adds the ``cb_*``/``ref_*`` metrics.

    ``bad``: ``"label"`` or ``"nan"`` adds a step-only ``check`` metric per set and feeds it a bad batch (a label out
    of range, a NaN loss under ``nan_strategy="error"``) at training batch ``bad_batch`` of the first epoch.
    """

    def __init__(
        self,
        sets: tuple[str, ...] = SETS,
        callback_metrics: bool = False,
        bad: str | None = None,
        bad_batch: int = 1,
    ) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layer = nn.Linear(FEATURES, NUM_CLASSES)
        self.sets = sets
        self.bad = bad
        self.bad_batch = bad_batch
        for kind in sets:
            if kind == "patched":
                with torchmetrics_async.patch():
                    metrics = _metric_set(kind, bad)
            else:
                metrics = _metric_set(kind, bad)
            for name, metric in metrics.items():
                setattr(self, f"{kind}_{name}", metric)
        self.with_callback_metrics = callback_metrics
        if callback_metrics:
            self.cb_loss = torchmetrics_async.MeanMetric()
            self.cb_metrics = torchmetrics_async.MetricCollection(
                {
                    "acc": torchmetrics_async.classification.MulticlassAccuracy(num_classes=NUM_CLASSES),
                    "f1": torchmetrics_async.classification.MulticlassF1Score(num_classes=NUM_CLASSES),
                }
            )
            self.ref_loss = torchmetrics.MeanMetric()
            self.ref_metrics = torchmetrics.MetricCollection(
                {
                    "acc": torchmetrics.classification.MulticlassAccuracy(num_classes=NUM_CLASSES),
                    "f1": torchmetrics.classification.MulticlassF1Score(num_classes=NUM_CLASSES),
                }
            )

        # The positive control of the ddp_spawn test: plain torchmetrics, updated in place and never given private
        # states, so spawned workers write into the launching process's copy (see `setup`).
        self.shared_probe = torchmetrics.SumMetric()

    def setup(self, stage: str) -> None:
        """Give the plain torchmetrics reference metrics (``plain_*``, ``ref_*``) private states in this process.

        Under ``ddp_spawn`` each stage's workers unpickle the launching process's module with its CPU tensors in
        shared memory: both ranks' plain metrics would hold the same state tensors, and torchmetrics' in-place
        ``update()`` would add both ranks' batches into them (twice the weight, a float sum in whatever order the two
        processes happen to run, and a stage starting from the previous stage's leftovers). ``reset()`` gives each
        process fresh copies of the defaults, so the reference is per-rank plain torchmetrics, as under ``ddp`` or in
        one process. The accelerated metrics are left as received: that they copy before writing is under test.
        """
        for name, child in self.named_children():
            if name.startswith(REFERENCE_PREFIXES):
                child.reset()
                members = child.values() if isinstance(child, torchmetrics.MetricCollection) else [child]
                shared = [
                    attr
                    for member in members
                    for attr in member._defaults
                    if isinstance(getattr(member, attr), torch.Tensor) and getattr(member, attr).is_shared()
                ]
                assert not shared, f"{name}: states {shared} are still in shared memory"

    def metric(self, kind: str, name: str) -> Any:
        return getattr(self, f"{kind}_{name}")

    def _step(self, batch: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x, y = batch
        logits = self.layer(x)
        return logits, y, nn.functional.cross_entropy(logits, y)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        logits, y, loss = self._step(batch)
        detached = logits.detach()
        for kind in self.sets:
            self.metric(kind, "loss")(loss.detach())
            self.log(f"{kind}/loss", self.metric(kind, "loss"), on_step=True, on_epoch=True)
            self.metric(kind, "acc")(detached, y)
            self.log(f"{kind}/acc", self.metric(kind, "acc"), on_step=True, on_epoch=True)
            self.metric(kind, "train").update(detached, y)
            self.log_dict(self.metric(kind, "train"), on_step=False, on_epoch=True)
            if self.bad is not None:
                is_bad = self.current_epoch == 0 and batch_idx == self.bad_batch
                check = self.metric(kind, "check")
                if self.bad == "label":
                    check(detached, torch.full_like(y, NUM_CLASSES + 3) if is_bad else y)
                else:
                    check(torch.tensor(math.nan) if is_bad else loss.detach())
                self.log(f"{kind}/check", check, on_step=True, on_epoch=False)
        self.shared_probe.update(loss.detach())
        if self.with_callback_metrics:
            for loss_metric, collection in ((self.cb_loss, self.cb_metrics), (self.ref_loss, self.ref_metrics)):
                loss_metric.update(loss.detach())
                collection.update(detached, y)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        logits, y, loss = self._step(batch)
        for kind in self.sets:
            self.metric(kind, "val_acc").update(logits, y)
            self.log(f"{kind}/val_acc", self.metric(kind, "val_acc"))
            self.metric(kind, "val_loss").update(loss)
            self.log(f"{kind}/val_loss", self.metric(kind, "val_loss"))

    def test_step(self, batch: Any, batch_idx: int) -> None:
        logits, y, loss = self._step(batch)
        for kind in self.sets:
            self.metric(kind, "test").update(logits, y)
            self.log_dict(self.metric(kind, "test"))
            self.metric(kind, "test_loss").update(loss)
            self.log(f"{kind}/test_loss", self.metric(kind, "test_loss"))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.5)


def loader(n: int, seed: int) -> DataLoader:
    """``n`` samples of a fixed random problem, in order (Lightning shards them under DDP)."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, FEATURES, generator=generator)
    y = torch.randint(0, NUM_CLASSES, (n,), generator=generator)
    return DataLoader(TensorDataset(x, y), batch_size=BATCH, shuffle=False)


class RecordingLogger(Logger):
    """Keeps every ``log_metrics`` call as ``(step, {name: float})`` (global rank zero only, like Lightning's)."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[tuple[int | None, dict[str, float]]] = []

    @property
    def name(self) -> str:
        return "recording"

    @property
    def version(self) -> int:
        return 0

    @rank_zero_only
    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        self.records.append((step, {key: float(value) for key, value in metrics.items()}))

    @rank_zero_only
    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass


class BlockingWindows(L.Callback):
    """The blocking path for :class:`AsyncMetricLogging`'s windows: ``compute()`` + ``reset()`` of the ``ref_*``
    metrics at the same boundaries (every ``every_n_steps`` training batches, unless ``0``, and at each epoch's end)."""

    def __init__(self, every_n_steps: int, prefix: str = "") -> None:
        self.every_n_steps = every_n_steps
        self.prefix = prefix
        self.windows: list[dict[str, Any]] = []
        self._batches = 0
        self._start = 0

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._batches = self._start = 0

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self._batches += 1
        if self.every_n_steps and self._batches - self._start >= self.every_n_steps:
            self._boundary(trainer, pl_module)

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        if self._batches > self._start:
            self._boundary(trainer, pl_module)

    def _boundary(self, trainer: Any, pl_module: Any) -> None:
        values = {f"{self.prefix}cb_loss": pl_module.ref_loss.compute().item()}
        values.update({f"{self.prefix}{k}": v.item() for k, v in pl_module.ref_metrics.compute().items()})
        pl_module.ref_loss.reset()
        pl_module.ref_metrics.reset()
        self.windows.append(
            {
                "epoch": trainer.current_epoch,
                "first_batch": self._start,
                "last_batch": self._batches - 1,
                "step": trainer.global_step,
                "values": values,
            }
        )
        self._start = self._batches


class MonitorProbe(Checkpoint):
    """Records ``trainer.callback_metrics[monitor]`` where ``ModelCheckpoint`` and ``EarlyStopping`` read it.

    Lightning runs the hooks of ``Checkpoint``/``EarlyStopping`` callbacks after the other callbacks' (for
    ``on_train_epoch_end`` after the module's own hook too), so this probe, a ``Checkpoint`` that saves nothing, sees
    what they see. ``seen``: ``(epoch, hook, value or None)`` per ``on_train_epoch_end`` and ``on_validation_end``.
    """

    def __init__(self, monitor: str) -> None:
        self.monitor = monitor
        self.seen: list[tuple[int, str, float | None]] = []

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        self._record(trainer, "train_epoch_end")

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        self._record(trainer, "validation_end")

    def _record(self, trainer: Any, hook: str) -> None:
        value = trainer.callback_metrics.get(self.monitor)
        self.seen.append((trainer.current_epoch, hook, None if value is None else float(value)))


class Recorder(L.Callback):
    """At each stage's teardown, keeps (and, with ``out_dir``, saves per rank) what this process saw."""

    def __init__(self, out_dir: str | None = None) -> None:
        self.out_dir = out_dir
        self.stages: dict[str, dict[str, Any]] = {}

    def teardown(self, trainer: Any, pl_module: Any, stage: Any) -> None:
        stage = str(getattr(stage, "value", stage))  # a TrainerFn (a str enum) in this hook
        seen: dict[str, Any] = {
            "callback_metrics": {key: float(value) for key, value in trainer.callback_metrics.items()},
            "global_step": trainer.global_step,
        }
        for callback in trainer.callbacks:
            if isinstance(callback, AsyncMetricLogging):
                seen["async_history"] = list(callback.history)
            if isinstance(callback, BlockingWindows):
                seen["blocking_windows"] = list(callback.windows)
        for logger in trainer.loggers:
            if isinstance(logger, RecordingLogger):
                seen["logged"] = list(logger.records)
                logger.records.clear()
        self.stages[stage] = seen
        if self.out_dir is not None:
            torch.save(seen, os.path.join(self.out_dir, f"rank{trainer.global_rank}-{stage}.pt"))


def trainer(**kwargs: Any) -> L.Trainer:
    """A small CPU Trainer: no progress bar, no checkpoints, no model summary, a recording logger, a Recorder."""
    options: dict[str, Any] = {
        "accelerator": "cpu",
        "devices": 1,
        "max_epochs": 2,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "enable_checkpointing": False,
        "logger": RecordingLogger(),
        "log_every_n_steps": 1,
        "num_sanity_val_steps": 0,
    }
    callbacks = kwargs.pop("callbacks", [])
    out_dir = kwargs.pop("out_dir", None)
    options.update(kwargs)
    return L.Trainer(callbacks=[*callbacks, Recorder(out_dir)], **options)


def recorder(trainer_: L.Trainer) -> Recorder:
    return next(callback for callback in trainer_.callbacks if isinstance(callback, Recorder))


# --------------------------------------------------------------------------------------------------------------------
# Comparisons
# --------------------------------------------------------------------------------------------------------------------


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def by_set(values: dict[str, float]) -> dict[str, dict[str, float]]:
    """``{"plain/acc_step": v, ...}`` -> ``{"plain": {"acc_step": v}, ...}`` (keys without a set name are dropped)."""
    out: dict[str, dict[str, float]] = {}
    for key, value in values.items():
        kind, _, name = key.partition("/")
        if kind in SETS and name:
            out.setdefault(kind, {})[name.replace(f"{kind}/", "")] = value
    return out


def assert_sets_equal(values: dict[str, float], where: str, expected_names: set[str] | None = None) -> None:
    """Every set logged the same names with values equal to the plain set's (NaN equal to NaN)."""
    sets = by_set(values)
    assert "plain" in sets, f"{where}: no plain values in {sorted(values)}"
    reference = sets["plain"]
    if expected_names is not None:
        assert expected_names <= set(reference), f"{where}: missing {sorted(expected_names - set(reference))}"
    for kind, got in sets.items():
        assert set(got) == set(reference), f"{where}: {kind} logged {sorted(got)}, plain {sorted(reference)}"
        different = {name: (got[name], reference[name]) for name in got if not _same(got[name], reference[name])}
        assert not different, f"{where}: {kind} != plain (got, plain): {different}"


def assert_logs_equal(records: list[tuple[int | None, dict[str, float]]], where: str) -> set[str]:
    """Each logger record has every set with equal values; returns the names logged."""
    assert records, f"{where}: nothing was logged"
    names: set[str] = set()
    for step, values in records:
        if by_set(values):
            assert_sets_equal(values, f"{where} (logged at step {step})")
            names |= set(by_set(values)["plain"])
    return names


def assert_windows_equal(history: list[dict[str, Any]], blocking: list[dict[str, Any]]) -> None:
    """The callback's windows are the blocking path's: same batches, equal values, logged at the next boundary, except
    an epoch's last window, logged at its own (the callback waits for it, so that monitors see the epoch's values)."""
    assert len(history) == len(blocking) > 1, (len(history), len(blocking))
    for index, (got, ref) in enumerate(zip(history, blocking, strict=True)):
        assert (got["epoch"], got["first_batch"], got["last_batch"]) == (
            ref["epoch"],
            ref["first_batch"],
            ref["last_batch"],
        ), (index, got, ref)
        assert got["values"] == ref["values"], (index, got["values"], ref["values"])
        ends_epoch = index + 1 == len(blocking) or blocking[index + 1]["epoch"] != ref["epoch"]
        logged_at = ref["step"] if ends_epoch else blocking[index + 1]["step"]
        assert got["step"] == logged_at, (index, got["step"], logged_at)


def changed_metric_states(module: nn.Module) -> list[str]:
    """Names of metrics of ``module`` whose tensor states differ from their defaults (or were ever updated)."""
    changed = []
    for name, child in module.named_modules():
        if isinstance(child, torchmetrics.Metric):
            if child._update_count != 0:
                changed.append(f"{name} (update count {child._update_count})")
            for attr, default in child._defaults.items():
                value = getattr(child, attr)
                if (isinstance(default, torch.Tensor) and not torch.equal(value, default)) or (
                    isinstance(default, list) and value
                ):
                    changed.append(f"{name}.{attr}")
    return changed
