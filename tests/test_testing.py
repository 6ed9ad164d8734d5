"""Tests for torchmetrics_async.testing: every sync kind is caught once, non-syncs pass, state is restored exactly."""

from __future__ import annotations

import contextlib
import doctest
import inspect
import os
import re
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torchmetrics
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

import torchmetrics_async.testing as tma_testing
from torchmetrics_async.testing import (
    HostSyncCounter,
    HostSyncError,
    HostSyncEvent,
    collectives,
    count_host_syncs,
    events,
    host_sync,
    no_host_sync,
)

# Captured before any context patches it, to reach the c10d.barrier dispatcher rule without the Python-level wrapper.
_RAW_BARRIER = dist.barrier

HOST_READ = "host read"
SHAPE = "data-dependent shape"
H2D = "host-to-device copy"
D2H = "device-to-host copy"


def _x() -> torch.Tensor:
    return torch.tensor([0.0, 1.0, 2.0, 2.0])


def _meta(n: int = 4) -> torch.Tensor:
    return torch.ones(n, device="meta")


def _if_any() -> None:
    if _x().any():
        pass


def _in_default_meta_device() -> None:
    with torch.device("meta"):
        torch.tensor(1.0)


def _set_mask() -> None:
    x = _x()
    x[x > 1] = 0.0


def _uint8_mask_index() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # uint8 masks are deprecated but still index (and sync)
        _x()[torch.tensor([1, 0, 1, 0], dtype=torch.uint8)]


def _meta_slice_assign() -> None:
    m = _meta()
    m[0:2] = torch.ones(2)


# Looked up at call time: inside a context these names are the patched wrappers.
def _barrier() -> None:
    dist.barrier()


def _cuda_synchronize() -> None:
    torch.cuda.synchronize()


