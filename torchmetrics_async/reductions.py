"""The reduction vocabulary (a leaf): how a state's ``dist_reduce_fx`` is named and reduced across ranks.

torchmetrics' ``add_state(dist_reduce_fx="sum")`` stores the function ``dim_zero_sum``; the sync engine and the metric
base name it ``"sum"`` and reduce it with an ``all_reduce``.
"""

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torchmetrics.utilities import dim_zero_cat, dim_zero_max, dim_zero_mean, dim_zero_min, dim_zero_sum

__all__ = ["BUCKET_OP", "OPS", "REDUCE_OPS", "STATE_OPS", "fusable", "neutral_element", "reduction_name"]

#: The reductions an all_reduce runs elementwise: the functional API's, and those of fusable metric states.
OPS = ("mean", "sum", "max", "min")
#: torchmetrics' reduction function of a state -> its name in :data:`OPS`.
STATE_OPS: dict[Callable, str] = {dim_zero_sum: "sum", dim_zero_mean: "mean", dim_zero_max: "max", dim_zero_min: "min"}
#: The op a reduction travels as: "mean" is reduced as a sum (then divided by the world size), sharing sum buffers.
BUCKET_OP = {"mean": "sum", "sum": "sum", "max": "max", "min": "min"}
#: The ``all_reduce`` op of each bucket op.
REDUCE_OPS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}


def fusable(op: str, dtype: torch.dtype) -> bool:
    """Whether a reduction of ``dtype`` can run as an all_reduce with torch's result (else it errors in torch too).

    Example:
        >>> fusable("sum", torch.int32), fusable("max", torch.complex64)
        (True, False)
    """
    if op == "mean":
        return dtype.is_floating_point or dtype.is_complex
    if op in ("max", "min"):
        return not dtype.is_complex
    return True


def reduction_name(fn: Any) -> str:
    """A state's reduction named the same on every rank: in :data:`OPS`, ``"cat"``, ``"none"`` or a qualified name.

    Example:
        >>> reduction_name(dim_zero_sum), reduction_name(None), reduction_name(math.fsum)
        ('sum', 'none', 'fsum')
    """
    op = STATE_OPS.get(fn)
    if op is not None:
        return op
    if fn is dim_zero_cat:
        return "cat"
    return "none" if fn is None else str(getattr(fn, "__qualname__", type(fn).__qualname__))


def neutral_element(fn: Any) -> float | None:
    """What a dropped value becomes for a state reduced with ``fn``; ``None`` when dropping needs a shape change.

    Example:
        >>> neutral_element(dim_zero_max), neutral_element(dim_zero_sum), neutral_element(dim_zero_cat)
        (-inf, 0.0, None)
    """
    if fn is dim_zero_cat:
        return None
    if fn is dim_zero_max:
        return -math.inf
    if fn is dim_zero_min:
        return math.inf
    return 0.0
