"""``RunningMean``/``RunningSum`` under ``torch.compile``: the window slot is chosen on the device, one graph.

A compiled step counts its updates in a device tensor and writes the slot ``count % window`` with ``torch.where`` over
every slot; eager updates after compiled ones do the same until the window is reset. These tests run sequences
mixing compiled and eager ``update()``/``forward()`` calls, ``compute()``, ``reset()``, ``state_dict()`` and pickling,
across window wrap-around, beside torchmetrics' own ``Running`` metric fed the same values eagerly, and compare batch
values, ``compute()``, ``_num_vals_seen`` and the states.
"""

from __future__ import annotations

import math
import pickle
from typing import Any

import pytest
import torch
import torch._dynamo
import torchmetrics

import torchmetrics_async as ta
from tests._compile import TOLERANCE, CountingBackend, assert_same_deferred_error
from tests.parity import assert_same
from torchmetrics_async.testing import count_host_syncs

WINDOW = 3
PAIRS = {
    "mean": (ta.RunningMean, torchmetrics.aggregation.RunningMean),
    "sum": (ta.RunningSum, torchmetrics.aggregation.RunningSum),
}


class Twins:
    """An accelerated Running metric and torchmetrics' own, fed the same calls; the accelerated one's via a compiled
    step where asked (one compiled step per call kind, recompiles forbidden)."""

    def __init__(self, name: str, **init: Any) -> None:
        accelerated, reference = PAIRS[name]
        self.metric, self.reference = accelerated(window=WINDOW, **init), reference(window=WINDOW, **init)
        self.backend = CountingBackend()
        self.generator = torch.Generator().manual_seed(0)
        torch._dynamo.reset()
        self.steps = {
            "update": torch.compile(self.metric.update, fullgraph=True, backend=self.backend),
            "forward": torch.compile(self.metric, fullgraph=True, backend=self.backend),
        }

    def call(self, kind: str, compiled: bool, times: int = 1) -> None:
        for _ in range(times):
            x = torch.randn(4, generator=self.generator)
            if compiled:
                with torch._dynamo.config.patch(error_on_recompile=True):
                    value = self.steps[kind](x)
            else:
                value = getattr(self.metric, kind)(x)
            expected = getattr(self.reference, kind)(x)
            if kind == "forward":
                assert_same(value, expected, **TOLERANCE)

    def check(self) -> None:
        """Every window slot, ``compute()`` and the count equal torchmetrics' (which reads the device count once)."""
        for key in self.reference.base_metric._defaults:
            for slot in range(WINDOW):
                name = f"{key}_{slot}"
                assert_same(getattr(self.metric, name), getattr(self.reference, name), **TOLERANCE)
        assert_same(self.metric.compute(), self.reference.compute(), **TOLERANCE)
        assert self.metric._num_vals_seen == self.reference._num_vals_seen
        assert self.metric.update_count == self.reference.update_count


@pytest.mark.parametrize("kind", ["update", "forward"])
@pytest.mark.parametrize("name", sorted(PAIRS))
def test_compiled_and_eager_updates_across_wrap_around_compute_and_reset(name: str, kind: str) -> None:
    twins = Twins(name)
    twins.call(kind, compiled=True, times=4)  # past the window: slots are overwritten
    twins.call(kind, compiled=False, times=2)  # eager after compiled, before the count is read: slot on the device
    twins.check()
    twins.call(kind, compiled=False)  # after the read too (until the reset): the host int stays as compiled code saw it
    twins.call(kind, compiled=True, times=5)
    twins.check()
    twins.metric.reset()
    twins.reference.reset()
    twins.call(kind, compiled=True, times=2)  # reset mid-window, then compiled again: no recompile
    twins.check()
    twins.call("forward" if kind == "update" else "update", compiled=False, times=2)
    twins.check()
    assert twins.backend.graphs == 1  # one graph for the compiled call kind; every later call reused it


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_compiled_updates_go_on_from_eager_ones(name: str) -> None:
    """Eager updates first (the Python int picks their slots), then compiled ones, which start from that int.

    Compiled code reads the int once per window (Dynamo guards on its value): windows that start the same way reuse
    the graph.
    """
    twins = Twins(name)
    for _ in range(2):
        twins.call("update", compiled=False, times=2)
        twins.call("update", compiled=True)
        twins.check()
        twins.call("update", compiled=True, times=3)
        twins.check()
        twins.metric.reset()
        twins.reference.reset()
    assert twins.backend.graphs == 1


def test_state_dict_and_pickle_mid_window_after_compiled_updates() -> None:
    twins = Twins("mean")
    twins.metric.persistent(True)
    twins.reference.persistent(True)
    twins.call("update", compiled=True, times=WINDOW + 2)
    ours, theirs = twins.metric.state_dict(), twins.reference.state_dict()
    assert set(theirs) <= set(ours)
    for key, value in theirs.items():
        assert_same(ours[key], value, **TOLERANCE)
    twins.metric = pickle.loads(pickle.dumps(twins.metric))  # the device count travels with it
    twins.call("update", compiled=False, times=2)
    twins.check()


def test_deferred_error_under_compile_names_the_first_offending_update() -> None:
    """A NaN at update 5 of a compiled window (``nan_strategy="error"``): the same message as an eager twin's."""
    metric, eager = (ta.RunningSum(window=WINDOW, nan_strategy="error") for _ in range(2))
    step = torch.compile(metric.update, fullgraph=True, backend=CountingBackend())
    torch._dynamo.reset()
    values = [torch.full((2,), math.nan if i == 4 else float(i)) for i in range(7)]
    with torch._dynamo.config.patch(error_on_recompile=True):
        for value in values:
            step(value)
    for value in values:
        eager.update(value)
    assert_same_deferred_error(metric, eager, update=5)


def test_eager_updates_after_compiled_ones_make_no_host_sync() -> None:
    """Until the count is read, eager updates choose their slot on the device: still no host read."""
    twins = Twins("sum")
    twins.call("update", compiled=True, times=2)
    with count_host_syncs() as syncs:
        twins.metric.update(torch.ones(3))
        twins.metric(torch.ones(3))
    assert syncs.total == 0
    twins.reference.update(torch.ones(3))
    twins.reference(torch.ones(3))
    twins.check()


def test_eager_only_updates_keep_the_host_count() -> None:
    """Without compiled updates the Python int picks the slot (tests/test_op_counts.py pins the op counts)."""
    metric = ta.RunningMean(window=WINDOW)
    for value in range(5):
        metric.update(float(value))
    assert metric.__dict__["_num_vals_seen"] == 5
    assert metric.__dict__["_compiled_seen"] == 0  # compiled code never counted: no device count to read
