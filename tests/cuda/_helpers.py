"""Shared by the CUDA tests: device sleeps, and results as Python values (the collector's output form)."""

from __future__ import annotations

from typing import Any

import torch

NUM_CLASSES = 5


def cycles_per_ms() -> float:
    """GPU cycles per millisecond, measured with CUDA events around ``torch.cuda._sleep`` (as PyTorch's tests do)."""
    torch.cuda.synchronize()
    rates = []
    for _ in range(3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(1_000_000)
        end.record()
        end.synchronize()
        rates.append(1_000_000 / start.elapsed_time(end))
    return sorted(rates)[1]


def sleep_ms(cycles: float, ms: float) -> None:
    """Queue about ``ms`` milliseconds of spinning on the current stream (no host wait)."""
    torch.cuda._sleep(int(cycles * ms))


def as_python(value: Any) -> Any:
    """A computed value as Python numbers/lists (the collector's output form)."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().tolist()
    if isinstance(value, dict):
        return {key: as_python(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(as_python(item) for item in value)
    return value


__all__ = [
    "NUM_CLASSES",
    "as_python",
    "cycles_per_ms",
    "sleep_ms",
]
