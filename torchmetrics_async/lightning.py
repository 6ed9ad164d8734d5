"""Lightning integration: :class:`AsyncMetricLogging` logs training metrics through an ``AsyncMetricCollector``.

The module keeps updating its metrics in ``training_step``; the callback syncs, computes, logs and resets them every
``every_n_steps`` batches without blocking at the boundary. When, where and the constraints: ``docs/lightning.md``.
``lightning`` is imported only when the callback is constructed.
"""

from __future__ import annotations

import functools
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
    """The module's direct ``Metric``/``MetricCollection`` children, minus evaluation ones (by name)."""
    return {
        name: child
        for name, child in module.named_children()
        if isinstance(child, (Metric, MetricCollection)) and not name.startswith(SKIPPED_PREFIXES)
    }


def _resolve(module: nn.Module, names: Sequence[str]) -> dict[str, Metric | MetricCollection]:
    """Look up dotted attribute names on ``module``; each must be a ``Metric`` or ``MetricCollection``."""
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
    """Log names -> values: a metric under its attribute name, a collection's members under their own keys."""
    flat: dict[str, Any] = {}
    for name, value in values.items():
        if isinstance(metrics[name], MetricCollection):
            flat.update({f"{prefix}{key}": item for key, item in value.items()})
        else:
            flat[f"{prefix}{name}"] = value
    return flat


class AsyncMetricLogging:
    """A Lightning ``Callback`` that syncs, computes and logs training metrics off the critical path.

    Every ``every_n_steps`` training batches (``None``: ``trainer.log_every_n_steps``; ``0``: epoch ends only) it
    schedules the window that ended and logs the one before it; ``on_epoch_end`` collects each epoch's last window at
    once. ``metrics``: the module's attributes to manage (default: direct metric children not named ``val*``,
    ``test*``, ``predict*``). ``history``: one dict per logged window.

    Example:
        >>> import lightning
        >>> callback = AsyncMetricLogging(prefix="train/", every_n_steps=10)
        >>> isinstance(callback, lightning.pytorch.Callback), callback.state_key
        (True, "AsyncMetricLogging{'prefix': 'train/'}")
    """

    history: list[dict[str, Any]]

    def __new__(cls, *args: Any, **kwargs: Any) -> AsyncMetricLogging:
        """An instance mixed with Lightning's ``Callback`` here (so importing this module needs no Lightning)."""
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
        """The key of this callback in checkpoints (the mixed class's own name would be an implementation detail)."""
        return f"AsyncMetricLogging{{'prefix': {self.prefix!r}}}"

    def state_dict(self) -> dict[str, Any]:
        """Nothing is checkpointed: a window in flight is not saved, and after a resume windows count afresh."""
        return {}

    def setup(self, trainer: Any, pl_module: nn.Module, stage: str) -> None:
        """Find the metrics to manage (``fit`` only); ``ValueError`` if there are none."""
        if stage != "fit":
            return
        self._metrics = _discover(pl_module) if self.metric_names is None else _resolve(pl_module, self.metric_names)
        if not self._metrics:
            raise ValueError(
                "AsyncMetricLogging found no Metric/MetricCollection attribute to manage on"
                f" {type(pl_module).__name__}: pass their names with `metrics=[...]`"
            )

    def on_train_start(self, trainer: Any, pl_module: nn.Module) -> None:
        """Bind the collector (the metrics are on their device by now)."""
        self._interval = trainer.log_every_n_steps if self.every_n_steps is None else self.every_n_steps
        self._batches = self._window_start = 0
        self._pending = None
        self._collector = AsyncMetricCollector(dict(self._metrics))
        self._collector.bind()

    def on_train_batch_end(self, trainer: Any, pl_module: nn.Module, outputs: Any, batch: Any, batch_idx: int) -> None:
        """Count the batch; at a window boundary log the previous window and schedule this one.

        The epoch's last window is collected here (``on_epoch_end``): Lightning validates before ``on_train_epoch_end``.
        """
        self._batches += 1
        if self.on_epoch_end and trainer.fit_loop.epoch_loop.batch_progress.is_last_batch:
            self._boundary(trainer, wait=True)
        elif self._interval and (self._batches - self._window_start) >= self._interval:
            self._boundary(trainer)

    def on_train_epoch_end(self, trainer: Any, pl_module: nn.Module) -> None:
        """End and collect the epoch's window where no batch did (``max_steps``, ``should_stop``)."""
        if self.on_epoch_end:
            self._boundary(trainer, wait=True)

    def on_train_end(self, trainer: Any, pl_module: nn.Module) -> None:
        """Collect and log the window still in flight, then release the collector."""
        if self._collector is None:
            return
        self._collect(trainer)
        self._collector.unbind()
        self._collector = None

    def teardown(self, trainer: Any, pl_module: nn.Module, stage: str) -> None:
        """Drop the collector if ``fit`` ended early (an exception): the window in flight is abandoned."""
        if stage == "fit":
            self._collector = None
            self._pending = None

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


@functools.cache
def _mixed_class() -> type:
    mixed = type("AsyncMetricLogging", (AsyncMetricLogging, _callback_base()), {"__module__": __name__})
    mixed.__qualname__ = "_AsyncMetricLoggingCallback"
    return mixed


def __getattr__(name: str) -> Any:
    # Unpickling an instance in a fresh process (Lightning's ddp_spawn) looks the mixed class up by name.
    if name == "_AsyncMetricLoggingCallback":
        return _mixed_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