# (id, fn, op name in the error, reason, exception the real call raises once allowed to run in count mode)
SYNC_CASES: list[tuple[str, Callable[[], Any], str, str, type[BaseException] | None]] = [
    # host reads
    ("item", lambda: _x().sum().item(), "Tensor.item", HOST_READ, None),
    ("bool", lambda: bool(_x().sum()), "Tensor.__bool__", HOST_READ, None),
    ("if-any", _if_any, "Tensor.__bool__", HOST_READ, None),
    ("float", lambda: float(_x().sum()), "Tensor.__float__", HOST_READ, None),
    ("int", lambda: int(_x().sum()), "Tensor.__int__", HOST_READ, None),
    ("index-dunder", lambda: range(torch.tensor(2)), "Tensor.__index__", HOST_READ, None),
    ("complex", lambda: complex(_x()[0]), "Tensor.__complex__", HOST_READ, None),
    ("tolist", lambda: _x().tolist(), "Tensor.tolist", HOST_READ, None),
    ("numpy", lambda: _x().numpy(), "Tensor.numpy", HOST_READ, None),
    ("np.asarray", lambda: np.asarray(_x()), "Tensor.numpy", HOST_READ, None),
    ("format", lambda: f"{_x()[0]:.2f}", "Tensor.item", HOST_READ, None),
    ("contains", lambda: 1.0 in _x(), "Tensor.item", HOST_READ, None),
    ("repr", lambda: repr(_x()), "Tensor.__repr__", HOST_READ, None),
    ("f-string", lambda: f"{_x()}", "Tensor.__repr__", HOST_READ, None),
    ("repr-parameter", lambda: repr(torch.nn.Parameter(_x())), "Tensor.__repr__", HOST_READ, None),
    ("equal", lambda: torch.equal(_x(), _x()), "aten.equal", HOST_READ, None),
    ("allclose", lambda: torch.allclose(_x(), _x()), "aten.allclose", HOST_READ, None),
    ("is_nonzero", lambda: torch.is_nonzero(_x()[1:2]), "aten._local_scalar_dense", HOST_READ, None),
    # a 0-dim integer index is read on the host (unlike indexing with a 1-D index tensor)
    ("0-dim-int-index", lambda: _x()[torch.tensor(1)], "aten._local_scalar_dense", HOST_READ, None),
    # data-dependent output shapes
    ("nonzero", lambda: _x().nonzero(), "aten.nonzero", SHAPE, None),
    ("argwhere", lambda: torch.argwhere(_x()), "aten.nonzero", SHAPE, None),
    ("mask-index", lambda: _x()[_x() > 1], "aten.index", SHAPE, None),
    ("uint8-mask-index", _uint8_mask_index, "aten.index", SHAPE, None),
    ("mask-setitem", _set_mask, "aten.index_put_", SHAPE, None),
    ("index_put-bool", lambda: _x().index_put((_x() > 1,), torch.tensor(0.0)), "aten.index_put", SHAPE, None),
    ("masked_select", lambda: _x().masked_select(_x() > 1), "aten.masked_select", SHAPE, None),
    ("unique", lambda: _x().unique(), "aten._unique2", SHAPE, None),
    ("unique-counts", lambda: torch.unique(_x(), return_counts=True), "aten._unique2", SHAPE, None),
    ("_unique", lambda: torch._unique(_x()), "aten._unique", SHAPE, None),
    ("unique-dim", lambda: torch.unique(_x(), dim=0), "aten.unique_dim", SHAPE, None),
    ("unique_consecutive", lambda: torch.unique_consecutive(_x()), "aten.unique_consecutive", SHAPE, None),
    (
        "unique_dim_consecutive",
        lambda: torch.ops.aten.unique_dim_consecutive(_x(), 0),
        "aten.unique_dim_consecutive",
        SHAPE,
        None,
    ),
    ("bincount", lambda: torch.bincount(_x().long()), "aten.bincount", SHAPE, None),
    ("repeat_interleave", lambda: _x().repeat_interleave(_x().long()), "aten.repeat_interleave", SHAPE, None),
    ("histc", lambda: torch.histc(_x(), bins=4), "aten.histc", SHAPE, None),
    # host -> device
    ("tensor->meta", lambda: torch.tensor([1.0], device="meta"), "torch.tensor -> meta", H2D, None),
    ("as_tensor->meta", lambda: torch.as_tensor(1.0, device="meta"), "torch.as_tensor -> meta", H2D, None),
    ("asarray->meta", lambda: torch.asarray(1.0, device="meta"), "torch.asarray -> meta", H2D, None),
    ("numpy->meta", lambda: torch.as_tensor(np.ones(2), device="meta"), "torch.as_tensor -> meta", H2D, None),
    ("new_tensor", lambda: _meta().new_tensor([1.0]), "Tensor.new_tensor -> meta", H2D, None),
    ("default-device", _in_default_meta_device, "torch.tensor -> meta", H2D, None),
    ("to(meta)", lambda: torch.ones(2).to("meta"), "aten._to_copy", H2D, None),
    ("to(meta-tensor)", lambda: torch.ones(2).to(_meta()), "aten._to_copy", H2D, None),
    ("as_tensor(cpu-tensor)->meta", lambda: torch.as_tensor(torch.ones(2), device="meta"), "aten._to_copy", H2D, None),
    ("copy_-h2d", lambda: _meta(2).copy_(torch.ones(2)), "aten.copy_", H2D, None),
    ("slice-assign-h2d", _meta_slice_assign, "aten.copy_", H2D, None),
    # device -> host (meta has no data, so the real copy fails once count mode lets it run)
    ("cpu()", lambda: _meta().cpu(), "aten._to_copy", D2H, NotImplementedError),
    ("to(cpu)", lambda: _meta().to("cpu"), "aten._to_copy", D2H, NotImplementedError),
    ("copy_-d2h", lambda: torch.ones(4).copy_(_meta()), "aten.copy_", D2H, NotImplementedError),
    # barriers and explicit synchronization (no process group / no CUDA here, so the real call fails afterwards)
    ("dist.barrier", _barrier, "torch.distributed.barrier", "barrier", Exception),
    ("cuda.synchronize", _cuda_synchronize, "torch.cuda.synchronize", "explicit synchronize", Exception),
]

