"""Retrieval metrics against the installed torchmetrics: values, batch values, deferred checks, host syncs."""

from typing import Any

import pytest
import torch
import torchmetrics
import torchmetrics.retrieval as tmr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import torchmetrics_async.retrieval as tar
from tests.examples import example_for
from tests.parity import Step, assert_rejected_alike, batch_mismatches, run_side_by_side, torchmetrics_text
from torchmetrics_async.testing import count_host_syncs, no_host_sync

NAMES = tuple(tar.__all__)
TOP_K = ("RetrievalMRR", "RetrievalNormalizedDCG", "RetrievalPrecision", "RetrievalRecall", "RetrievalHitRate")
TOP_K += ("RetrievalFallOut", "RetrievalAUROC", "RetrievalMAP")
CURVES = ("RetrievalPrecisionRecallCurve", "RetrievalRecallAtFixedPrecision")


def _init(name: str, data: st.DataObject) -> dict[str, Any]:
    init: dict[str, Any] = {
        "empty_target_action": data.draw(st.sampled_from(["neg", "pos", "skip"])),
        "ignore_index": data.draw(st.sampled_from([None, -1, 1])),
    }
    if name != "RetrievalRecallAtFixedPrecision":
        init["aggregation"] = data.draw(st.sampled_from(["mean", "median", "min", "max"]))
    if name in TOP_K:
        init["top_k"] = data.draw(st.sampled_from([None, 1, 3]))
    if name in CURVES:
        init["max_k"] = data.draw(st.sampled_from([None, 2]))
        init["adaptive_k"] = data.draw(st.booleans())
    if name == "RetrievalRecallAtFixedPrecision":
        init["min_precision"] = data.draw(st.sampled_from([0.0, 0.5]))
    if name == "RetrievalPrecision":
        init["adaptive_k"] = data.draw(st.booleans())
    if name == "RetrievalAUROC":
        init["max_fpr"] = data.draw(st.sampled_from([None, 0.5]))
    return init


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_values_and_batch_values_match_torchmetrics(data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(NAMES))
    init = _init(name, data)
    graded = name == "RetrievalNormalizedDCG"
    target_dtype = data.draw(st.sampled_from([torch.long, torch.int, torch.bool, torch.float32]))
    generator = torch.Generator().manual_seed(data.draw(st.integers(0, 2**16)))
    steps = []
    for kind in data.draw(st.lists(st.sampled_from(["update", "forward"]), min_size=1, max_size=4)):
        size = data.draw(st.integers(1, 10))
        preds = torch.rand(size, generator=generator).to(data.draw(st.sampled_from([torch.float32, torch.float64])))
        target = torch.randint(0, 3 if graded else 2, (size,), generator=generator)
        if init["ignore_index"] is not None and target_dtype != torch.bool:
            target[torch.rand(size, generator=generator) < 0.3] = init["ignore_index"]
        target = target.to(target_dtype)
        indexes = torch.randint(0, 3, (size,), generator=generator)
        steps.append(Step(kind, (preds, target, indexes)))
    ours, theirs = getattr(tar, name)(**init), getattr(tmr, name)(**init)
    # A batch whose entries are all ignored fails torchmetrics' update; ours defers it: compared separately below.
    if init["ignore_index"] is not None and any(bool((s.args[1] == init["ignore_index"]).all()) for s in steps):
        return
    run_side_by_side(theirs, ours, steps)


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("ignore_index", [None, -1])
@pytest.mark.parametrize("name", NAMES)
def test_update_makes_no_host_sync(name: str, ignore_index: int | None, device: str) -> None:
    preds = torch.rand(6, device=device)
    target, indexes = torch.zeros(6, dtype=torch.long, device=device), torch.zeros(6, dtype=torch.long, device=device)
    metric = getattr(tar, name)(ignore_index=ignore_index).to(device)
    with no_host_sync():
        metric.update(preds, target, indexes)
        metric.update(preds, target, indexes=indexes)


