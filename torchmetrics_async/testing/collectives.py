"""Counting ``torch.distributed`` collectives: :func:`count_collectives`."""

from __future__ import annotations

import collections
import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["COLLECTIVES", "CollectiveCounter", "count_collectives"]

#: Every collective :func:`count_collectives` watches (deprecated names too: only the outermost call counts).
COLLECTIVES = (
    "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_single", "all_gather_object", "barrier",
    "monitored_barrier", "broadcast", "broadcast_object_list", "reduce", "reduce_scatter", "reduce_scatter_tensor",
    "gather", "scatter", "all_to_all",
)  # fmt: skip


class CollectiveCounter:
    """Outermost collectives called inside :func:`count_collectives`: ``counts`` and ``groups`` (name, group)."""

    def __init__(self) -> None:
        self.counts: collections.Counter[str] = collections.Counter()
        self.groups: list[tuple[str, Any]] = []
        self._depth = threading.local()

    @property
    def total(self) -> int:
        """All calls counted."""
        return sum(self.counts.values())

    def as_dict(self) -> dict[str, int]:
        """The counts as a plain dict."""
        return dict(self.counts)

    def _wrap(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            depth = getattr(self._depth, "value", 0)
            if depth == 0:
                self.counts[name] += 1
                self.groups.append((name, kwargs.get("group")))
            self._depth.value = depth + 1
            try:
                return original(*args, **kwargs)
            finally:
                self._depth.value = depth

        return counted


@contextlib.contextmanager
def count_collectives() -> Iterator[CollectiveCounter]:
    """Count the ``torch.distributed`` collectives of :data:`COLLECTIVES` called inside the block.

    DDP's gradient reductions go to the process group directly and are not seen.

    Example:
        >>> with count_collectives() as counter:
        ...     pass  # no process group needed to count nothing
        >>> counter.as_dict()
        {}
    """
    import torch.distributed as dist

    counter = CollectiveCounter()
    originals = {name: getattr(dist, name) for name in COLLECTIVES if hasattr(dist, name)}
    for name, original in originals.items():
        setattr(dist, name, counter._wrap(name, original))
    try:
        yield counter
    finally:
        for name, original in originals.items():
            setattr(dist, name, original)