NON_SYNC_CASES: list[tuple[str, Callable[[], Any]]] = [
    ("metadata", lambda: (_x().shape, _x().numel(), _x().dtype, _x().device, len(_x()), _x().dim())),
    ("math", lambda: (_x() * 2 + 1).exp().sum().sqrt()),
    ("in-place", lambda: _x().add_(1.0).mul_(_x()).clamp_(max=3.0)),
    ("where", lambda: torch.where(_x() > 1, _x(), 0.0)),
    ("masked_fill", lambda: _x().masked_fill(_x() > 1, 0.0)),
    ("index_add_", lambda: torch.zeros(2).index_add_(0, torch.tensor([0, 1, 1, 0]), _x())),
    ("scatter_add_", lambda: torch.zeros(2).scatter_add_(0, torch.tensor([0, 1, 1, 0]), _x())),
    ("int-tensor-index", lambda: _x()[torch.tensor([0, 2])]),
    ("int-tensor-setitem", lambda: _x().__setitem__(torch.tensor([0, 2]), 5.0)),
    ("python-index", lambda: (_x()[1], _x()[1:], _x()[..., None], _x()[True])),
    ("nonzero_static", lambda: torch.nonzero_static(_x(), size=4)),
    ("repeat_interleave-output_size", lambda: _x().repeat_interleave(_x().long(), output_size=5)),
    ("repeat_interleave-int", lambda: _x().repeat_interleave(2)),
    ("cpu-tensor-from-python", lambda: (torch.tensor(3.0), torch.as_tensor([1.0]), torch.asarray(2.0))),
    ("cpu-from-numpy", lambda: torch.as_tensor(np.ones(2))),
    ("cpu-to-cpu", lambda: (_x().cpu(), _x().to("cpu"), torch.ones(4).copy_(_x()))),
    ("meta-factories", lambda: (torch.full((2,), 3.0, device="meta"), torch.zeros(2, device="meta"))),
    ("meta-add_-python-number", lambda: _meta().add_(1.5)),
    ("meta-plus-0dim-cpu", lambda: _meta() + torch.tensor(2.0)),
    ("meta-to-meta", lambda: (_meta().to("meta"), torch.as_tensor(_meta(), device="meta"), _meta().copy_(_meta()))),
    ("to(meta)-non_blocking", lambda: torch.ones(2).to("meta", non_blocking=True)),
    ("copy_-non_blocking", lambda: _meta(2).copy_(torch.ones(2), non_blocking=True)),
    ("repr-meta", lambda: repr(_meta())),
    ("stack-cat", lambda: (torch.stack([_x(), _x()]), torch.cat([_x(), _x()]))),
    ("sort-topk-cumsum", lambda: (_x().sort(), _x().topk(2), _x().cumsum(0))),
]


def _ids(cases: list[tuple[Any, ...]]) -> list[str]:
    return [case[0] for case in cases]


@pytest.mark.parametrize(("name", "fn", "op", "reason", "exc"), SYNC_CASES, ids=_ids(SYNC_CASES))
def test_sync_is_caught(name: str, fn: Callable[[], Any], op: str, reason: str, exc: type[BaseException] | None):
    with pytest.raises(HostSyncError, match=re.escape(op)) as info, no_host_sync():
        fn()
    assert info.value.event is not None
    assert info.value.event.op == op
    assert info.value.event.reason == reason
    assert f"({reason})" in str(info.value)


@pytest.mark.parametrize(("name", "fn", "op", "reason", "exc"), SYNC_CASES, ids=_ids(SYNC_CASES))
def test_sync_is_counted_once(name: str, fn: Callable[[], Any], op: str, reason: str, exc: type[BaseException] | None):
    with count_host_syncs() as syncs:
        if exc is None:
            fn()
        else:
            with pytest.raises(exc):
                fn()
    assert syncs.total == 1, syncs.summary()
    assert syncs.by_op == {op: 1}
    assert syncs.by_reason == {reason: 1}
    [event] = syncs.events
    assert event.op == op
    assert event.filename == __file__


