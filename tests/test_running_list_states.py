"""``Running`` over a base whose states are lists: the window torchmetrics' own ``Running`` loses (issue 31)."""

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torchmetrics
from torchmetrics import wrappers

import torchmetrics_async as ta

LIST_STATE_BASES: dict[str, tuple[Callable[[], Any], Callable[[torch.Generator], tuple]]] = {
    "CatMetric": (lambda: torchmetrics.CatMetric(), lambda g: (torch.randn(3, generator=g),)),  # noqa: PLW0108
    "samplewise MulticlassAccuracy": (
        lambda: torchmetrics.classification.MulticlassAccuracy(num_classes=3, multidim_average="samplewise"),
        lambda g: (torch.randint(0, 3, (2, 4), generator=g), torch.randint(0, 3, (2, 4), generator=g)),
    ),
}


@pytest.mark.parametrize("name", list(LIST_STATE_BASES))
def test_running_over_list_states_keeps_the_window_where_torchmetrics_loses_it(name: str) -> None:
    """Issue 31, a listed deviation: torchmetrics' Running stores its base's list states by reference, and the base's
    reset() then empties them (a CatMetric window computes [], a samplewise base raises "No samples to concatenate").
    Ours computes the window as torchmetrics' Running.compute() means to: each slot's state (the last batch that went
    to it) merged by torchmetrics' own ``_reduce_states`` in slot order (incoming first: a CatMetric's newest slot
    leads)."""
    build, make = LIST_STATE_BASES[name]
    generator = torch.Generator().manual_seed(31)
    batches = [make(generator) for _ in range(5)]
    last_in_slot = {j % 2: batch for j, batch in enumerate(batches)}  # batch j goes to slot j % 2
    window = build()
    for slot in range(2):
        one = build()
        one.update(*last_in_slot[slot])
        window._reduce_states({key: getattr(one, key) for key in window._defaults})
    window._update_count = len(batches)
    ours, theirs = ta.wrappers.Running(build(), window=2), wrappers.Running(build(), window=2)
    for batch in batches:
        ours.update(*batch)
        theirs.update(*batch)
    torch.testing.assert_close(ours.compute(), window.compute())
    # The installed torchmetrics still loses the window (else the README's deviation row is out of date).
    if name == "CatMetric":
        assert theirs.compute() == []
    else:
        with pytest.raises(ValueError, match="No samples to concatenate"):
            theirs.compute()
