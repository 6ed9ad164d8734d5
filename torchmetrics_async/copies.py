"""Owned states and fused copies: what a metric owns, and resets and snapshots of many states in one copy."""

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch import Tensor

from torchmetrics_async.deferred import mark_static_address

__all__ = ["FRESH_DEFAULTS", "OWNED_STATES", "fused_copy_", "fused_reset", "reset_device", "same_layout"]

#: Instance attribute: state name -> the state object this metric made itself and has not handed out (every door
#: through which sharing enters copies, so updates write in place without looking).
OWNED_STATES = "_owned_states"
# Instance attribute set by fused_reset() for the metric's next reset: state name -> its fresh default, copied already.
FRESH_DEFAULTS = "_fresh_defaults"


@contextlib.contextmanager
def fused_reset(metrics: Iterable[Any]) -> Iterator[None]:
    """Reset many metrics with one fused copy of their defaults (into fresh tensors) instead of one clone per state."""
    prepared: list[dict[str, Any]] = []
    fresh: list[Tensor] = []
    defaults: list[Tensor] = []
    for metric in metrics:
        state = metric.__dict__
        if OWNED_STATES not in state or FRESH_DEFAULTS in state:  # not ours, or prepared by an enclosing block
            continue
        mine = {}
        for attr, default in metric._defaults.items():
            if isinstance(default, Tensor):
                tensor = mine[attr] = torch.empty_like(default, device=reset_device(state.get(attr), default))
                fresh.append(mark_static_address(tensor))
                defaults.append(default)
        state[FRESH_DEFAULTS] = mine
        prepared.append(state)
    fused_copy_(fresh, defaults)
    try:
        yield
    finally:
        for state in prepared:
            state.pop(FRESH_DEFAULTS, None)


def fused_copy_(targets: list[Tensor], sources: list[Tensor]) -> None:
    """``target.copy_(source)`` for every pair: one ``torch._foreach_copy_`` per (device, dtype) group.

    Example:
        >>> import torch
        >>> targets = [torch.zeros(2), torch.zeros((), dtype=torch.int64)]
        >>> fused_copy_(targets, [torch.ones(2), torch.tensor(7)])
        >>> targets
        [tensor([1., 1.]), tensor(7)]
    """
    groups: dict[tuple, tuple[list[Tensor], list[Tensor]]] = {}
    for target, source in zip(targets, sources, strict=True):
        key = (target.device, target.dtype, source.device, source.dtype)
        pair = groups.setdefault(key, ([], []))
        pair[0].append(target)
        pair[1].append(source)
    for group_targets, group_sources in groups.values():
        torch._foreach_copy_(group_targets, group_sources)


def reset_device(current: Any, default: Tensor) -> torch.device:
    """Where a reset state lives: where it lives now (a default may lag behind a move), else the default's."""
    return current.device if isinstance(current, Tensor) else default.device


def same_layout(a: Tensor, b: Tensor) -> bool:
    """Whether ``a.copy_(b)`` keeps ``a`` as it is (``copy_`` crosses devices itself)."""
    return a.shape == b.shape and a.dtype == b.dtype
