"""The stream seam of the collector's accelerator path: :class:`StreamOps` and its CUDA implementation."""

from __future__ import annotations

import contextlib
from typing import Any, Protocol, runtime_checkable

import torch
from torch import Tensor

__all__ = ["CudaStreamOps", "StreamOps"]


@runtime_checkable
class StreamOps(Protocol):
    """The few stream operations the collector's accelerator path needs; a fake one lets CPU tests drive that path."""

    def current_stream(self) -> Any:
        """The stream the caller enqueues work on."""

    def new_stream(self) -> Any:
        """A new side stream."""

    def record_event(self, stream: Any) -> Any:
        """An event recorded on ``stream`` now (it completes when the work enqueued so far completes)."""

    def wait_event(self, stream: Any, event: Any) -> None:
        """Make ``stream`` wait for ``event`` (no host wait)."""

    def use(self, stream: Any) -> contextlib.AbstractContextManager:
        """A context in which new work is enqueued on ``stream``."""

    def to_host(self, tensor: Tensor) -> Tensor:
        """Start an asynchronous copy of ``tensor`` to (pinned) host memory on the current stream; return it."""

    def synchronize(self, event: Any) -> None:
        """Block the host until ``event`` has completed."""


class CudaStreamOps:
    """:class:`StreamOps` on the CUDA ``device`` of the metrics.

    Example:
        >>> CudaStreamOps("cuda:1").device
        device(type='cuda', index=1)
    """

    def __init__(self, device: torch.device | str) -> None:
        self.device = torch.device(device)

    def current_stream(self) -> Any:
        """``torch.cuda.current_stream(device)``."""
        return torch.cuda.current_stream(self.device)

    def new_stream(self) -> Any:
        """``torch.cuda.Stream(device)``."""
        return torch.cuda.Stream(device=self.device)

    def record_event(self, stream: Any) -> Any:
        """An event (no timing) recorded on ``stream``."""
        event = torch.cuda.Event()
        event.record(stream)
        return event

    def wait_event(self, stream: Any, event: Any) -> None:
        """``stream.wait_event(event)``: a device-side dependency."""
        stream.wait_event(event)

    def use(self, stream: Any) -> contextlib.AbstractContextManager:
        """``torch.cuda.stream(stream)``."""
        return torch.cuda.stream(stream)

    def to_host(self, tensor: Tensor) -> Tensor:
        """A non-blocking copy into pinned host memory, valid once the current stream has reached this point."""
        if tensor.device.type == "cpu":
            return tensor
        # Pinned explicitly: a non-blocking copy into pageable memory would be synchronous.
        host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
        host.copy_(tensor, non_blocking=True)
        return host

    def synchronize(self, event: Any) -> None:
        """``event.synchronize()``: the one host wait of a collection."""
        event.synchronize()


def _refuse_capture(what: str) -> None:
    # Inside a capture nothing runs: the host would wait on events and copies that never started.
    if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
        raise RuntimeError(
            f"AsyncMetricCollector.{what}() cannot run inside a CUDA graph capture: call it outside the captured"
            " region (update() may be captured; scheduling and collecting happen between graph replays)."
        )
