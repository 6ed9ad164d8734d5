"""Retrieval metrics with a sync-free ``update()``: every entry stored, with a keep-mask under ``ignore_index``.

Non-binary targets and a batch left empty are deferred checks; ``compute()`` and ``forward()`` drop the ignored
entries and group per query on the host, as torchmetrics' ``compute`` does.
"""

from typing import Any

import torch
import torchmetrics.retrieval as tm
from torch import Tensor

from torchmetrics_async._torchmetrics import dim_zero_cat
from torchmetrics_async.batch_stats import BatchStats, SyncFreeBatchStats, all_kept
from torchmetrics_async.deferred import DEFERRED_RAISE_OWNED
from torchmetrics_async.registry import torchmetrics_base

__all__ = [
    "RetrievalAUROC",
    "RetrievalFallOut",
    "RetrievalHitRate",
    "RetrievalMAP",
    "RetrievalMRR",
    "RetrievalNormalizedDCG",
    "RetrievalPrecision",
    "RetrievalPrecisionRecallCurve",
    "RetrievalRPrecision",
    "RetrievalRecall",
    "RetrievalRecallAtFixedPrecision",
]

#: List state (under ``ignore_index``): per update, which entries count (their target is not ``ignore_index``).
KEPT_STATE = "retrieval_kept"

# Deferred-check state names, and torchmetrics' messages (torchmetrics.utilities.checks._check_retrieval_inputs).
INVALID_TARGET = "invalid_target"
BINARY_TARGET_MESSAGE = "`target` must contain `binary` values"
ALL_IGNORED = "invalid_all_ignored"
EMPTY_MESSAGE = "`indexes`, `preds` and `target` must be non-empty and non-scalar tensors"


def retrieval_inputs(
    preds: Tensor, target: Tensor, indexes: Tensor | None, ignore_index: int | None
) -> tuple[tuple[Tensor, ...], Tensor | None]:
    """Torchmetrics' ``_check_retrieval_inputs`` without host reads: entries as it stores them, and a keep-mask."""
    if indexes is None:
        raise ValueError("Argument `indexes` cannot be None")
    if indexes.shape != preds.shape or preds.shape != target.shape:
        raise ValueError("`indexes`, `preds` and `target` must be of the same shape")
    if indexes.dtype is not torch.long:
        raise ValueError("`indexes` must be a tensor of long integers")
    keep = None if ignore_index is None else (target != ignore_index).flatten()
    # torchmetrics filters first: a 0-dim input becomes 1-dim, and only an empty result is rejected.
    if not indexes.numel() or (keep is None and not indexes.size()):
        raise ValueError(EMPTY_MESSAGE)
    if target.dtype not in (torch.bool, torch.long, torch.int) and not torch.is_floating_point(target):
        raise ValueError("`target` must be a tensor of booleans, integers or floats")
    if not preds.is_floating_point():
        raise ValueError("`preds` must be a tensor of floats")
    target = target.float() if target.is_floating_point() else target.long()
    return (indexes.long().flatten(), preds.float().flatten(), target.flatten()), keep


