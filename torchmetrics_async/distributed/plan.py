"""The plan check: every rank must have planned the same collectives, or every rank raises.

A fingerprint of each member's plan (class, states, reductions, dtypes, shapes) travels with the first collective:
exact, in the shape exchange of list states, or as :data:`CHECK_BITS` 0/1 pairs at the end of the first all_reduce
bucket. :class:`PlanMismatchError` names the members that differ.

Example:
    >>> bits = _check_bits(_fingerprint(("SumMetric", "sum_value")))
    >>> len(bits) == 2 * CHECK_BITS
    True
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from torch import Tensor

from torchmetrics_async._torchmetrics import Metric, dim_zero_cat
from torchmetrics_async.distributed.states import _STATE_OPS, _Entry

__all__ = ["CHECK_BITS", "PlanMismatchError"]

#: bits of the plan fingerprint that ride in an all_reduce bucket (each as a 0/1 pair, exact in every dtype and op)
CHECK_BITS = 32
_HASH_MASK = (1 << 62) - 1


def _fn_name(fn: Any) -> str:
    op = _STATE_OPS.get(fn)
    if op is not None:
        return op
    if fn is dim_zero_cat:
        return "cat"
    return "none" if fn is None else str(getattr(fn, "__qualname__", type(fn).__qualname__))


def _fingerprint(layout: Any) -> int:
    """A 62-bit hash of a plan layout (``repr`` of ints, strings and tuples: the same on every rank and process)."""
    digest = hashlib.blake2b(repr(layout).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & _HASH_MASK


def _check_bits(fingerprint: int) -> list[int]:
    """The low :data:`CHECK_BITS` bits of ``fingerprint``, then their complements."""
    bits = [(fingerprint >> bit) & 1 for bit in range(CHECK_BITS)]
    return bits + [1 - bit for bit in bits]


def _check_agrees(reduced: Tensor, op: str, world_size: int) -> Tensor:
    """Whether every rank sent the same bits (a 0-dim bool on the device; no host read).

    Summed, a bit agrees if 0 or all ranks set it; under max (min), a bit and its complement sum to 1 only if every
    rank sent the same bit.
    """
    bits, complements = reduced[:CHECK_BITS], reduced[CHECK_BITS:]
    if op == "sum":
        return ((bits == 0) | (bits == world_size)).all()
    return (bits + complements == 1).all()


class PlanMismatchError(RuntimeError):
    """The ranks planned different fused syncs: they do not sync the same metrics, in the same order, alike.

    Raised on every rank of the process group, before any state is changed.

    Example:
        >>> isinstance(PlanMismatchError("rank 0 and rank 1 differ"), RuntimeError)
        True
    """


def _mismatch(labels: list[str], differing: list[int] | None, per_rank: list[int] | None = None) -> PlanMismatchError:
    if differing:
        named = ", ".join(labels[i] if i < len(labels) else f"member {i}" for i in differing)
        where = f"member(s) at the same position differ: {named}"
    else:
        where = f"this rank syncs {', '.join(labels) or 'no metric'}"
    ranks = "" if per_rank is None else f" (plan fingerprints per rank: {', '.join(f'{v:#x}' for v in per_rank)})"
    return PlanMismatchError(
        f"torchmetrics-async fused sync: the ranks planned different syncs{ranks}; {where}. Every rank must sync the"
        " same metrics (same classes, options and state shapes), in the same order; torchmetrics would hang or fail"
        " here too."
    )


def _plan_entry(entry: _Entry, kind: str) -> tuple:
    value = entry.value
    if kind == "reduce" or (kind == "stack" and entry.fn is not dim_zero_cat):  # a concatenation may be ragged
        return entry.attr, kind, _fn_name(entry.fn), str(value.dtype), tuple(value.shape)
    return entry.attr, kind, _fn_name(entry.fn)


def _label(metric: Metric, labels: Mapping[int, str]) -> str:
    name = labels.get(id(metric))
    kind = type(metric).__name__
    return f"{name!r} ({kind})" if name is not None else kind


def _verify_gathered(per_rank: list[list[int]], labels: list[str]) -> None:
    """Raise :class:`PlanMismatchError` (on every rank: they all read the same values) unless all plans are equal."""
    if all(checks == per_rank[0] for checks in per_rank):
        return
    members = [row[1:] for row in per_rank]
    differing = [i for i in range(len(members[0])) if any(row[i] != members[0][i] for row in members)]
    raise _mismatch(labels, differing, [row[0] for row in per_rank])
