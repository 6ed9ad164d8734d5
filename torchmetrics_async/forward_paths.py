"""The two ``forward`` paths of ``SyncFreeMixin``: one reduction of the batch, or torchmetrics' own, kept safe."""

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from torchmetrics_async._torchmetrics import DEVICE_MISMATCH_MARKER, _squeeze_if_scalar, device_mismatch_message
from torchmetrics_async.copies import OWNED_STATES, same_layout
from torchmetrics_async.counting import COMPILED_SEEN, COUNTS_ON_HOST, set_update_count
from torchmetrics_async.deferred import DEFERRED_RAISE_OWNED, FORWARD_BATCH, UNREPORTED, nan_where

__all__ = [
    "forward_generic_compiled",
    "forward_keeping_states_on_error",
    "forward_one_pass",
    "reword_device_mismatch",
    "run_guarded",
]

# What torchmetrics' forward switches for the batch and puts back only when the batch's update succeeds.
_FORWARD_SWITCHES = (
    "_to_sync",
    "_should_unsync",
    "compute_on_cpu",
    "_enable_grad",
    "_is_synced",
    "_computed",
    "_forward_cache",
)


def run_guarded(metric: Any, grad: bool, fn: Callable, args: tuple, kwargs: dict) -> Any:
    """Run ``fn`` with grad mode ``grad``, rewording a device mismatch the way torchmetrics does."""
    previous = torch.is_grad_enabled()
    if previous != grad:
        torch._C._set_grad_enabled(grad)
    try:
        return fn(*args, **kwargs)
    except RuntimeError as err:
        reword_device_mismatch(metric, err)
        raise
    finally:
        if previous != grad:
            torch._C._set_grad_enabled(previous)


def forward_one_pass(metric: Any, args: tuple, kwargs: dict) -> Any:
    """``forward`` with one reduction of the batch; the batch value carries autograd history as torchmetrics'."""
    state = metric.__dict__
    state["_computed"] = None
    state[UNREPORTED] = True
    if torch.compiler.is_compiling():
        metric._count_compiled_update()
    else:
        state["_update_count"] += 1
    # torchmetrics' batch value has history exactly when the caller has grad enabled: compute in the caller's mode.
    grad = torch.is_grad_enabled()
    stats = run_guarded(metric, grad, metric._batch_stats, args, kwargs)
    value = _squeeze_if_scalar(run_guarded(metric, grad, metric._batch_value, (stats,), {}))
    if stats is not None:
        value = nan_where(metric._batch_violation(stats), value)
        run_guarded(metric, False, metric._merge_stats, (_detach(stats),), {})
    state["_forward_cache"] = value
    return value


def forward_keeping_states_on_error(metric: Any, forward: Callable, args: tuple, kwargs: dict) -> Any:
    """Run torchmetrics' ``forward``; on an error the metric is put back as it was, and it raises."""
    state = metric.__dict__
    held = {attr: state[attr] for attr in metric._defaults}
    items = {attr: list(value) for attr, value in held.items() if isinstance(value, list)}
    options = {key: state[key] for key in _FORWARD_SWITCHES}
    owned = dict(state[OWNED_STATES])
    count = metric._update_count
    try:
        return forward(*args, **kwargs)
    except BaseException:
        for attr, value in held.items():
            if attr in items:
                value[:] = items[attr]
            setattr(metric, attr, value)
        state[OWNED_STATES] = owned
        state.update(options)
        set_update_count(metric, count)
        raise


def forward_generic_compiled(metric: Any, forward: Callable, args: tuple, kwargs: dict) -> Any:
    """Run torchmetrics' forward inside traced code, the update count kept on the device."""
    state = metric.__dict__
    metric._count_compiled_update()
    host, previous = state["_update_count"], state[DEFERRED_RAISE_OWNED]
    state[COMPILED_SEEN] = 0  # read as the host count alone until restored
    state[COUNTS_ON_HOST], state[FORWARD_BATCH], state[DEFERRED_RAISE_OWNED] = True, True, True
    # torchmetrics' forward ends with new state tensors: their values are copied back into these, which stay the
    # states (the addresses compiled code was traced with).
    owned = state[OWNED_STATES]
    accumulated = {attr: state[attr] for attr in metric._defaults if isinstance(state[attr], Tensor)}
    try:
        return forward(*args, **kwargs)
    finally:
        state["_update_count"], state[COMPILED_SEEN] = host, None
        state[COUNTS_ON_HOST], state[FORWARD_BATCH], state[DEFERRED_RAISE_OWNED] = False, None, previous
        for attr, tensor in accumulated.items():
            final = state[attr]
            if final is not tensor and isinstance(final, Tensor) and same_layout(tensor, final):
                tensor.copy_(final)
                state[attr] = owned[attr] = tensor


def reword_device_mismatch(metric: Any, err: RuntimeError) -> None:
    """Raise torchmetrics' device-mismatch message for ``err`` if it is one (a ``RuntimeError`` naming devices)."""
    if DEVICE_MISMATCH_MARKER in str(err):
        raise RuntimeError(device_mismatch_message(metric.__class__.__name__)) from err


def _detach(stats: Any) -> Any:
    if isinstance(stats, Tensor):
        return stats.detach()
    if isinstance(stats, tuple):
        detached = (_detach(s) for s in stats)
        return type(stats)(*detached) if hasattr(stats, "_fields") else tuple(detached)  # keep NamedTuples' types
    return stats