class _SyncFreeRetrieval(SyncFreeBatchStats):
    """What the retrieval metrics share: the sync-free update, the keep-mask, and compute on the kept entries."""

    _stat_states = ("indexes", "preds", "target")

    def _add_extra_states(self) -> None:
        if self.ignore_index is not None and KEPT_STATE not in self._defaults:
            self.add_state(KEPT_STATE, default=[], dist_reduce_fx="cat")
            # An adopted torchmetrics instance filtered the entries it already holds: all of them count.
            setattr(self, KEPT_STATE, all_kept(self.target))
        super()._add_extra_states()

    def _load_from_state_dict(self, state_dict: dict, prefix: str, *args: Any, **kwargs: Any) -> None:
        # torchmetrics' loading takes the keys out of state_dict: what arrived is read first.
        torchmetrics_shaped = prefix + "target" in state_dict and prefix + KEPT_STATE not in state_dict
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        if KEPT_STATE in self._defaults and torchmetrics_shaped:
            setattr(self, KEPT_STATE, all_kept(self.target))  # a torchmetrics checkpoint: filtered already

    def _extra_states(self) -> tuple[str, ...]:
        extra = super()._extra_states()
        return (*extra, KEPT_STATE) if KEPT_STATE in self._defaults else extra

    def _missing_extra_state(self, attr: str, incoming_state: dict[str, Any]) -> Any:
        if attr == KEPT_STATE:  # a torchmetrics state: its entries were filtered in its update
            return all_kept(incoming_state["target"])
        return super()._missing_extra_state(attr, incoming_state)

    def _deferred_checks(self) -> dict[str, str]:
        checks = {}
        if self.ignore_index is not None:
            checks[ALL_IGNORED] = EMPTY_MESSAGE
        if not self.allow_non_binary_target:
            checks[INVALID_TARGET] = BINARY_TARGET_MESSAGE
        return checks

    def update(self, preds: Tensor, target: Tensor, indexes: Tensor) -> None:
        """Store the batch without a host sync (value checks deferred to ``compute()``)."""
        self._update_from_stats(preds, target, indexes)

    def _batch_stats(self, preds: Tensor, target: Tensor, indexes: Tensor) -> BatchStats:
        (indexes, preds, target), keep = retrieval_inputs(preds, target, indexes, self.ignore_index)
        violations = {}
        if self.ignore_index is not None:
            violations[ALL_IGNORED] = torch.logical_not(keep.any())
        if not self.allow_non_binary_target:
            outside = (target > 1) | (target < 0)
            violations[INVALID_TARGET] = outside if keep is None else outside & keep
        values = (indexes, preds, target) if keep is None else (indexes, preds, target, keep)
        return BatchStats(values, violations)

    def _merge_stats(self, stats: BatchStats) -> None:
        # The keep-mask travels after the three stored states (an instance-level _stat_states would defeat jit.script).
        values, violations = stats
        super()._merge_stats(BatchStats(values[:3], violations))
        if len(values) > 3:
            getattr(self, KEPT_STATE).append(values[3])

    def _batch_value(self, stats: BatchStats) -> Any:
        """Torchmetrics' ``compute`` on the batch alone (host reads, as there); NaN for a batch violating a check."""
        if _read(self._batch_violation(stats)):
            return self._nan_value()
        return self._compute_on(*(piece.unsqueeze(0) if piece.dim() == 0 else piece for piece in stats.values))

    def _nan_value(self) -> Any:
        """The value of a batch that violated a check (torchmetrics raises in its ``update()`` instead)."""
        return torch.full((), torch.nan, device=self.device)

    def compute(self) -> Any:
        """Raise deferred value errors, drop the ignored entries, then compute as torchmetrics does."""
        self._raise_deferred_checks()
        if self.__dict__.get(DEFERRED_RAISE_OWNED, False) and _read(self._deferred_violated()):
            return self._nan_value()  # a batch value computed the torchmetrics way, or the caller reports the flags
        if isinstance(self.preds, list) and not self.preds:  # nothing held: torchmetrics' own error
            return torchmetrics_base(type(self)).compute(self)
        names = (*self._stat_states, KEPT_STATE) if KEPT_STATE in self._defaults else self._stat_states
        return self._compute_on(*(dim_zero_cat(getattr(self, name)) for name in names))

    def _as_torchmetrics_holds(self, states: dict[str, Any], prefix: str = "") -> None:
        """Entries whose target is ``ignore_index`` dropped (a host read), as torchmetrics holds them.

        Example:
            >>> metric = RetrievalMRR(ignore_index=-1)
            >>> metric.update(torch.tensor([0.2, 0.8]), torch.tensor([1, -1]), indexes=torch.tensor([0, 0]))
            >>> metric.metric_state["target"]
            [tensor([1])]
        """
        key = prefix + KEPT_STATE
        if key not in states or any(prefix + name not in states for name in self._stat_states):
            return
        keep = states[key]
        if not keep or any(k.is_meta for k in keep):
            return
        kept = dim_zero_cat(keep).nonzero().squeeze(1)
        for name in self._stat_states:
            states[prefix + name] = [dim_zero_cat(states[prefix + name])[kept]]
        states[key] = [torch.ones_like(kept, dtype=torch.bool)]

    def _compute_on(self, indexes: Tensor, preds: Tensor, target: Tensor, keep: Tensor | None = None) -> Any:
        """Torchmetrics' own ``compute`` with these entries as the states (the ignored ones dropped first)."""
        if keep is not None and not keep.is_meta:
            kept = keep.nonzero().squeeze(1)  # the one data-dependent shape: the entries are then picked by position
            indexes, preds, target = indexes[kept], preds[kept], target[kept]
        state = self.__dict__
        saved = {name: state[name] for name in ("indexes", "preds", "target")}
        state.update(indexes=[indexes], preds=[preds], target=[target])
        try:
            return torchmetrics_base(type(self)).compute(self)
        finally:
            state.update(saved)


