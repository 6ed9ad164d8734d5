"""The decorators leave what a plain ``update`` needs alone (issue 29, item 3).

A decorated class never fails where the plain class works, never adds a host sync, and gives the same bits: each
representative user metric below is fed the same calls decorated and undecorated, compared bit for bit (errors by type
and message), and the host syncs of every call are counted.
"""

import math
from typing import Any

import pytest
import torch
import torchmetrics
from torch import Tensor
from torchmetrics import Metric

from tests.parity import assert_same
from tests.test_decorators import WeightedSum
from torchmetrics_async import scalar_to_tensor_updates, suppress_nan_check, sync_free
from torchmetrics_async.testing import count_host_syncs


class _Total(Metric):
    full_state_update = False

    def __init__(self, dtype: torch.dtype = torch.float32, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.add_state("total", torch.tensor(0.0, dtype=dtype), dist_reduce_fx="sum")

    def compute(self) -> Tensor:
        return self.total


class TopK(_Total):
    """An ``int`` as a size and a loop count."""

    def update(self, x: Tensor, k: int = 3) -> None:
        for _ in range(k):
            self.total += x.topk(k).values.sum()


class Scaled(_Total):
    """Branches on a float and a bool, and takes ``math.log`` of the float."""

    def update(self, x: Tensor, scale: float = 1.0, normalize: bool = False) -> None:
        if scale > 0.5:
            x = x * scale
        if normalize:
            x = x / 3
        self.total += (x * math.log(scale)).sum()


class Precise(_Total):
    """A float that must keep its 64 bits: ``x * 0.1 * scale`` in float64."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(dtype=torch.float64, **kwargs)

    def update(self, x: Tensor, scale: float = 1.0) -> None:
        self.total += (x.double() * 0.1 * scale).sum()


X = torch.tensor([0.3, 1.7, -2.2, 0.9, 5.1])
# (plain class, calls: (args, kwargs)) with ints, bools, floats, numbers torchmetrics copies, and tensors.
CASES = {
    "TopK": (TopK, [((X,), {}), ((X, 2), {}), ((X,), {"k": 4})]),
    "Scaled": (Scaled, [((X, 0.7), {}), ((X, 0.3, True), {}), ((X,), {"scale": 1.1, "normalize": False})]),
    "Precise": (Precise, [((X, 1 / 3), {}), ((X,), {"scale": 0.1})]),
    "WeightedSum": (WeightedSum, [((X, 0.1), {}), ((2.2, 3), {}), ((1 / 3,), {"weight": 0.7}), ((True, 2.5), {})]),
    "MeanMetric": (torchmetrics.MeanMetric, [((0.1,), {}), ((X, 1 / 3), {}), ((3,), {"weight": 0.7}), ((X,), {})]),
    "SumMetric": (torchmetrics.SumMetric, [((0.1,), {}), ((16777217,), {}), ((X,), {})]),
}
DECORATORS = {"scalar_to_tensor_updates": scalar_to_tensor_updates, "sync_free": sync_free}


def _params() -> list:
    out = []
    for name, (cls, calls) in CASES.items():
        decorators = dict(DECORATORS)
        if issubclass(cls, torchmetrics.aggregation.BaseAggregator):
            decorators["suppress_nan_check"] = suppress_nan_check
        out += [pytest.param(cls, decorate, calls, id=f"{how}({name})") for how, decorate in decorators.items()]
    return out


def _call(metric: Any, how: str, args: tuple, kwargs: dict) -> tuple[Any, int]:
    """(the outcome, host syncs counted): the value forward() returns, or the error's type and message."""
    with count_host_syncs() as syncs:
        try:
            out = getattr(metric, how)(*args, **kwargs)
        except Exception as err:
            out = (type(err), str(err))
    return out, syncs.total


@pytest.mark.parametrize(("cls", "decorate", "calls"), _params())
def test_decorated_user_metric_is_the_plain_one_bit_for_bit_without_more_host_syncs(
    cls: type, decorate: Any, calls: list
) -> None:
    decorated, plain = decorate(cls)(), cls()
    for how in ("update", "forward"):
        for args, kwargs in calls:
            ours, our_syncs = _call(decorated, how, args, kwargs)
            theirs, their_syncs = _call(plain, how, args, kwargs)
            assert our_syncs <= their_syncs, (how, args, kwargs)
            if isinstance(theirs, tuple):
                assert ours == theirs
            else:
                assert_same(ours, theirs, exact=True)
        assert_same(decorated.compute(), plain.compute(), exact=True)


def test_a_float_is_a_kernel_argument_and_as_tensor_is_the_copy_decorators_remove() -> None:
    """The measurement behind the rule (``meta`` stands in for an accelerator)."""
    x = torch.ones(3, device="meta")
    with count_host_syncs() as operand:
        _ = x * 0.5
    with count_host_syncs() as filled:
        _ = torch.full((), 0.5, device="meta")  # what the decorators make of an aggregator's number
    with count_host_syncs() as copied:
        _ = torch.as_tensor(0.5, device="meta")  # what torchmetrics' aggregators do with it
    assert (operand.total, filled.total, copied.total) == (0, 0, 1)


@pytest.mark.parametrize("nan_strategy", ["error", "warn", "ignore", 0.5])
@pytest.mark.parametrize("positional", [False, True])
def test_suppress_nan_check_refuses_a_nan_strategy_it_cannot_honour(nan_strategy: Any, positional: bool) -> None:
    cls = suppress_nan_check(torchmetrics.MeanMetric)
    with pytest.raises(ValueError, match=f"cannot honour nan_strategy={nan_strategy!r}"):
        cls(nan_strategy) if positional else cls(nan_strategy=nan_strategy)
    with pytest.raises(ValueError, match="cannot honour"):
        suppress_nan_check(WeightedSum)(nan_strategy=nan_strategy)
    metric = cls(nan_strategy="disable")
    metric.update(torch.tensor([1.0, float("nan")]))
    assert torch.isnan(metric.compute())
