"""Deferred checks: value errors recorded on the device in ``update``, raised later, never dropped.

A violation is ORed into a bool ``max``-reduced state per check. ``compute()`` raises or warns with torchmetrics'
message (one host read), ``forward()`` returns NaN for a violating batch, and ``reset()`` raises what ``compute()`` has
not reported since the states were last written.

Example:
    >>> import torch
    >>> from torchmetrics_async import MeanMetric
    >>> metric = MeanMetric(nan_strategy="error")
    >>> metric.update(torch.tensor([1.0, float("nan")]))  # no host sync: recorded on the device
    >>> metric.compute()
    Traceback (most recent call last):
    ...
    RuntimeError: Encountered `nan` values in tensor
"""

from typing import Any

import torch
from torch import Tensor

from torchmetrics_async._torchmetrics import rank_zero_warn

__all__ = [
    "DEFERRED_RAISE_OWNED",
    "FORWARD_BATCH",
    "UNREPORTED",
    "add_deferred_check",
    "add_with_violations",
    "deferred_checks_registered",
    "deferred_violated",
    "forget_preread",
    "mark_static_address",
    "mark_unreported",
    "nan_where",
    "raise_deferred_checks",
    "read_deferred",
    "read_deferred_together",
    "record_violation",
    "recorded_checks",
    "report_deferred",
    "report_unreported_checks",
    "reset_deferred",
]

#: Instance attribute: when true, ``compute()`` leaves the check states unread for whoever set it to report.
DEFERRED_RAISE_OWNED = "_deferred_raise_owned"
#: Instance attribute: the check states may have been written since last read; ``reset()`` reads them then.
UNREPORTED = "_deferred_unreported"
#: ``True`` while ``forward`` computes a batch value the torchmetrics way (``None`` otherwise).
FORWARD_BATCH = "_forward_batch"

_CHECKS = "_check_messages"  # check state name -> (message, "error" | "warn"), in registration order
_WARNED = "_nan_warned"  # a "warn" check has warned in this window
_PREREAD = "_deferred_preread"  # check values read by read_deferred_together(), for the compute() it precedes


def add_deferred_check(metric: Any, name: str, message: str, action: str = "error") -> None:
    """Register a check (idempotent): a bool state ``name`` and what reporting it does (raise or warn)."""
    state = metric.__dict__
    state.setdefault(_CHECKS, {})[name] = (message, action)
    state.setdefault(UNREPORTED, False)
    state.setdefault(_WARNED, False)
    state.setdefault(FORWARD_BATCH, None)
    if name not in metric._defaults:
        default = torch.zeros((), dtype=torch.bool, device=metric.device)
        metric.add_state(name, default=default, dist_reduce_fx="max")


def deferred_checks_registered(metric: Any) -> dict[str, tuple[str, str]]:
    """Check state name -> ``(message, action)``, in the order ``compute()`` reports them."""
    return metric.__dict__.get(_CHECKS, {})


def record_violation(metric: Any, name: str, violated: Tensor | bool) -> None:
    """OR a violation (a mask of any shape, or a host-known bool) into check ``name`` without reading it."""
    if isinstance(violated, bool):
        if violated:
            getattr(metric, name).fill_(True)
    elif violated.numel():
        getattr(metric, name).logical_or_(violated.any() if violated.dim() else violated)


def add_with_violations(metric: Any, states: list[Tensor], values: list[Tensor], violations: dict[str, Tensor]) -> None:
    """``state.add_(value)`` for every pair in one ``torch._foreach_add_``, then the violations."""
    if len(states) == 1:  # one pair: a plain add_ costs less host time than the list op
        states[0].add_(values[0])
    elif states:
        torch._foreach_add_(states, values)
    for name, violated in violations.items():
        record_violation(metric, name, violated)


def deferred_violated(metric: Any) -> Tensor | None:
    """Whether any ``"error"`` check is set, as a 0-dim bool tensor on the device (no host read); ``None`` without one.

    A ``"warn"`` check (NaNs dropped, with torchmetrics' warning) leaves torchmetrics' value as it is.
    """
    checks = deferred_checks_registered(metric).items()
    flags = [getattr(metric, name) for name, (_, action) in checks if action == "error"]
    if not flags:
        return None
    return flags[0] if len(flags) == 1 else torch.stack(flags).any()


def raise_deferred_checks(metric: Any) -> None:
    """Report the violated checks (one host read): the first ``"error"`` raises, a ``"warn"`` warns once per window."""
    if deferred_checks_registered(metric) and not metric.__dict__.get(DEFERRED_RAISE_OWNED, False):
        report_deferred(metric, read_deferred(metric))