@pytest.mark.parametrize(("name", "fn"), NON_SYNC_CASES, ids=_ids(NON_SYNC_CASES))
def test_non_sync_passes(name: str, fn: Callable[[], Any]):
    with no_host_sync():
        fn()
    with count_host_syncs() as syncs:
        fn()
    assert syncs.total == 0, syncs.summary()
    assert not syncs.by_op
    assert not syncs.events


def test_error_names_this_file_and_line():
    t = _x()
    line = inspect.currentframe().f_lineno + 2  # type: ignore[union-attr]
    with pytest.raises(HostSyncError) as info, no_host_sync():
        bool(t.sum() > 0)
    message = str(info.value)
    assert f"{__file__}:{line} in test_error_names_this_file_and_line: bool(t.sum() > 0)" in message
    assert os.path.basename(__file__) in message
    assert "Tensor.__bool__ (host read)" in message
    event = info.value.event
    assert (event.filename, event.lineno, event.function) == (__file__, line, "test_error_names_this_file_and_line")


def test_count_records_user_locations():
    x = _x()
    first = inspect.currentframe().f_lineno + 2  # type: ignore[union-attr]
    with count_host_syncs() as syncs:
        x.tolist()
        x.nonzero()
    assert [(e.op, e.lineno) for e in syncs.events] == [("Tensor.tolist", first), ("aten.nonzero", first + 1)]
    assert syncs.total == 2
    assert "2 host syncs" in syncs.summary()
    assert "aten.nonzero (data-dependent shape)" in syncs.summary()
    assert repr(syncs).startswith("HostSyncCounter(total=2")


def test_record_events_false_keeps_counts_only():
    with count_host_syncs(record_events=False) as syncs:
        _x().tolist()
        _x().tolist()
    assert syncs.total == 2
    assert syncs.by_op == {"Tensor.tolist": 2}
    assert syncs.events == []


# --------------------------------------------------------------------------------------------------------------------
# Nesting and restoration

_MISSING = object()


def _patched_state() -> dict[tuple[int, str], Any]:
    return {(id(owner), attr): vars(owner).get(attr, _MISSING) for owner, attr, _ in host_sync._patch_plan()}


def _snapshot() -> tuple[Any, ...]:
    return (
        _patched_state(),
        torch.Tensor.tolist,
        torch.Tensor.item,
        torch.Tensor.__bool__,
        torch.as_tensor,
        torch.tensor,
        torch.asarray,
        dist.barrier,
        len(_get_current_dispatch_mode_stack()),
    )


def test_patches_are_visible_inside_and_restored_exactly():
    before = _snapshot()
    assert "__bool__" not in vars(torch.Tensor)
    with no_host_sync():
        assert torch.as_tensor is not before[4]
        assert "__bool__" in vars(torch.Tensor)
        assert len(_get_current_dispatch_mode_stack()) == before[-1] + 1
        with count_host_syncs():
            # nested contexts share one set of patches and one dispatch mode
            assert len(_get_current_dispatch_mode_stack()) == before[-1] + 1
    assert _snapshot() == before
    assert "__bool__" not in vars(torch.Tensor)
    assert torch.Tensor.tolist is torch._C.TensorBase.tolist


def _math_then_raise() -> None:
    torch.ones(2).add_(1)
    raise KeyError("boom")


@pytest.mark.parametrize("outer", ["strict", "count"])
@pytest.mark.parametrize("inner", ["strict", "count"])
def test_nested_restore_after_exception(outer: str, inner: str):
    before = _snapshot()
    contexts = {"strict": no_host_sync, "count": count_host_syncs}
    with pytest.raises(KeyError), contexts[outer](), contexts[inner]():
        _math_then_raise()
    assert _snapshot() == before
    # fully usable again afterwards
    with pytest.raises(HostSyncError), no_host_sync():
        _x().tolist()
    assert _snapshot() == before


def test_strict_inside_count_raises_and_outer_counts():
    with count_host_syncs() as outer:
        with pytest.raises(HostSyncError, match=re.escape("aten.nonzero")), no_host_sync():
            _x().nonzero()
        _x().tolist()  # back in counting mode: allowed
    assert outer.by_op == {"aten.nonzero": 1, "Tensor.tolist": 1}


