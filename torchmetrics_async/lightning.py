"""Lightning integration: log training metrics through :class:`~torchmetrics_async.AsyncMetricCollector`.

:class:`AsyncMetricLogging` is a Lightning ``Callback``: ``Trainer(callbacks=[AsyncMetricLogging()])``. The module keeps
updating its metrics in ``training_step`` (``self.train_acc(preds, target)`` or ``.update(...)``); the callback takes
over what ``self.log(name, metric, on_epoch=True)`` would do for them: sync, compute, log, reset, without blocking the
training loop at the logging step.

What it does, on every process, during ``fit`` only:

1. ``on_train_start``: binds one :class:`~torchmetrics_async.AsyncMetricCollector` over the managed metrics (a dict
   attribute name -> metric), after Lightning has moved the module to its device.
2. Every ``every_n_steps`` training batches (default: the trainer's ``log_every_n_steps``; counted in
   ``on_train_batch_end``, so with gradient accumulation these are batches, not optimizer steps): it collects the
   window scheduled at the previous boundary, logs its values, then ``schedule_collection()`` for the window that just
   ended (snapshot, in-place reset of the live metrics, fused sync launched without waiting).
3. At the end of each training epoch when ``on_epoch_end=True`` (so that no window spans two epochs), after the
   epoch's last batch (``on_train_batch_end`` of the batch Lightning knows to be the last, else
   ``on_train_epoch_end``): the same, then it waits for the window that just ended and logs it too. That is one
   blocking collection per epoch, and it is what makes ``ModelCheckpoint``/``EarlyStopping`` monitoring a managed
   metric see the epoch's own last window, whether they run at ``on_train_epoch_end`` (after the other callbacks) or
   at the end of the validation that follows the epoch's last batch.
4. ``on_train_end``: collects and logs the window still in flight, if any.

So the values of a window are logged one interval later, at the next boundary, at ``trainer.global_step`` of that
moment; an epoch's last window at once, at the same step as the window before it. They are the values ``compute()``
would have given for that window, synced over all processes (every rank holds the same values): they are written into
``trainer.callback_metrics`` and ``trainer.logged_metrics`` on every rank (so ``ModelCheckpoint``/``EarlyStopping`` can
monitor them) and sent to ``trainer.loggers`` on global rank zero only. With ``on_epoch_end=False`` windows span
epochs and a monitor sees the last window collected, one interval old.

Names: a metric is logged under ``prefix + attribute name``; a ``MetricCollection`` under ``prefix`` + its own keys (as
``self.log_dict(collection)`` does). Only scalar values are sent to loggers; every collected value, scalars or
not, is also appended to :attr:`AsyncMetricLogging.history`.

Constraints:

- The managed metrics must not also be logged by the module (``self.log(name, metric)``) nor reset by it: Lightning
  would compute and reset them at its own times and the windows would be cut short. Log validation and test metrics
  the usual way; by default the callback leaves attributes whose names start with ``val``, ``test`` or ``predict``
  alone.
- Collection is collective: every process runs the same callbacks on the same number of training batches (as under
  Lightning's ``DistributedSampler``); a process with fewer batches would leave the others waiting in the sync.
- A deferred error of a window (a label out of range, a NaN under ``nan_strategy="error"``) is raised when the window
  is collected (one interval after it ended; an epoch's last window at once) and stops ``fit``.
- Nothing of the collector is checkpointed: a window in flight when a checkpoint is saved is not in it, and after a
  resume the windows count from the resumed batch.

``lightning`` is imported only when the callback is constructed; this module imports without it.

Example:
    >>> import torch
    >>> from torchmetrics_async import MeanMetric
    >>> callback = AsyncMetricLogging(metrics=["train_loss"], every_n_steps=10)  # doctest: +SKIP
    >>> trainer = lightning.Trainer(callbacks=[callback])  # doctest: +SKIP
    >>> sorted(_discover(torch.nn.ModuleDict({"train_loss": MeanMetric(), "val_loss": MeanMetric()})))
    ['train_loss']
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from torchmetrics_async._torchmetrics import Metric, MetricCollection
from torchmetrics_async.collector import AsyncMetricCollector

__all__ = ["AsyncMetricLogging"]

#: Attribute-name prefixes that automatic discovery leaves to the module (evaluation metrics).
SKIPPED_PREFIXES = ("val", "test", "predict")

_MISSING = (
    "torchmetrics_async.lightning.AsyncMetricLogging needs Lightning (the `lightning` package, which provides"
    " `lightning.pytorch`): pip install 'lightning>=2.6'"
)


def _callback_base() -> type:
    try:
        from lightning.pytorch import Callback
    except ImportError as error:  # pragma: no cover - exercised by a test that hides lightning
        raise ImportError(_MISSING) from error
    return Callback


def _discover(module: nn.Module) -> dict[str, Metric | MetricCollection]:
    """The module's direct ``Metric``/``MetricCollection`` children, minus evaluation ones (by name).

    Args:
        module: the LightningModule.

    Returns:
        attribute name -> metric, in registration order.

    Example:
        >>> from torchmetrics_async import SumMetric
        >>> list(_discover(torch.nn.ModuleDict({"tokens": SumMetric(), "test_tokens": SumMetric()})))
        ['tokens']
    """
    return {
        name: child
        for name, child in module.named_children()
        if isinstance(child, (Metric, MetricCollection)) and not name.startswith(SKIPPED_PREFIXES)
    }


def _resolve(module: nn.Module, names: Sequence[str]) -> dict[str, Metric | MetricCollection]:
    """Look up dotted attribute names on ``module``; each must be a ``Metric`` or ``MetricCollection``.

    Args:
        module: the LightningModule.
        names: attribute names (``"train_acc"``, ``"heads.loss"``).

    Returns:
        name -> metric.

    Raises:
        AttributeError: if a name does not exist.
        TypeError: if a name is not a metric or collection.

    Example:
        >>> from torchmetrics_async import SumMetric
        >>> list(_resolve(torch.nn.ModuleDict({"tokens": SumMetric()}), ["tokens"]))
        ['tokens']
    """
    found: dict[str, Metric | MetricCollection] = {}
    for name in names:
        target: Any = module
        for part in name.split("."):
            target = getattr(target, part)
        if not isinstance(target, (Metric, MetricCollection)):
            raise TypeError(f"AsyncMetricLogging: `{name}` is a {type(target).__name__}, not a Metric/MetricCollection")
        found[name] = target
    return found


def _flatten(values: Mapping[str, Any], metrics: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """Log names -> values: a metric under its attribute name, a collection's members under their own keys.

    Example:
        >>> from torchmetrics_async import SumMetric, MetricCollection
        >>> _flatten({"a": 1.0, "c": {"x": 2.0}}, {"a": SumMetric(), "c": MetricCollection([])}, "train/")
        {'train/a': 1.0, 'train/x': 2.0}
    """
    flat: dict[str, Any] = {}
    for name, value in values.items():
        if isinstance(metrics[name], MetricCollection):
            flat.update({f"{prefix}{key}": item for key, item in value.items()})
        else:
            flat[f"{prefix}{name}"] = value
    return flat


class AsyncMetricLogging:
    """A Lightning ``Callback`` that syncs, computes and logs training metrics off the critical path.

    See the module docstring for exactly what it does, when, and its constraints. In short: the module updates its
    training metrics and does not log them; every ``every_n_steps`` training batches the callback schedules the window
    that ended and logs the one scheduled before it, through one :class:`~torchmetrics_async.AsyncMetricCollector`
    (one fused sync per window, no host wait at the boundary). At each training epoch's end it also waits for the
    epoch's last window and logs it, so that monitors see the epoch's own values.

    Args:
        metrics: attribute names (dotted paths allowed) of the LightningModule's ``Metric``/``MetricCollection``
            objects to manage; ``None``: every direct child that is one, except names starting with ``val``,
            ``test`` or ``predict``.
        every_n_steps: the window length in training batches; ``None``: ``trainer.log_every_n_steps``; ``0``: only
            at epoch ends.
        on_epoch_end: also end a window at the end of every training epoch, and collect it at once (blocking).
        prefix: prepended to every logged name.
        process_group: the group to sync over (``None``: each metric's own, else the world).

    Raises:
        ImportError: if Lightning (``lightning.pytorch``) is not installed.
        ValueError: if ``every_n_steps`` is negative, or is ``0`` with ``on_epoch_end=False``.

    Attributes:
        history: one dict per logged window: ``epoch`` and ``first_batch``/``last_batch`` (the training batches it
            covers, counted from the start of ``fit`` in this process), ``step`` (``trainer.global_step`` when it was
            logged) and ``values`` (everything ``collect_results()`` returned, keyed by log name).

    Example:
        >>> import lightning
        >>> callback = AsyncMetricLogging(prefix="train/", every_n_steps=10)
        >>> trainer = lightning.Trainer(callbacks=[callback], logger=False)  # doctest: +SKIP
        >>> isinstance(callback, lightning.pytorch.Callback), callback.state_key
        (True, "AsyncMetricLogging{'prefix': 'train/'}")
    """

    history: list[dict[str, Any]]

    def __new__(cls, *args: Any, **kwargs: Any) -> AsyncMetricLogging:
        """Create an instance of a class that is also a Lightning ``Callback`` (imports Lightning).

        Lightning accepts only instances of its ``Callback`` class: it is mixed in here, so importing this module does
        not need Lightning. The mixed class is a module attribute (``_AsyncMetricLoggingCallback``), so instances
        pickle (Lightning's ``ddp_spawn`` pickles the trainer's callbacks).

        Args:
            *args: the constructor's arguments (used by ``__init__``).
            **kwargs: the same.

        Returns:
            The new instance.

        Raises:
            ImportError: if ``lightning.pytorch`` cannot be imported.
        """
        base = _callback_base()
        target = cls
        if not issubclass(cls, base):  # (unpickling passes the mixed class itself)
            target = _mixed_class() if cls is AsyncMetricLogging else type(cls.__name__, (cls, base), {})
        return super().__new__(target)

    def __init__(
        self,
        metrics: Sequence[str] | None = None,
        every_n_steps: int | None = None,
        on_epoch_end: bool = True,
        prefix: str = "",
        process_group: Any = None,
    ) -> None:
        if every_n_steps is not None and every_n_steps < 0:
            raise ValueError(f"AsyncMetricLogging: every_n_steps must be >= 0, got {every_n_steps}")
        if every_n_steps == 0 and not on_epoch_end:
            raise ValueError("AsyncMetricLogging: every_n_steps=0 and on_epoch_end=False would never log")
        self.metric_names = None if metrics is None else list(metrics)
        self.every_n_steps = every_n_steps
        self.on_epoch_end = on_epoch_end
        self.prefix = prefix
        self.process_group = process_group
        self.history = []
        self._metrics: dict[str, Metric | MetricCollection] = {}
        self._collector: AsyncMetricCollector | None = None
        self._interval = 0
        self._batches = 0  # training batches seen in this fit
        self._window_start = 0  # the first batch of the window being accumulated
        self._pending: tuple[int, int, int] | None = None  # (epoch, first, last batch) of the window in flight

    @property
    def state_key(self) -> str:
        """The key of this callback in checkpoints (the mixed class's own name would be an implementation detail).

        Example:
            >>> AsyncMetricLogging(prefix="val/").state_key
            "AsyncMetricLogging{'prefix': 'val/'}"
        """
        return f"AsyncMetricLogging{{'prefix': {self.prefix!r}}}"

    def state_dict(self) -> dict[str, Any]:
        """Nothing is checkpointed (see the module docstring).

        Returns:
            An empty dict.

        Example:
            >>> AsyncMetricLogging().state_dict()
            {}
        """
        return {}

    # ----------------------------------------------------------------------------------------------------------------
    # Lightning hooks
    # ----------------------------------------------------------------------------------------------------------------

    def setup(self, trainer: Any, pl_module: nn.Module, stage: str) -> None:
        """Find the metrics to manage (``fit`` only).

        Args:
            trainer: the Trainer.
            pl_module: the LightningModule.
            stage: ``"fit"``, ``"validate"``, ``"test"`` or ``"predict"``.

        Raises:
            ValueError: if there is nothing to manage.
        """
        if stage != "fit":
            return
        self._metrics = _discover(pl_module) if self.metric_names is None else _resolve(pl_module, self.metric_names)
        if not self._metrics:
            raise ValueError(
                "AsyncMetricLogging found no Metric/MetricCollection attribute to manage on"
                f" {type(pl_module).__name__}: pass their names with `metrics=[...]`"
            )

    def on_train_start(self, trainer: Any, pl_module: nn.Module) -> None:
        """Bind the collector (the metrics are on their device by now).

        Args:
            trainer: the Trainer.
            pl_module: the LightningModule.
        """
        self._interval = trainer.log_every_n_steps if self.every_n_steps is None else self.every_n_steps
        self._batches = self._window_start = 0
        self._pending = None
        self._collector = AsyncMetricCollector(dict(self._metrics))
        self._collector.bind()

    def on_train_batch_end(self, trainer: Any, pl_module: nn.Module, outputs: Any, batch: Any, batch_idx: int) -> None:
        """Count the batch; at a window boundary log the previous window and schedule this one.

        After the epoch's last batch (``on_epoch_end=True``) also wait for this one and log it: Lightning validates at
        the end of an epoch after this hook of the epoch's last batch and before ``on_train_epoch_end``, so monitors
        running at ``on_validation_end`` see the epoch's last window too.

        Args:
            trainer: the Trainer.
            pl_module: the LightningModule.
            outputs: what ``training_step`` returned.
            batch: the batch.
            batch_idx: its index in the epoch.
        """
        self._batches += 1
        if self.on_epoch_end and trainer.fit_loop.epoch_loop.batch_progress.is_last_batch:
            self._boundary(trainer, wait=True)
        elif self._interval and (self._batches - self._window_start) >= self._interval:
            self._boundary(trainer)

    def on_train_epoch_end(self, trainer: Any, pl_module: nn.Module) -> None:
        """End the window at the epoch's end (``on_epoch_end=True``) and collect it, where no batch ended the epoch.

        Lightning runs this hook of ``ModelCheckpoint``/``EarlyStopping`` after the other callbacks'. Usually the
        epoch's last batch has ended and collected the window already (nothing left to do); not where the epoch
        stopped early (``max_steps``, ``trainer.should_stop``) or the last batch was not known in advance.

        Args:
            trainer: the Trainer.
            pl_module: the LightningModule.
        """
        if self.on_epoch_end:
            self._boundary(trainer, wait=True)

    def on_train_end(self, trainer: Any, pl_module: nn.Module) -> None:
        """Collect and log the window still in flight, then release the collector.

        Args:
            trainer: the Trainer.
            pl_module: the LightningModule.
        """
        if self._collector is None:
            return
        self._collect(trainer)
        self._collector.unbind()
        self._collector = None

    def teardown(self, trainer: Any, pl_module: nn.Module, stage: str) -> None:
        """Drop the collector if ``fit`` ended early (an exception): the window in flight is abandoned.

        Args:
            trainer: the Trainer.
            pl_module: the LightningModule.
            stage: the stage.
        """
        if stage == "fit":
            self._collector = None
            self._pending = None

    # ----------------------------------------------------------------------------------------------------------------
    # windows
    # ----------------------------------------------------------------------------------------------------------------

    def _boundary(self, trainer: Any, wait: bool = False) -> None:
        """Log the window in flight, schedule the one that just ended (unless empty); ``wait``: collect it at once."""
        if self._collector is None:  # not in fit (should not happen: the hooks above run in fit only)
            return
        self._collect(trainer)
        if self._batches > self._window_start:
            self._collector.schedule_collection(self.process_group)
            self._pending = (trainer.current_epoch, self._window_start, self._batches - 1)
            self._window_start = self._batches
        if wait:
            self._collect(trainer)

    def _collect(self, trainer: Any) -> None:
        if self._pending is None:
            return
        epoch, first, last = self._pending
        self._pending = None
        values = _flatten(self._collector.collect_results(), self._metrics, self.prefix)
        step = trainer.global_step
        self.history.append({"epoch": epoch, "first_batch": first, "last_batch": last, "step": step, "values": values})
        scalars = {name: value for name, value in values.items() if isinstance(value, (bool, int, float))}
        if not scalars:
            return
        tensors = {name: torch.tensor(float(value)) for name, value in scalars.items()}
        trainer.callback_metrics.update(tensors)
        trainer.logged_metrics.update(tensors)
        if trainer.is_global_zero:
            for logger in trainer.loggers:
                logger.log_metrics({name: float(value) for name, value in scalars.items()}, step=step)


def _mixed_class() -> type:
    module = sys.modules[__name__]
    mixed = module.__dict__.get("_AsyncMetricLoggingCallback")
    if mixed is None:
        mixed = type("AsyncMetricLogging", (AsyncMetricLogging, _callback_base()), {"__module__": __name__})
        mixed.__qualname__ = "_AsyncMetricLoggingCallback"
        module._AsyncMetricLoggingCallback = mixed
    return mixed


def __getattr__(name: str) -> Any:
    # Unpickling an instance in a fresh process (Lightning's ddp_spawn) looks the mixed class up by name.
    if name == "_AsyncMetricLoggingCallback":
        return _mixed_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