@pytest.mark.parametrize("name", NAMES)
def test_forward_reads_the_host_as_torchmetrics_compute_does_and_no_more(name: str) -> None:
    """The batch value groups per query on the host: as many reads as torchmetrics' compute on the batch, plus 2."""
    preds, target = torch.rand(8, generator=torch.Generator().manual_seed(0)), torch.tensor([1, 0] * 4)
    target[0] = -1
    indexes = torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])
    ours = getattr(tar, name)(ignore_index=-1)
    reference = getattr(tmr, name)(ignore_index=-1)
    reference.update(preds, target, indexes)
    with count_host_syncs() as reference_reads:
        reference.compute()
    with count_host_syncs() as reads:
        value = ours(preds, target, indexes)
    # One read of the batch's violation flags, one to drop the ignored entries (torchmetrics drops them in update).
    assert reads.total == reference_reads.total + 2, reads.summary()
    torch.testing.assert_close(value, getattr(tmr, name)(ignore_index=-1)(preds, target, indexes))


@pytest.mark.parametrize("kind", ["update", "forward"])
@pytest.mark.parametrize("name", [n for n in NAMES if n != "RetrievalNormalizedDCG"])
def test_non_binary_targets_are_raised_by_compute_with_torchmetrics_message(name: str, kind: str) -> None:
    preds, target, indexes = torch.rand(4), torch.tensor([1, 0, 2, 0]), torch.tensor([0, 0, 1, 1])
    with pytest.raises(ValueError, match="binary") as expected:
        getattr(tmr, name)().update(preds, target, indexes)
    metric = getattr(tar, name)(ignore_index=2)
    metric.update(preds, target, indexes)  # the 2 is ignored: fine
    metric = getattr(tar, name)()
    metric.update(preds, torch.tensor([1, 0, 1, 0]), indexes)
    value = metric(preds, target, indexes) if kind == "forward" else metric.update(preds, target, indexes)
    if kind == "forward":
        first = value[0] if isinstance(value, tuple) else value
        assert torch.isnan(first).all()
    with pytest.raises(RuntimeError, match="") as got:
        metric.compute()
    assert torchmetrics_text(got.value) == str(expected.value)


@pytest.mark.parametrize("name", NAMES)
def test_a_batch_left_empty_by_ignore_index_is_raised_by_compute(name: str) -> None:
    preds, target, indexes = torch.rand(3), torch.tensor([-1, -1, -1]), torch.tensor([0, 0, 1])
    with pytest.raises(ValueError, match="non-empty") as expected:
        getattr(tmr, name)(ignore_index=-1).update(preds, target, indexes)
    metric = getattr(tar, name)(ignore_index=-1)
    with no_host_sync():
        metric.update(preds, target, indexes)
    with pytest.raises(RuntimeError) as got:
        metric.compute()
    assert torchmetrics_text(got.value) == str(expected.value)


@pytest.mark.parametrize("name", NAMES)
def test_shape_and_dtype_errors_are_eager_and_torchmetrics_own(name: str) -> None:
    cases = [
        (torch.rand(3), torch.tensor([1, 0, 1]), None),
        (torch.rand(3), torch.tensor([1, 0, 1]), torch.tensor([0, 0])),
        (torch.rand(3), torch.tensor([1, 0, 1]), torch.tensor([0, 0, 1]).int()),
        (torch.rand(0), torch.tensor([], dtype=torch.long), torch.tensor([], dtype=torch.long)),
        (torch.tensor(0.5), torch.tensor(1), torch.tensor(0)),
        (torch.tensor([1, 2, 3]), torch.tensor([1, 0, 1]), torch.tensor([0, 0, 1])),
        (torch.rand(3), torch.tensor([1.0, 0.0, 1.0]).half().to(torch.complex64), torch.tensor([0, 0, 1])),
    ]
    for preds, target, indexes in cases:
        with pytest.raises(ValueError, match="`") as expected:  # every message names an argument
            getattr(tmr, name)().update(preds, target, indexes)
        with pytest.raises(ValueError, match="`") as got:
            getattr(tar, name)().update(preds, target, indexes)
        assert str(got.value) == str(expected.value)