def test_count_inside_strict_allows_and_counts():
    with no_host_sync():
        with count_host_syncs() as inner:
            _x().tolist()
            _x().nonzero()
        assert inner.total == 2
        with pytest.raises(HostSyncError, match=re.escape("Tensor.tolist")):
            _x().tolist()


def test_nested_counters_both_count_once():
    with count_host_syncs() as outer:
        _x().tolist()
        with count_host_syncs() as inner:
            bool(_x()[0])
    assert outer.by_op == {"Tensor.tolist": 1, "Tensor.__bool__": 1}
    assert inner.by_op == {"Tensor.__bool__": 1}


def test_exiting_out_of_order_is_an_error():
    before = _snapshot()
    outer = count_host_syncs()
    inner = count_host_syncs()
    outer.__enter__()
    inner.__enter__()
    with pytest.raises(RuntimeError, match="order"):
        outer.__exit__(None, None, None)
    assert _snapshot() != before  # inner is still active
    inner.__exit__(None, None, None)
    assert _snapshot() == before


def test_outside_contexts_nothing_is_reported():
    with count_host_syncs() as syncs:
        pass
    _x().tolist()
    bool(_x()[0])
    assert syncs.total == 0


def test_default_device_context_still_works_after_patching():
    from torch.utils._device import _device_constructors

    _device_constructors.cache_clear()  # as if nothing had used `with torch.device(...)` before the context
    with count_host_syncs() as syncs, torch.device("meta"):
        torch.tensor(1.0)
    assert syncs.by_op == {"torch.tensor -> meta": 1}
    with torch.device("meta"):
        assert torch.tensor(1.0).device.type == "meta"
        assert torch.as_tensor([1.0]).device.type == "meta"


def test_wrappers_captured_inside_are_inert_outside():
    with no_host_sync():
        as_tensor = torch.as_tensor
    assert as_tensor(1.0, device="meta").device.type == "meta"


def test_other_threads_are_not_flagged():
    import threading

    result: list[Any] = []
    with no_host_sync():
        worker = threading.Thread(target=lambda: result.append(_x().tolist()))
        worker.start()
        worker.join()
    assert result == [[0.0, 1.0, 2.0, 2.0]]


# --------------------------------------------------------------------------------------------------------------------
# Autograd


def test_autograd_works_inside():
    w = torch.ones(3, requires_grad=True)
    with no_host_sync():
        loss = (w * torch.tensor([1.0, 2.0, 3.0])).pow(2).sum()
        loss.backward()
    assert torch.equal(w.grad, torch.tensor([2.0, 8.0, 18.0]))


def test_autograd_syncs_are_counted_in_backward_too():
    w = torch.ones(3, requires_grad=True)
    with count_host_syncs() as syncs:
        w[w > 0].sum().backward()  # index forward, index_put backward: both mask ops
    assert syncs.by_op == {"aten.index": 1, "aten.index_put": 1}
    assert torch.equal(w.grad, torch.ones(3))


# --------------------------------------------------------------------------------------------------------------------
# torchmetrics


def _aggregation_file(event: HostSyncEvent) -> bool:
    return event.filename.endswith(os.path.join("torchmetrics", "aggregation.py"))


def test_sync_in_torchmetrics_points_at_torchmetrics():
    metric = torchmetrics.MeanMetric()
    with pytest.raises(HostSyncError, match=re.escape("aggregation.py")) as info, no_host_sync():
        metric.update(torch.tensor([1.0, float("nan")]))
    assert info.value.event.op == "Tensor.__bool__"
    assert _aggregation_file(info.value.event)
    assert ".any()" in info.value.event.source


def test_torchmetrics_mean_on_meta_flags_as_tensor():
    metric = torchmetrics.MeanMetric(nan_strategy="disable").to("meta")
    with pytest.raises(HostSyncError, match=re.escape("torch.as_tensor -> meta")) as info, no_host_sync():
        metric.update(1.0)
    assert _aggregation_file(info.value.event)
    assert "torch.as_tensor(value" in info.value.event.source
    with count_host_syncs() as syncs:
        metric.update(1.0)
    assert syncs.by_op == {"torch.as_tensor -> meta": 1}
    metric.update(torch.ones(3, device="meta"))  # tensor input on the device: nothing to flag
    with count_host_syncs() as syncs:
        metric.update(torch.ones(3, device="meta"))
    assert syncs.total == 0


