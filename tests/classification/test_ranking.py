"""The multilabel ranking metrics (coverage error, ranking average precision, ranking loss): parity with the installed
torchmetrics (ties, NaN, logits, ignored entries, extra dimensions, empty batches), no host sync in update/forward (CPU
and meta) nor in compute beyond the deferred flags, deferred target checks, eager dtype errors."""

from typing import Any

import pytest
import torch
import torchmetrics.classification as tmc
from hypothesis import given
from hypothesis import strategies as st

from tests.classification._derived import (
    SETTINGS,
    check_compute_reads,
    check_sync_free,
    grid,
    ignore_indices,
    run_invalid,
    run_pair,
    step_lists,
)
from torchmetrics_async.classification import ranking

NAMES = [name for name in ranking.__all__ if name.startswith("Multilabel")]


@st.composite
def configs(draw: Any) -> dict[str, Any]:
    labels = draw(st.integers(2, 5))
    return {"num_labels": labels, "ignore_index": draw(ignore_indices(2)), "validate_args": draw(st.booleans())}


@pytest.mark.sweep
@pytest.mark.parametrize("name", NAMES)
@SETTINGS
@given(data=st.data())
def test_parity_with_torchmetrics(name: str, data: Any) -> None:
    kwargs = data.draw(configs())
    run_pair(name, kwargs, data.draw(step_lists(name, kwargs, labels=False)))


@pytest.mark.parametrize("name", NAMES)
def test_tied_scores_rank_as_torchmetrics(name: str) -> None:
    preds = torch.tensor([[0.5, 0.5, 0.2, 0.5], [0.1, 0.1, 0.1, 0.1], [0.9, float("nan"), 0.3, float("nan")]])
    target = torch.tensor([[1, 0, 1, 1], [0, 1, 0, 1], [1, 1, 0, 1]])
    assert run_pair(name, {"num_labels": 4}, [("forward", preds, target), ("update", preds.flip(1), target)]) == "ok"


@pytest.mark.parametrize("name", NAMES)
def test_invalid_targets_raise_in_compute(name: str) -> None:
    good = torch.rand(4, 3), torch.tensor([[0, 1, 1], [1, 0, 1], [1, 1, 1], [0, 0, 1]])
    run_invalid(name, {"num_labels": 3}, good, (good[0], torch.tensor([[0, 1, 1], [1, 7, 1], [1, 1, 1], [0, 0, 1]])))


@pytest.mark.parametrize("name", NAMES)
def test_integer_preds_are_rejected_at_once_as_in_torchmetrics(name: str) -> None:
    preds, target = torch.tensor([[1, 0, 1]]), torch.tensor([[1, 0, 0]])
    with pytest.raises(ValueError, match="floating point") as theirs:
        getattr(tmc, name)(num_labels=3).update(preds, target)
    with pytest.raises(ValueError, match="floating point") as ours:
        getattr(ranking, name)(num_labels=3).update(preds, target)
    assert str(ours.value) == str(theirs.value)


def _inputs(device: str) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    target = torch.randint(0, 2, (6, 4), generator=g)
    return {
        "probs": (torch.rand(6, 4, generator=g).to(device), target.to(device)),
        "logits, extra dim": (
            torch.randn(6, 4, 2, generator=g).to(device),
            target[:, :, None].repeat(1, 1, 2).to(device),
        ),
        "ignored": (torch.rand(6, 4, generator=g).to(device), target.masked_fill(target == 0, -1).to(device)),
    }


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("kind", ["update", "forward"])
@pytest.mark.parametrize("name", NAMES)
def test_no_host_sync(name: str, kind: str, device: str) -> None:
    configs = grid({"num_labels": 4}, {"ignore_index": [None, -1], "validate_args": [True, False]})
    check_sync_free(name, configs, _inputs, kind, device)


@pytest.mark.parametrize("name", NAMES)
def test_compute_reads_only_the_deferred_flags(name: str) -> None:
    configs = grid({"num_labels": 4}, {"validate_args": [True, False]})
    check_compute_reads(name, configs, _inputs("cpu")["probs"])