def report_unreported_checks(metric: Any) -> Any:
    """Read the checks if written since last reported (``reset()``, before they die); return the report to make."""
    state = metric.__dict__
    checks = deferred_checks_registered(metric)
    if (
        not checks
        or state.get(DEFERRED_RAISE_OWNED, False)
        or not state.get(UNREPORTED, False)
        or getattr(metric, next(iter(checks))).is_meta  # meta states hold no values to report
    ):
        return None
    return read_deferred(metric)


def read_deferred(metric: Any) -> list[tuple[str, str, bool]]:
    """Every check as ``(message, action, violated)``: one host read (with the compiled count); marks them reported."""
    state = metric.__dict__
    checks = deferred_checks_registered(metric)
    counts = metric._compiled_count_codes()
    values = state.pop(_PREREAD, None)
    if values is None or counts:
        codes = [getattr(metric, name) for name in checks]
        values = torch.stack(codes + counts).tolist()  # the count promotes the flags to int64
        if counts:
            metric._fold_compiled_count(values.pop())
    state[UNREPORTED] = False
    return [(message, action, value) for (message, action), value in zip(checks.values(), values, strict=True)]


def recorded_checks(metric: Any) -> list[str]:
    """The names of the checks set in the window (one host read; none for meta states), without reporting them."""
    checks = deferred_checks_registered(metric)
    flags = [getattr(metric, name) for name in checks]
    if not flags or flags[0].is_meta:
        return []
    return [name for name, recorded in zip(checks, torch.stack(flags).tolist(), strict=True) if recorded]


def reset_deferred(metric: Any) -> None:
    """Clear the per-window bookkeeping beside the check states."""
    state = metric.__dict__
    state[UNREPORTED] = False
    state[_WARNED] = False


def read_deferred_together(metrics: Any) -> list[Any]:
    """Read the checks of many metrics in one host read per device, for each one's next report (none marked reported).

    Call :func:`forget_preread` on the returned metrics afterwards, before anything can write their states.
    """
    taken: dict[torch.device, list[tuple[Any, list[Tensor]]]] = {}
    for metric in metrics:
        if metric.__dict__.get(DEFERRED_RAISE_OWNED, False):
            continue
        codes = [getattr(metric, name) for name in deferred_checks_registered(metric)]
        if codes and not codes[0].is_meta:
            taken.setdefault(codes[0].device, []).append((metric, codes))
    out = []
    for members in taken.values():
        flat = torch.stack([code for _, codes in members for code in codes]).tolist()  # the one read
        for metric, codes in members:
            metric.__dict__[_PREREAD], flat = flat[: len(codes)], flat[len(codes) :]
            out.append(metric)
    return out


def forget_preread(metrics: Any) -> None:
    """Drop values read by :func:`read_deferred_together` that no ``compute()`` or ``reset()`` used."""
    for metric in metrics:
        metric.__dict__.pop(_PREREAD, None)


def mark_unreported(metric: Any) -> None:
    """Record that states arrived through a door: cached result dropped, checks to report (update count untouched)."""
    state = metric.__dict__
    state["_computed"] = None
    state[UNREPORTED] = True


def mark_static_address(tensor: Tensor) -> Tensor:
    """``torch._dynamo.mark_static_address(tensor, guard=False)`` without importing Dynamo."""
    tensor._dynamo_static_input_type = "unguarded"  # type: ignore[attr-defined]
    return tensor


def report_deferred(metric: Any, checks: list[tuple[str, str, bool]]) -> None:
    """Raise (the first violated ``"error"``) or warn (once per window) for checks read on the host."""
    for message, action, violated in checks:
        if not violated:
            continue
        if action == "error":
            raise RuntimeError(message)
        state = getattr(metric, "__dict__", {})
        if not state.get(_WARNED, False):
            rank_zero_warn(message, UserWarning)
            state[_WARNED] = True


def nan_where(violated: Tensor | None, value: Any) -> Any:
    """``value`` (a tensor or a dict/list/tuple of them) with floating-point tensors NaN where ``violated``.

    Example:
        >>> import torch
        >>> nan_where(torch.tensor(True), {"acc": torch.tensor(0.5), "n": torch.tensor(3)})
        {'acc': tensor(nan), 'n': tensor(3)}
    """
    if violated is None:
        return value
    if isinstance(value, Tensor):
        return value.masked_fill(violated, float("nan")) if value.is_floating_point() else value
    if isinstance(value, dict):
        return {key: nan_where(violated, item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(nan_where(violated, item) for item in value)
    return value
