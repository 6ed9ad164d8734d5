"""Where and whether collectives run, and :class:`SyncHandle`, the handle of a fused sync or reduction in flight."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

__all__ = ["SyncHandle", "collective_device"]


def collective_device(
    group: Any = None, device: torch.device | str | None = None, backend: str | None = None
) -> torch.device:
    """The device a collective on ``group`` runs on for tensors on ``device`` (``None``: the CPU; NCCL: current CUDA).

    Example:
        >>> collective_device(device="cpu", backend="gloo"), collective_device(device="cuda:1", backend="nccl")
        (device(type='cpu'), device(type='cuda', index=1))
    """
    device = torch.device("cpu") if device is None else torch.device(device)
    backend = str(dist.get_backend(group) if backend is None else backend).lower()
    supported = getattr(dist.Backend, "backend_capability", {}).get(backend)
    if backend == "nccl":
        supported = ["cuda"]
    if not supported or device.type in supported:
        return device
    accelerator = supported[0]
    return torch.device(accelerator, torch.get_device_module(accelerator).current_device())


def _member(group: Any) -> bool:
    """Whether this rank belongs to ``group`` (a non-member keeps its values)."""
    return dist.get_rank(group) >= 0


def _all_gather_single(output: Tensor, local: Tensor, group: Any, async_op: bool) -> Any:
    """One all_gather into one flat tensor (``all_gather_single`` where torch has it)."""
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    return gather(output, local, group=group, async_op=async_op)


def _to(tensor: Tensor, device: torch.device, dtype: torch.dtype | None = None) -> Tensor:
    """``tensor.to(device, dtype)``, skipped when it would do nothing; asynchronous only onto an accelerator."""
    dtype = tensor.dtype if dtype is None else dtype
    if tensor.device == device and tensor.dtype == dtype:
        return tensor
    return tensor.to(device=device, dtype=dtype, non_blocking=device.type != "cpu")


def _copy_into(out: Tensor, source: Tensor) -> None:
    """``out.copy_(source)``, asynchronous only when ``out`` is on an accelerator (see :func:`_to`)."""
    out.copy_(source, non_blocking=out.device.type != "cpu")


def _host_to_device(values: list[int], device: torch.device) -> Tensor:
    """An int64 tensor of host values on ``device``, copied asynchronously (pinned source) off the CPU."""
    host = torch.tensor(values, dtype=torch.int64)
    if device.type == "cpu":
        return host
    return host.pin_memory().to(device, non_blocking=True)


class SyncHandle:
    """A fused sync or reduction in flight: ``wait()`` finishes it and returns its result.

    After :meth:`launch_remaining` the handle issues no collective: ``wait()`` only waits and finishes locally.

    Example:
        >>> import torch
        >>> from torchmetrics_async.distributed import reduce_sum
        >>> handle = reduce_sum({"n": torch.tensor(3)}, async_op=True)
        >>> handle.launch_remaining()  # nothing left to issue: one all_reduce at most
        >>> handle.is_completed(), handle.wait()
        (True, {'n': tensor(3)})
    """

    def __init__(
        self,
        finish: Callable[[], Any] | None,
        works: Iterable[Any] = (),
        launch: Callable[[], Iterable[Any]] | None = None,
    ) -> None:
        self._finish = finish
        self._works = [work for work in works if work is not None]
        #: issues the collectives that depend on the first ones' results; returns their works
        self._launch = launch
        self._result: Any = None
        self._error: BaseException | None = None

    @classmethod
    def completed(cls, result: Any) -> SyncHandle:
        """A handle for work that is already done: ``wait()`` returns ``result``."""
        handle = cls(None)
        handle._result = result
        return handle

    def is_completed(self) -> bool:
        """Whether ``wait()`` would return without waiting: every collective done, none left to launch."""
        if self._finish is None:
            return True
        return self._launch is None and all(work.is_completed() for work in self._works)

    def launch_remaining(self) -> None:
        """Issue every collective still to come, so that ``wait()`` only waits (call it on every rank).

        A launch error (a :class:`PlanMismatchError` on every rank) is raised again on later calls.
        """
        if self._error is not None:
            raise self._error
        launch, self._launch = self._launch, None
        if launch is None:
            return
        try:
            self._works.extend(work for work in launch() if work is not None)
        except BaseException as err:
            self._error = err
            self._finish = None
            raise

    def wait(self) -> Any:
        """Launch what remains, wait for the collectives, and finish once; errors are raised again later."""
        self.launch_remaining()
        finish, self._finish = self._finish, None
        if finish is not None:
            try:
                self._result = finish()
            except BaseException as err:
                self._error = err
                raise
            # A gloo work object destroyed after its process group can abort the process.
            self._works = []
        return self._result
