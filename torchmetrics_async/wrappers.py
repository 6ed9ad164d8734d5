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

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import Tensor

from torchmetrics_async._torchmetrics import BootStrapper as _TorchmetricsBootStrapper
from torchmetrics_async._torchmetrics import Metric, _bootstrap_sampler, apply_to_collection, rank_zero_warn
from torchmetrics_async._torchmetrics import MinMaxMetric as _TorchmetricsMinMaxMetric
from torchmetrics_async._torchmetrics import Running as _TorchmetricsRunning
from torchmetrics_async.accelerate import accelerate, accelerated_class_for, is_patched
from torchmetrics_async.aggregation import SyncFreeRunning
from torchmetrics_async.deferred import (
    DEFERRED_RAISE_OWNED,
    FORWARD_BATCH,
    UNREPORTED,
    forget_preread,
    nan_where,
    read_deferred,
    read_deferred_together,
    report_deferred,
)
from torchmetrics_async.deferred import deferred_checks_registered as checks_of
from torchmetrics_async.metric import SyncFreeMixin

__all__ = ["BootStrapper", "MinMaxMetric", "Running"]


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


def _checks_kept(metric: Any) -> dict[str, Tensor]:
    """Copies of the deferred checks ``metric`` has recorded (a forward's reset for the batch alone clears them)."""
    return {name: getattr(metric, name).clone() for name in checks_of(metric)}


@contextlib.contextmanager
def _switched(metrics: list, *names: str) -> Iterator[None]:
    """The ``metrics``' per-call switches ``names`` on while in it (as they were after)."""
    states = [metric.__dict__ for metric in metrics]
    previous = [[state[name] for name in names] for state in states]
    for state in states:
        state.update(dict.fromkeys(names, True))
    try:
        yield
    finally:
        for state, before in zip(states, previous, strict=True):
            state.update(zip(names, before, strict=True))


@contextlib.contextmanager
def _batch_values_unread(metrics: list, kept: list[dict[str, Tensor]]) -> Iterator[Tensor | None]:
    """The ``metrics``' computes give NaN where the batch violated a check, without a read; yields whether any did.

    ``None``: nothing to check. On leaving, each metric's ``kept`` checks are recorded again, so the next
    ``compute()``/``reset()`` raises them (torchmetrics raised them in the update).
    """
    errors = [flag for flag in (metric._deferred_violated() for metric in metrics) if flag is not None]
    try:
        with _switched(metrics, FORWARD_BATCH, DEFERRED_RAISE_OWNED):
            yield torch.stack(errors).any() if errors else None
    finally:
        for metric, checks in zip(metrics, kept, strict=True):
            metric.__dict__["_computed"] = None  # the next compute() raises the kept checks
            for name, flag in checks.items():
                metric._record_violation(name, flag)


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
        kept = [_checks_kept(base)]
        # An eager (shape) error is raised before anything is reset, as torchmetrics.
        value = base(*args, **kwargs) if own else self.update(*args, **kwargs)
        base._reset_states(in_place=True)
        self.update(*args, **kwargs)
        with _batch_values_unread([base], kept) as violated:
            value = self._track(value) if own else self.compute()  # a NaN value moves neither bound
        self._forward_cache = nan_where(violated, value)
        return self._forward_cache

    def reset(self) -> None:
        """The wrapper's own reset, then the base's (which raises an error ``compute()`` did not raise)."""
        try:
            super().reset()
        finally:
            self._base_metric.reset()


