"""Per-rank checkpoints of metric states: each rank keeps its own window, under ``torch.save`` and DCP alike.

DCP takes a tensor saved under one key on every rank as replicated and flattens a list into one key per element, so each
rank's values sit under ``"rank{r}"`` beside ``"world_size"``, and list states are tuples.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from torchmetrics_async._torchmetrics import Metric, MetricCollection
from torchmetrics_async.deferred import mark_unreported
from torchmetrics_async.metric import OWNED_STATES, set_update_count

__all__ = ["PerRankState", "rank_key"]

# Window counters besides ``_update_count`` that compute() or the next update reads (torchmetrics' ``Running``).
_COUNTERS = ("_num_vals_seen",)
WORLD_SIZE = "world_size"


def _rank_and_world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def rank_key(rank: int | None = None) -> str:
    """The key a rank's values sit under (``rank=None``: this process's global rank, 0 without a group).

    Example:
        >>> rank_key(), rank_key(3)
        ('rank0', 'rank3')
    """
    return f"rank{_rank_and_world()[0] if rank is None else rank}"


def per_rank(values: Any) -> dict[str, Any]:
    """``{"world_size": w, "rank{r}": values}``: this rank's values under its own key."""
    rank, world_size = _rank_and_world()
    return {WORLD_SIZE: world_size, rank_key(rank): values}


def this_rank(state_dict: Mapping[str, Any], what: str) -> Any:
    """This rank's values from a :func:`per_rank` layout; without ``world_size``, one rank's entry passed on purpose."""
    if WORLD_SIZE not in state_dict:
        return state_dict
    rank, world_size = _rank_and_world()
    saved = state_dict[WORLD_SIZE]
    if saved is not None and int(saved) != world_size:
        raise ValueError(
            f"{what}: the checkpoint was saved by {int(saved)} processes and is loaded by {world_size}: each rank's"
            " window belongs to its rank. Load it into as many processes, or pass one rank's entry"
            f" (state_dict[{rank_key(0)!r}], ...) to load_state_dict."
        )
    key = rank_key(rank)
    if key not in state_dict:
        ranks = sorted(k for k in state_dict if k.startswith("rank"))
        raise KeyError(f"{what}: the checkpoint holds no entry {key!r} for this rank; it has {ranks}.")
    return state_dict[key]


def named_metrics(tree: Any) -> list[tuple[str, Metric]]:
    """Every ``Metric`` module of the structure (wrappers' inner metrics too), named, each once."""
    roots = {"metric": tree} if isinstance(tree, torch.nn.Module) else tree
    found: dict[int, tuple[str, Metric]] = {}
    for key, root in roots.items():
        for name, module in root.named_modules(prefix=str(key)):
            if isinstance(module, Metric):
                found.setdefault(id(module), (name, module))
    return list(found.values())


def counters(metric: Metric) -> dict[str, int]:
    """The window counters ``metric`` has, as Python ints."""
    return {name: int(getattr(metric, name)) for name in _COUNTERS if name in metric.__dict__}


def clone_state(value: Any) -> Tensor | tuple[Tensor, ...]:
    """A detached copy of a state; a list state becomes a tuple."""
    if isinstance(value, Tensor):
        return value.detach().clone()
    return tuple(piece.detach().clone() for piece in value)


def make_entry(states: Mapping[str, Any], update_count: Any, saved_counters: Mapping[str, int]) -> dict[str, Any]:
    """``{"states", "update_count", "counters"}``: a checkpoint entry of copies of ``states``."""
    return {
        "states": {attr: clone_state(value) for attr, value in states.items()},
        "update_count": int(update_count),
        "counters": dict(saved_counters),
    }


def metric_entry(metric: Metric) -> dict[str, Any]:
    """The entry of a live metric (every state, whatever its ``persistent``)."""
    states = {attr: getattr(metric, attr) for attr in metric._defaults}
    return make_entry(states, metric._update_count, counters(metric))


