"""The plan check: every rank must have planned the same collectives, or every rank raises.

A new plan starts with a fixed-size all_gather of every rank's plan fingerprints, read on the host before the first
collective whose size depends on it, so ranks whose plans differ raise :class:`PlanMismatchError` instead of reaching
a collective of another size. A sync that recurs (a collector's windows) keeps the plan every rank agreed on in
:class:`AgreedPlans`: while its plan is that one, it launches at once and its check is read with its results. The
check then rides in a sum bucket the plan has anyway (each rank's row in its own slot, zeros elsewhere: the sum is the
gather), so such a window makes one collective per bucket and nothing more.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from torchmetrics_async._torchmetrics import Metric, dim_zero_cat
from torchmetrics_async.reductions import reduction_name
from torchmetrics_async.sync.collectives import _all_gather_single, _host_to_device
from torchmetrics_async.sync.states import _Entry

__all__ = ["CHECK_WORDS", "AgreedPlans", "PlanMismatchError", "carrier_index", "decode_check", "encode_check"]

#: int64 words every rank sends in the plan check: fingerprint, member count, then one per member (the first ones)
CHECK_WORDS = 16
_NAMED = CHECK_WORDS - 2
_ABSENT = -1  # a member position past the end of a rank's plan (fingerprints are non-negative)
_HASH_MASK = (1 << 62) - 1
# A check word riding in a sum bucket: word + 1 (so non-negative) in 16-bit chunks, exact in each carrier dtype.
_CHUNKS = 4
_CHUNK_BITS = 16
_CARRIER_DTYPES = (torch.int64, torch.int32, torch.float64, torch.float32)


def _fingerprint(layout: Any) -> int:
    """A 62-bit hash of a plan layout (``repr`` of ints, strings and tuples: the same on every rank and process)."""
    digest = hashlib.blake2b(repr(layout).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & _HASH_MASK


class PlanMismatchError(RuntimeError):
    """The ranks planned different fused syncs; raised on every rank, before any state is changed."""


def _check_row(fingerprint: int, member_hashes: list[int]) -> list[int]:
    """The words one rank sends: plan fingerprint, member count, the first members' fingerprints (padded)."""
    named = member_hashes[:_NAMED]
    return [fingerprint, len(member_hashes), *named, *([_ABSENT] * (_NAMED - len(named)))]


def carrier_index(buckets: list[Any]) -> int | None:
    """The bucket the plan check can ride in (the first sum in a dtype that holds 16-bit integers exactly), if any."""
    for index, bucket in enumerate(buckets):
        if bucket.op == "sum" and bucket.dtype in _CARRIER_DTYPES:
            return index
    return None


def encode_check(row: list[int], rank: int, world_size: int, dtype: torch.dtype, device: torch.device) -> Tensor:
    """This rank's check row in its slot of a carrier's tail, zeros in the other ranks' slots (summed: every row).

    Example:
        >>> tail = encode_check([5, -1], rank=1, world_size=2, dtype=torch.float32, device=torch.device("cpu"))
        >>> summed = tail + encode_check([7, 0], rank=0, world_size=2, dtype=torch.float32, device=torch.device("cpu"))
        >>> decode_check(summed.tolist(), world_size=2, words=2)
        [[7, 0], [5, -1]]
    """
    chunks = [((word + 1) >> (_CHUNK_BITS * i)) & 0xFFFF for word in row for i in range(_CHUNKS)]
    slot = len(chunks)
    tail = torch.zeros(world_size * slot, dtype=dtype)
    tail[rank * slot : (rank + 1) * slot] = torch.tensor(chunks, dtype=torch.int64)
    return tail if device.type == "cpu" else tail.pin_memory().to(device, non_blocking=True)


def decode_check(tail: list[float | int], world_size: int, words: int = CHECK_WORDS) -> list[list[int]]:
    """Every rank's check row from a reduced carrier tail, read on the host (the window's one read carries it)."""
    chunks = [int(value) for value in tail]
    slot = words * _CHUNKS
    return [
        [
            sum(chunks[rank * slot + word * _CHUNKS + i] << (_CHUNK_BITS * i) for i in range(_CHUNKS)) - 1
            for word in range(words)
        ]
        for rank in range(world_size)
    ]


_CHECK_STREAMS: dict[torch.device, Any] = {}


