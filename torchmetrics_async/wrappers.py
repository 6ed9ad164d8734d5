"""torchmetrics' wrappers over sync-free metrics: ``Running`` and ``MinMaxMetric`` around any accelerated base metric.

torchmetrics' ``Running`` resets its base every step, which around an accelerated base would read the base's deferred
flags every step; this one reports them itself (see :class:`~torchmetrics_async.aggregation.SyncFreeRunning`).
torchmetrics' ``MinMaxMetric`` compares its bounds with the value in Python (``if max_val < val``: two host reads per
``compute()``, so per ``forward()``) and resets its base in every ``forward()`` (a read of the base's flags); this one
keeps the bounds with ``torch.where`` on the device and the base's flags across that reset.

Example:
    >>> import torch
    >>> from torchmetrics_async import SumMetric
    >>> from torchmetrics_async.wrappers import Running
    >>> metric = Running(SumMetric(), window=2)
    >>> for x in (1.0, 2.0, 3.0):
    ...     _ = metric(torch.tensor(x))
    >>> metric.compute()
    tensor(5.)
    >>> from torchmetrics_async.wrappers import MinMaxMetric
    >>> metric = MinMaxMetric(SumMetric())
    >>> _ = metric(torch.tensor(2.0)), metric(torch.tensor(5.0))
    >>> metric.compute()
    {'raw': tensor(5.), 'max': tensor(5.), 'min': tensor(2.)}
"""

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from torchmetrics_async._torchmetrics import Metric, rank_zero_warn
from torchmetrics_async._torchmetrics import MinMaxMetric as _TorchmetricsMinMaxMetric
from torchmetrics_async._torchmetrics import Running as _TorchmetricsRunning
from torchmetrics_async.accelerate import accelerate, accelerated_class_for
from torchmetrics_async.aggregation import SyncFreeRunning
from torchmetrics_async.deferred import DEFERRED_RAISE_OWNED, FORWARD_BATCH, nan_where
from torchmetrics_async.deferred import deferred_checks_registered as checks_of
from torchmetrics_async.metric import SyncFreeMixin

__all__ = ["MinMaxMetric", "Running"]


def _new_around(cls: type, fallback_cls: type, base_metric: Any, args: tuple, kwargs: dict) -> Any:
    """``cls`` around an accelerated base (a torchmetrics one is converted in place), ``fallback_cls`` otherwise."""
    # Anything but a metric (unpickling passes torchmetrics' __getnewargs__) is left to __init__ to judge.
    if not isinstance(base_metric, Metric) or isinstance(base_metric, SyncFreeMixin):
        return object.__new__(cls)
    if accelerated_class_for(type(base_metric)) is not None:
        accelerate(base_metric)
        return object.__new__(cls)
    key = (fallback_cls.__name__, type(base_metric).__qualname__)
    if key not in _FELL_BACK:
        _FELL_BACK.add(key)
        rank_zero_warn(
            f"{key[0]}({key[1]}): the base metric is not accelerated, so torchmetrics' own {key[0]} is used (host"
            " reads per update or forward where the base has deferred checks).",
            UserWarning,
        )
    fallback = fallback_cls.__new__(fallback_cls)
    fallback.__init__(base_metric, *args, **kwargs)
    return fallback


class Running(SyncFreeRunning, _TorchmetricsRunning):
    """No host read per step over an accelerated ``base_metric`` (a torchmetrics one is converted in place)."""

    def __new__(cls, base_metric: Any = None, *args: Any, **kwargs: Any) -> Any:
        """This class around an accelerated base, torchmetrics' ``Running`` (after one warning) otherwise."""
        return _new_around(cls, _TorchmetricsRunning, base_metric, args, kwargs)