# --------------------------------------------------------------------------------------------------------------------
# Distributed


@pytest.fixture
def gloo_group():
    dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
    yield
    dist.destroy_process_group()


def test_barrier_with_process_group(gloo_group: None):
    with count_host_syncs() as syncs:
        dist.barrier()  # the wrapper reports it; the c10d.barrier op underneath is not counted again
        dist.barrier(async_op=True).wait()
    assert syncs.by_op == {"torch.distributed.barrier": 1}
    with pytest.raises(HostSyncError, match=re.escape("c10d.barrier")), no_host_sync():
        _RAW_BARRIER()  # an unwrapped reference still reaches the dispatcher rule


# --------------------------------------------------------------------------------------------------------------------
# FakeTensorMode


def test_fake_tensor_mode_outside():
    with FakeTensorMode():
        device = torch.ones(3, device="cuda")  # a fake CUDA tensor, no GPU needed
        host = torch.ones(3)
        with no_host_sync():
            device + host.sum()  # a 0-dim host operand is a kernel argument
            device.to("cpu", non_blocking=True)
            host.to(device.device, non_blocking=True)
        for fn, op in [
            (device.cpu, "aten._to_copy"),
            (lambda: host.to(device.device), "aten._to_copy"),
            (lambda: torch.as_tensor(1.0, device=device.device), "torch.as_tensor -> cuda"),
            (lambda: device.sum().item(), "Tensor.item"),
            # Tensor.nonzero's binding opens a CUDA device guard before dispatch; the op itself needs none
            (lambda: torch.ops.aten.nonzero.default(device), "aten.nonzero"),
        ]:
            with pytest.raises(HostSyncError, match=re.escape(op)), no_host_sync():
                fn()
        with count_host_syncs() as syncs:
            back = device.cpu()
        assert back.device.type == "cpu"
        assert syncs.by_reason == {D2H: 1}


def test_fake_tensor_mode_inside():
    with no_host_sync():
        with FakeTensorMode():
            x = torch.ones(3)
            (x * 2).sum()
        with pytest.raises(HostSyncError, match=re.escape("aten.nonzero")), FakeTensorMode():
            torch.ones(3).nonzero()


# --------------------------------------------------------------------------------------------------------------------
# CUDA path (decision and save/restore only: no GPU here)


class _FakeCudaDebugMode:
    modes = {"default": 0, "warn": 1, "error": 2}

    def __init__(self) -> None:
        self.state = 0
        self.calls: list[int] = []

    def get(self) -> int:
        return self.state

    def set(self, mode: int | str) -> None:
        self.state = self.modes[mode] if isinstance(mode, str) else mode
        self.calls.append(self.state)


@pytest.fixture
def fake_cuda(monkeypatch: pytest.MonkeyPatch) -> _FakeCudaDebugMode:
    fake = _FakeCudaDebugMode()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_sync_debug_mode", fake.get)
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", fake.set)
    return fake


def test_cpu_only_does_not_touch_cuda_debug_mode(monkeypatch: pytest.MonkeyPatch):
    calls: list[Any] = []
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", calls.append)
    assert not host_sync._use_cuda_sync_debug_mode()
    with no_host_sync(), count_host_syncs():
        pass
    assert calls == []


def test_cuda_debug_mode_set_and_restored(fake_cuda: _FakeCudaDebugMode):
    assert host_sync._use_cuda_sync_debug_mode()
    with no_host_sync():
        assert fake_cuda.state == 2
        with count_host_syncs():
            assert fake_cuda.state == 1
        assert fake_cuda.state == 2
    assert fake_cuda.state == 0
    assert fake_cuda.calls == [2, 1, 2, 0]
    fake_cuda.state = 1  # a previous non-default mode is restored too
    with pytest.raises(ValueError, match="boom"), no_host_sync():
        raise ValueError("boom")
    assert fake_cuda.state == 1