class BootStrapper(SyncFreeMixin, _TorchmetricsBootStrapper):
    """No host sync in ``update()`` and ``forward()`` with ``sampling_strategy="multinomial"`` over an accelerated base.

    torchmetrics' own draws, copied to the device at once; ``"poisson"`` stays torchmetrics' ``BootStrapper``.
    """

    def __new__(cls, base_metric: Any = None, *args: Any, **kwargs: Any) -> Any:
        """This class around an accelerated base; torchmetrics' ``BootStrapper`` for ``"poisson"``, after a warning."""
        strategy = kwargs.get("sampling_strategy", args[5] if len(args) > 5 else "poisson")
        # A user's subclass of this class owns its update: it is built as it is, whatever the strategy.
        if strategy != "poisson" or not isinstance(base_metric, Metric) or cls is not BootStrapper:
            return _new_around(cls, _TorchmetricsBootStrapper, base_metric, args, kwargs)
        plain = _TorchmetricsBootStrapper.__new__(_TorchmetricsBootStrapper)
        plain.__init__(base_metric, *args, **kwargs)
        return plain if is_patched() else accelerate(plain)  # patched: __init__ ran accelerate() (and warned)

    def _wrap_update(self, update: Callable) -> Callable:
        """As torchmetrics' wrappers: ``update`` unwrapped (the copies count their own updates)."""
        return update

    def update(self, *args: Any, **kwargs: Any) -> None:
        """Torchmetrics' update, every copy's indices drawn first (the same draws, in the same order).

        They reach the device in one non-blocking copy from pinned memory: no host sync where their lengths are fixed.
        """
        args_sizes = apply_to_collection(args, Tensor, len)
        kwargs_sizes = apply_to_collection(kwargs, Tensor, len)
        if len(args_sizes) > 0:
            size = args_sizes[0]
        elif len(kwargs_sizes) > 0:
            size = next(iter(kwargs_sizes.values()))
        else:
            raise ValueError("None of the input contained tensors, so could not determine the sampling size")
        drawn = [_bootstrap_sampler(size, sampling_strategy=self.sampling_strategy) for _ in range(self.num_bootstraps)]
        host = torch.cat(drawn)
        if self.device.type == "cuda":
            host = host.pin_memory()  # the caching host allocator keeps it until the copy is done
        indices = host.to(self.device, non_blocking=True).split([len(index) for index in drawn])
        for metric, index in zip(self.metrics, indices, strict=True):
            if index.numel() == 0:
                continue
            new_args = apply_to_collection(args, Tensor, torch.index_select, dim=0, index=index)
            new_kwargs = apply_to_collection(kwargs, Tensor, torch.index_select, dim=0, index=index)
            metric.update(*new_args, **new_kwargs)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Torchmetrics' forward (update, every copy reset, update, compute), without reading the copies' flags.

        The copies then hold the batch alone, as there; the checks they recorded before stay with them, raised by
        ``compute()``/``reset()`` (torchmetrics raised them in the update), and a violating batch's value is NaN.
        """
        copies = list(self.metrics)
        kept = [_checks_kept(metric) for metric in copies]
        self.update(*args, **kwargs)
        for metric in copies:
            metric._reset_states(in_place=True)
        self.update(*args, **kwargs)
        with _batch_values_unread(copies, kept) as violated:
            value = self.compute()
        self._forward_cache = nan_where(violated, value)
        return self._forward_cache

    def compute(self) -> dict[str, Tensor]:
        """Torchmetrics' compute; the copies' checks are read first, all in one host read (the first error raised)."""
        copies = list(self.metrics)
        reports = [(metric, read_deferred(metric)) for metric in read_deferred_together(copies)]  # all reported
        for metric, report in reports:
            report_deferred(metric, report)
        with _switched(copies, DEFERRED_RAISE_OWNED):  # read already: the copies' computes do not read again
            return super().compute()

    def reset(self) -> None:
        """The wrapper's own reset, then every copy's; their unreported checks are read in one host read.

        An error a ``compute()`` did not raise is raised once every copy is reset.
        """
        super().reset()
        copies = list(self.metrics)
        read_deferred_together([metric for metric in copies if metric.__dict__.get(UNREPORTED, False)])
        errors = []
        for metric in copies:
            try:
                metric.reset()
            except Exception as err:  # a copy's deferred error: every copy is reset before the first is raised
                errors.append(err)
        forget_preread(copies)
        if errors:
            raise errors[0]


_FELL_BACK: set[tuple[str, str]] = set()
