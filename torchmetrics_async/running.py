"""The running window under ``RunningMean``, ``RunningSum`` and :class:`~torchmetrics_async.wrappers.Running`.

torchmetrics' ``Running`` stores a reference to its base metric's states in window slots and resets the base after
every ``update``/``forward``. Here the slots receive copies, and the wrapper keeps the base's deferred checks as its
own over the whole window since its last reset, so ``update``/``forward`` make no host read and no error is lost.
"""

from collections.abc import Callable
from typing import Any, ClassVar

import torch
from torch import Tensor

from torchmetrics_async.deferred import DEFERRED_RAISE_OWNED, UNREPORTED
from torchmetrics_async.metric import OWNED_STATES, SyncFreeMixin, clear_compiled_count

__all__ = ["SyncFreeRunning"]


class SyncFreeRunning(SyncFreeMixin):
    """Torchmetrics' ``Running`` over a sync-free base: owned slot copies; the wrapper reports the base's checks."""

    # torchmetrics' Running leaves ``_update_count`` alone (its wrapper does not count); the window is its own count.
    _window_counter = "_num_vals_seen"
    __jit_unused_properties__: ClassVar[list[str]] = [*SyncFreeMixin.__jit_unused_properties__, "_num_vals_seen"]

    def _wrap_update(self, update: Callable) -> Callable:
        """As torchmetrics' wrappers: ``update`` unwrapped (the slots are the wrapper's own from every door on)."""
        return update

    def _add_extra_states(self) -> None:
        """Window slots for the base's extra states (an adopted ``Running`` lacks them); we report the base's checks."""
        base = self.base_metric
        for key in base._defaults:
            for slot in range(self.window):
                if f"{key}_{slot}" not in self._defaults:
                    self.add_state(f"{key}_{slot}", default=base._defaults[key], dist_reduce_fx=base._reductions[key])
        for name, (message, action) in base._deferred_checks_registered().items():
            self._add_deferred_check(name, message, action)
        base.__dict__[DEFERRED_RAISE_OWNED] = True
        super()._add_extra_states()

    @property
    def _num_vals_seen(self) -> int:
        """The count of updates since the last reset (torchmetrics' window position), as a Python int."""
        # After compiled updates the count is on the device (an int would recompile every step): one host read.
        return self._read_window_count()

    @_num_vals_seen.setter
    def _num_vals_seen(self, value: int) -> None:
        self.__dict__["_num_vals_seen"] = value
        clear_compiled_count(self)

    @property
    def _update_count(self) -> int:
        """The int as torchmetrics left it: its ``Running`` does not count its own updates (its base does)."""
        return self.__dict__["_update_count"]

    @_update_count.setter
    def _update_count(self, value: int) -> None:
        self.__dict__["_update_count"] = value
        if OWNED_STATES in self.__dict__:  # a compute-group link (see SyncFreeMixin._update_count)
            self._own_states(in_place=True)

    def _store_window_slot(self) -> None:
        state = self.__dict__
        base = self.base_metric
        # Once compiled code has counted in this window, the slot is picked on the device until the next reset.
        position = self._unread_window_count()  # before this update is counted: its 0-based position in the window
        if isinstance(position, Tensor):
            position = torch.remainder(position, self.window)
            self._count_compiled_update()
        else:
            slot, position = position % self.window, None
            state["_num_vals_seen"] += 1
            state[UNREPORTED] = True
        for name in self._deferred_checks_registered():
            self._record_violation(name, getattr(base, name))
        if position is None:
            for key in base._defaults:
                self._write_slot(f"{key}_{slot}", getattr(base, key))
        else:
            hits = [position == slot for slot in range(self.window)]
            for key in base._defaults:
                current = getattr(base, key)
                for slot, hit in enumerate(hits):
                    # Every slot is written (itself where it is not the one): the same graph whatever the position.
                    name = f"{key}_{slot}"
                    self._write_slot(name, torch.where(hit, current, getattr(self, name).to(current)))
        base._reset_states(in_place=True)  # the slot holds a copy; the base's states are its own

    def _write_slot(self, name: str, value: Tensor | list) -> None:
        """Copy ``value`` into window slot ``name`` (in place where the layouts agree, else a new owned state)."""
        target = getattr(self, name)
        if (
            isinstance(value, Tensor)
            and isinstance(target, Tensor)
            and (target.shape, target.dtype, target.device) == (value.shape, value.dtype, value.device)
        ):
            target.copy_(value)
        else:
            mine = value.clone() if isinstance(value, Tensor) else list(value)
            setattr(self, name, mine)
            self.__dict__[OWNED_STATES][name] = mine

    def update(self, *args: Any, **kwargs: Any) -> None:
        """Update the base metric and store its state in the current window slot."""
        self.base_metric.update(*args, **kwargs)
        self._store_window_slot()

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Forward to the base metric (one pass) and store its state in the current window slot."""
        result = self.base_metric.forward(*args, **kwargs)
        self._store_window_slot()
        self.__dict__["_computed"] = None
        return result

    def compute(self) -> Any:
        """Raise what the window since the last reset recorded, then compute over the running window."""
        self._raise_deferred_checks()
        return super().compute()

    def reset(self) -> None:
        """Reset the window (raising what it recorded and nobody reported, as every sync-free metric does)."""
        try:
            super().reset()
        finally:
            self._num_vals_seen = 0