def _read(violated: Tensor | None) -> bool:
    """Whether a violation flag is set: a host read (meta tensors hold nothing to read: never set)."""
    return violated is not None and not violated.is_meta and bool(violated)


class RetrievalMRR(_SyncFreeRetrieval, tm.RetrievalMRR):
    """No host sync in ``update()``; ``forward()`` groups the batch per query on the host, as ``compute()`` does."""


class RetrievalMAP(_SyncFreeRetrieval, tm.RetrievalMAP):
    """No host sync in ``update()``; ``forward()`` groups the batch per query on the host, as ``compute()`` does."""


class RetrievalNormalizedDCG(_SyncFreeRetrieval, tm.RetrievalNormalizedDCG):
    """No host sync in ``update()``; ``forward()`` groups the batch per query on the host, as ``compute()`` does."""


class RetrievalPrecision(_SyncFreeRetrieval, tm.RetrievalPrecision):
    """No host sync in ``update()``; ``forward()`` groups the batch per query on the host, as ``compute()`` does."""


class RetrievalRecall(_SyncFreeRetrieval, tm.RetrievalRecall):
    """No host sync in ``update()``; ``forward()`` groups the batch per query on the host, as ``compute()`` does."""


class RetrievalHitRate(_SyncFreeRetrieval, tm.RetrievalHitRate):
    """No host sync in ``update()``; ``forward()`` groups the batch per query on the host, as ``compute()`` does."""


class RetrievalFallOut(_SyncFreeRetrieval, tm.RetrievalFallOut):
    """No host sync in ``update()``; ``forward()`` groups the batch per query on the host, as ``compute()`` does."""


class RetrievalRPrecision(_SyncFreeRetrieval, tm.RetrievalRPrecision):
    """No host sync in ``update()``; ``forward()`` groups the batch per query on the host, as ``compute()`` does."""


class RetrievalAUROC(_SyncFreeRetrieval, tm.RetrievalAUROC):
    """No host sync in ``update()``; ``forward()`` groups the batch per query on the host, as ``compute()`` does."""


class RetrievalPrecisionRecallCurve(_SyncFreeRetrieval, tm.RetrievalPrecisionRecallCurve):
    """No host sync in ``update()``; ``forward()`` groups the batch per query on the host, as ``compute()`` does."""

    def _nan_value(self) -> Any:
        nan = super()._nan_value()
        return nan, nan, torch.zeros((), dtype=torch.long, device=self.device)


class RetrievalRecallAtFixedPrecision(_SyncFreeRetrieval, tm.RetrievalRecallAtFixedPrecision):
    """No host sync in ``update()``; ``forward()`` groups the batch per query on the host, as ``compute()`` does."""

    def _nan_value(self) -> Any:
        return super()._nan_value(), torch.zeros((), dtype=torch.long, device=self.device)