def entry(section: Mapping[str, Any], name: str, what: str) -> tuple[Mapping[str, Any], int, Mapping[str, int]]:
    """``(states, update_count, counters)`` of metric ``name`` in a section of entries."""
    if name not in section:
        raise KeyError(f"{what} state_dict has no entry for metric {name!r}; it has {sorted(section)}.")
    found = section[name]
    return found["states"], found["update_count"], found.get("counters", {})


def state(states: Mapping[str, Any], attr: str, name: str, what: str) -> Any:
    """State ``attr`` of metric ``name`` in an entry's ``states``."""
    if attr not in states:
        raise KeyError(f"{what} state_dict has no state {attr!r} for metric {name!r}.")
    return states[attr]


def load_metric_entry(metric: Metric, name: str, section: Mapping[str, Any], what: str) -> None:
    """Restore a live metric's states (copies it owns), update count and counters from its entry in ``section``."""
    states, count, saved_counters = entry(section, name, what)
    for attr in metric._defaults:
        value = state(states, attr, name, what)
        current = getattr(metric, attr)
        device = current.device if isinstance(current, Tensor) else metric.device
        copied = clone_state(value)
        loaded = copied.to(device) if isinstance(copied, Tensor) else [piece.to(device) for piece in copied]
        setattr(metric, attr, loaded)
        owned = metric.__dict__.get(OWNED_STATES)
        if owned is not None:
            owned[attr] = loaded
    set_update_count(metric, int(count))
    metric.__dict__.update({counter: int(value) for counter, value in saved_counters.items()})
    mark_unreported(metric)  # loaded states count as an update: recomputed, and their flags raised


# Not a subclass of DCP's (runtime-checkable) ``Stateful``: importing it after ``init_process_group()`` keeps the
# default group alive past ``destroy_process_group()`` (docs/exit-crash.md).
class PerRankState:
    """Metrics as a ``Stateful`` whose ``state_dict()`` keeps each rank's states under its own key.

    Example:
        >>> import torch
        >>> from torchmetrics_async import CatMetric, SumMetric
        >>> metrics = {"sum": SumMetric(), "cat": CatMetric()}
        >>> for metric in metrics.values():
        ...     metric.update(torch.tensor([1.0, 2.0]))
        >>> saved = PerRankState(metrics).state_dict()  # or: dcp.save({"metrics": PerRankState(metrics)}, ...)
        >>> fresh = {"sum": SumMetric(), "cat": CatMetric()}
        >>> PerRankState(fresh).load_state_dict(saved)
        >>> fresh["sum"].compute(), fresh["cat"].compute()
        (tensor(3.), tensor([1., 2.]))
    """

    def __init__(self, metrics: Any) -> None:
        check_structure(metrics, "PerRankState")
        self.metrics = metrics

    def state_dict(self) -> dict[str, Any]:
        """``{"world_size": w, "rank{r}": {name: entry}}``; tensors are copies."""
        return per_rank({name: metric_entry(metric) for name, metric in named_metrics(self.metrics)})

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore this rank's states, update counts and counters (or one rank's entry, passed on purpose)."""
        section = this_rank(state_dict, "PerRankState")
        for name, metric in named_metrics(self.metrics):
            load_metric_entry(metric, name, section, "PerRankState")


def check_structure(obj: Any, owner: str) -> None:
    """Accept a ``Metric``, a ``MetricCollection`` or a non-empty dict of them; raise ``TypeError`` otherwise."""
    if isinstance(obj, (Metric, MetricCollection)):
        return
    if isinstance(obj, Mapping) and obj:
        for key, value in obj.items():
            if not isinstance(value, (Metric, MetricCollection)):
                raise TypeError(
                    f"metric[{key!r}] is a {type(value).__name__}; expected a torchmetrics Metric or MetricCollection."
                )
        return
    raise TypeError(
        f"{owner} expects a torchmetrics Metric, a MetricCollection or a non-empty dict of them; got"
        f" {type(obj).__name__}."
    )