@pytest.mark.parametrize("name", NAMES)
def test_merge_state_both_ways_and_a_torchmetrics_state_dict(name: str) -> None:
    generator = torch.Generator().manual_seed(5)
    batches = [
        (torch.rand(6, generator=generator), torch.tensor([1, 0, -1, 0, 1, 1]), torch.tensor([0, 0, 0, 1, 1, 1]))
        for _ in range(2)
    ]
    ours, plain, reference = (getattr(module, name)(ignore_index=-1) for module in (tar, tmr, tmr))
    ours.update(*batches[0])
    plain.update(*batches[1])
    reference.update(*batches[0])
    reference.update(*batches[1])
    ours.merge_state(plain)  # a plain torchmetrics state: its entries were filtered, all of them count
    torch.testing.assert_close(ours.compute(), reference.compute())
    plain.persistent(True)
    loaded = getattr(tar, name)(ignore_index=-1)
    loaded.persistent(True)
    loaded.load_state_dict(plain.state_dict())
    torch.testing.assert_close(loaded.compute(), plain.compute())


def test_accelerate_converts_a_live_instance_mid_window() -> None:
    import torchmetrics_async as ta

    preds, target, indexes = torch.rand(4), torch.tensor([1, 0, -1, 1]), torch.tensor([0, 0, 1, 1])
    metric, reference = tmr.RetrievalMAP(ignore_index=-1), tmr.RetrievalMAP(ignore_index=-1)
    for m in (metric, reference):
        m.update(preds, target, indexes)
    ta.accelerate(metric)
    assert isinstance(metric, tar.RetrievalMAP)
    metric.update(preds, target, indexes)
    reference.update(preds, target, indexes)
    torch.testing.assert_close(metric.compute(), reference.compute())


def test_in_a_metric_collection_with_reset() -> None:
    generator = torch.Generator().manual_seed(7)
    preds, target, indexes = torch.rand(9, generator=generator), torch.tensor([1, 0, 1] * 3), torch.arange(9) % 3
    ours = torchmetrics.MetricCollection({name: getattr(tar, name)() for name in ("RetrievalMRR", "RetrievalMAP")})
    theirs = torchmetrics.MetricCollection({name: getattr(tmr, name)() for name in ("RetrievalMRR", "RetrievalMAP")})
    for _ in range(2):
        torch.testing.assert_close(ours(preds, target, indexes=indexes), theirs(preds, target, indexes=indexes))
        ours.update(preds.flip(0), target, indexes=indexes)
        theirs.update(preds.flip(0), target, indexes=indexes)
        torch.testing.assert_close(ours.compute(), theirs.compute())
        ours.reset()
        theirs.reset()


@pytest.mark.sweep
@pytest.mark.parametrize("ignore_index", [None, -1])
@pytest.mark.parametrize("name", NAMES)
def test_jit_script_works_as_for_torchmetrics(name: str, ignore_index: int | None) -> None:
    torch.jit.script(getattr(tmr, name)(ignore_index=ignore_index))  # torchmetrics' own tests script every metric
    torch.jit.script(getattr(tar, name)(ignore_index=ignore_index))


@pytest.mark.parametrize("name", NAMES)
def test_batch_size_mismatches_of_preds_target_indexes_are_rejected_at_once_as_torchmetrics(name: str) -> None:
    example = example_for(getattr(tmr, name))
    for bad in batch_mismatches(example.inputs):
        assert_rejected_alike(
            lambda: getattr(tmr, name)(**example.init), lambda: getattr(tar, name)(**example.init), example.inputs, bad
        )