def test_cuda_warnings_are_counted_once(fake_cuda: _FakeCudaDebugMode, monkeypatch: pytest.MonkeyPatch):
    def tolist_that_syncs(self: torch.Tensor) -> list[Any]:
        warnings.warn("called a synchronizing CUDA operation", UserWarning, stacklevel=1)
        return []

    monkeypatch.setattr(torch.Tensor, "tolist", tolist_that_syncs)
    with count_host_syncs() as syncs:
        for _ in range(2):  # every occurrence counts, not once per call site
            warnings.warn("called a synchronizing CUDA operation", UserWarning, stacklevel=1)
        torch.ones(2).tolist()  # already counted as Tensor.tolist: its CUDA warning is not counted again
        with pytest.warns(UserWarning, match="unrelated"):
            warnings.warn("unrelated", UserWarning, stacklevel=1)
    assert syncs.by_op == {"cuda (sync debug mode)": 2, "Tensor.tolist": 1}
    assert all(e.filename == __file__ for e in syncs.events)


@torch.library.custom_op("tma_testing::pretend_cuda_sync", mutates_args=())
def _pretend_cuda_sync(x: torch.Tensor) -> torch.Tensor:
    raise RuntimeError("CUDA error: called a synchronizing CUDA operation")


def test_cuda_sync_error_becomes_host_sync_error():
    with pytest.raises(HostSyncError, match=re.escape("tma_testing.pretend_cuda_sync")) as info, no_host_sync():
        _pretend_cuda_sync(torch.ones(1))
    assert isinstance(info.value.__cause__, RuntimeError)
    assert info.value.event.filename == __file__
    with count_host_syncs() as syncs, pytest.raises(RuntimeError, match="synchronizing"):
        _pretend_cuda_sync(torch.ones(1))
    assert syncs.by_op == {"tma_testing.pretend_cuda_sync": 1}


# --------------------------------------------------------------------------------------------------------------------
# Misc


def test_host_sync_error_is_runtime_error_and_picklable():
    import pickle

    event = HostSyncEvent("aten.nonzero", SHAPE, "f.py", 3, "g", "x.nonzero()")
    err = HostSyncError("msg", event)
    assert isinstance(err, RuntimeError)
    assert str(pickle.loads(pickle.dumps(err))) == "msg"
    assert str(event) == "aten.nonzero (data-dependent shape) at f.py:3 in g: x.nonzero()"


def test_counter_is_plain_data():
    counter = HostSyncCounter()
    assert counter.total == 0
    assert counter.summary() == "0 host syncs"


@pytest.mark.parametrize("module", [tma_testing, events, host_sync, collectives], ids=lambda module: module.__name__)
def test_doctests(module):
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
    assert result.attempted > 0


def test_a_non_blocking_copy_into_pageable_host_memory_is_a_sync():
    # CUDA returns from it only once the copy is done; "meta" stands for the device on a CPU-only machine.
    with count_host_syncs() as syncs:
        with contextlib.suppress(NotImplementedError):  # meta tensors hold no data to copy
            torch.empty(3).copy_(torch.empty(3, device="meta"), non_blocking=True)
        with contextlib.suppress(NotImplementedError):
            torch.empty(3, device="meta").to("cpu", non_blocking=True)  # aten._to_copy pins its output: no sync
        torch.empty(3, device="meta").copy_(torch.ones(3), non_blocking=True)  # pageable source: staged, no wait
    assert syncs.by_op == {"aten.copy_": 1}
    assert "pageable" in syncs.events[0].reason


def test_reading_pinned_host_memory_is_not_a_sync(monkeypatch):
    # Where asynchronous device-to-host copies land; the wait for them (an event's synchronize) is what counts.
    host = torch.arange(3)
    with count_host_syncs() as syncs:
        host.tolist()
    assert syncs.total == 1
    monkeypatch.setattr(torch.Tensor, "is_pinned", lambda self, *args: True)  # no pinned memory without CUDA
    with no_host_sync():
        assert host.tolist() == [0, 1, 2]
        assert host.numpy().tolist() == [0, 1, 2]