class _PlanCheck:
    """The plan check in flight: ``read`` now (on an accelerator on a stream of its own), or later with the results."""

    def __init__(
        self,
        fingerprint: int,
        member_hashes: list[int],
        labels: list[str],
        group: Any,
        device: torch.device | None,
        read: bool = True,
        carried: Callable[[], Tensor] | None = None,
        gather: bool = True,
    ) -> None:
        self.labels = labels
        self.world_size = dist.get_world_size(group)
        self.row = row = _check_row(fingerprint, member_hashes)
        self.event: Any = None
        #: the reduced tail of the bucket the check rides in (no collective of its own), or None
        self.carried = carried
        if carried is not None or not gather:  # it rides in buckets: this sync's own, or the agreed plan's
            self.work = None
            return
        if device.type == "cpu" or not read:  # unread: on the current stream, as the collectives that follow it
            self.local = _host_to_device(row, device)
            self.gathered = torch.empty(self.world_size * CHECK_WORDS, dtype=torch.int64, device=device)
            self.work: Any = _all_gather_single(self.gathered, self.local, group, True)
            return
        module = torch.get_device_module(device.type)
        if device not in _CHECK_STREAMS:
            _CHECK_STREAMS[device] = module.Stream(device=device)
        stream = _CHECK_STREAMS[device]
        with module.stream(stream):
            local = _host_to_device(row, device)
            gathered = torch.empty(self.world_size * CHECK_WORDS, dtype=torch.int64, device=device)
            _all_gather_single(gathered, local, group, True).wait()  # the stream waits for it, not the host
            self.gathered = torch.empty(gathered.shape, dtype=torch.int64, pin_memory=True)
            self.gathered.copy_(gathered, non_blocking=True)
            self.event = module.Event()
            self.event.record(stream)
        self.work = None
        self._in_flight = (local, gathered)  # alive until the event: the stream still uses them

    def wait(self) -> None:
        """Wait for the all_gather (an accelerator's stream waits, not the host)."""
        if self.work is not None:
            self.work.wait()
            self.work = None

    def rows(self) -> Tensor:
        """Every rank's row (``world_size x CHECK_WORDS``): read it with the results, then :meth:`check` it."""
        if self.carried is not None:
            return self.carried()  # the carrier's tail: check() decodes it on the host
        return self.gathered.view(self.world_size, CHECK_WORDS)

    def verify(self) -> None:
        """Wait for every rank's row (one host read); every rank raises :class:`PlanMismatchError`, or none."""
        self.wait()
        if self.event is not None:
            self.event.synchronize()
            self.event = None
            self._in_flight = None
        self.check(self.rows().tolist())

    def check(self, rows: list[list[int]]) -> None:
        """Raise :class:`PlanMismatchError` if the ranks' rows (read on the host) differ."""
        if self.carried is not None:
            rows = decode_check(rows, self.world_size)
        if any(row != rows[0] for row in rows):
            raise _mismatch(self.labels, rows)


class AgreedPlans:
    """The plans every rank agreed on for a sync that recurs with the same metrics (each window of a collector).

    Per process group (by position), the plan last verified on every rank and the sizes of its collectives. A sync
    whose plan is the agreed one launches without reading its check; :attr:`unread` holds those checks, to be read
    with the results and :meth:`_PlanCheck.check`-ed (riding in a sum bucket where there is one: see the module). A
    rank whose plan changed reads its check first, in the agreed plan's collectives (without data) when the check rides
    in them, or else before them: if the plans now differ, it runs the agreed plan's collectives without data, so the
    ranks that launched at once are never left in a collective of another size, and every rank raises.

    Example:
        >>> plans = AgreedPlans()
        >>> plans.unread, plans.agreed, plans.prepared
        ([], {}, {})
    """

    def __init__(self) -> None:
        #: position of the process group in the sync -> (fingerprint, bucket sizes, gather sizes or None, the index of
        #: the bucket the check rides in or None)
        self.agreed: dict[int, tuple[int, list[tuple], tuple | None, int | None]] = {}
        self.unread: list[_PlanCheck] = []
        #: position -> the agreed plan's buckets over the state tensors they were last packed from (a ``_Prepared``)
        self.prepared: dict[int, Any] = {}


def _mismatch(labels: list[str], rows: list[list[int]]) -> PlanMismatchError:
    counts = [row[1] for row in rows]
    differing = [i for i in range(min(max(counts), _NAMED)) if len({row[2 + i] for row in rows}) > 1]
    if differing:
        named = ", ".join(labels[i] if i < len(labels) else f"member {i} (absent on this rank)" for i in differing)
        where = f"member(s) at the same position differ: {named}"
    elif max(counts) > _NAMED:
        where = f"members past the first {_NAMED}, or their collectives, differ"
    else:
        where = "the members agree, but not their collectives (states on another device or backend?)"
    per_rank = ", ".join(f"{count} on rank {rank}" for rank, count in enumerate(counts))
    return PlanMismatchError(
        f"torchmetrics-async fused sync: the ranks planned different syncs (metrics: {per_rank}); {where}. This rank"
        f" syncs {', '.join(labels) or 'no metric'}. Every rank must sync the same metrics (same classes, options and"
        " state shapes), in the same order; torchmetrics would hang or fail here too."
    )


def _plan_entry(entry: _Entry, kind: str) -> tuple:
    value = entry.value
    if kind == "reduce" or (kind == "stack" and entry.fn is not dim_zero_cat):  # a concatenation may be ragged
        return entry.attr, kind, reduction_name(entry.fn), str(value.dtype), tuple(value.shape)
    return entry.attr, kind, reduction_name(entry.fn)


def _label(metric: Metric, labels: Mapping[int, str]) -> str:
    name = labels.get(id(metric))
    kind = type(metric).__name__
    return f"{name!r} ({kind})" if name is not None else kind