class MinMaxMetric(SyncFreeMixin, _TorchmetricsMinMaxMetric):
    """No host sync in ``update()`` and ``forward()`` over an accelerated ``base_metric``: bounds by ``torch.where``."""

    def __new__(cls, base_metric: Any = None, *args: Any, **kwargs: Any) -> Any:
        """This class around an accelerated base, torchmetrics' ``MinMaxMetric`` (after one warning) otherwise."""
        return _new_around(cls, _TorchmetricsMinMaxMetric, base_metric, args, kwargs)

    def _wrap_update(self, update: Callable) -> Callable:
        """As torchmetrics' wrappers: ``update`` unwrapped (the base counts its own updates)."""
        return update

    def _add_extra_states(self) -> None:
        """The bounds on the base's device from the start: ``compute()`` then never copies them from the host."""
        self._bounds_to(self._base_metric.device)
        super()._add_extra_states()

    def _bounds_to(self, device: torch.device) -> None:
        # torchmetrics keeps them as plain attributes (not states): nn.Module moves leave them where they are.
        self.min_val, self.max_val = self.min_val.to(device), self.max_val.to(device)

    def _apply(self, fn: Callable, exclude_state: Any = "") -> Any:
        this = super()._apply(fn, exclude_state)
        this._bounds_to(this._base_metric.device)
        return this

    def _track(self, val: Any) -> dict[str, Tensor]:
        """Torchmetrics' bounds update without reading them: a NaN value moves neither (its comparisons are False)."""
        if not self._is_suitable_val(val):
            raise RuntimeError(f"Returned value from base metric should be a float or scalar tensor, but got {val}.")
        maximum, minimum = self.max_val.to(val.device), self.min_val.to(val.device)
        self.max_val = torch.where(maximum < val, val, maximum)
        self.min_val = torch.where(minimum > val, val, minimum)
        return {"raw": val, "max": self.max_val, "min": self.min_val}

    def compute(self) -> dict[str, Tensor]:
        """The base's value and the bounds so far, as torchmetrics' ``MinMaxMetric.compute``."""
        return self._track(self._base_metric.compute())

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Torchmetrics' forward (update, the base reset, update, compute), without reading the base's flags.

        The base then holds the batch alone, as there; the checks its window recorded stay with it, raised by
        ``compute()``/``reset()`` (torchmetrics raised them in the update), and a violating batch's value is NaN.
        """
        base = self._base_metric
        # Where update and compute are ours, the base's one-pass forward scores the batch (also when compiled).
        own = type(self).update is _TorchmetricsMinMaxMetric.update and type(self).compute is MinMaxMetric.compute
        checks = {name: getattr(base, name).clone() for name in checks_of(base)}
        # An eager (shape) error is raised before anything is reset, as torchmetrics.
        value = base(*args, **kwargs) if own else self.update(*args, **kwargs)
        base._reset_states(in_place=True)
        self.update(*args, **kwargs)
        # This batch's errors alone (a "warn" check, e.g. NaNs dropped, leaves torchmetrics' value as it is).
        errors = [getattr(base, name) for name, (_, action) in checks_of(base).items() if action == "error"]
        violated = torch.stack(errors).any() if errors else None
        state = base.__dict__
        previous = state[FORWARD_BATCH], state[DEFERRED_RAISE_OWNED]
        state[FORWARD_BATCH] = state[DEFERRED_RAISE_OWNED] = True  # the base's compute: NaN where violated, no read
        try:
            value = self._track(value) if own else self.compute()  # a NaN value moves neither bound
        finally:
            state[FORWARD_BATCH], state[DEFERRED_RAISE_OWNED] = previous
            state["_computed"] = None  # the next compute() raises the kept checks
            for name, flag in checks.items():
                base._record_violation(name, flag)
        self._forward_cache = nan_where(violated, value)
        return self._forward_cache

    def reset(self) -> None:
        """The wrapper's own reset, then the base's (which raises an error ``compute()`` did not raise)."""
        try:
            super().reset()
        finally:
            self._base_metric.reset()


_FELL_BACK: set[tuple[str, str]] = set()
