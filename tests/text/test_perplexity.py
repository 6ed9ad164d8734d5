"""Perplexity against the installed torchmetrics: values, batch values, gradients, deferred errors, no host sync."""

import pytest
import torch
import torchmetrics
import torchmetrics.text as tmt
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import torchmetrics_async.text as tat
from tests.examples import example_for
from tests.parity import Step, assert_rejected_alike, batch_mismatches, run_side_by_side
from torchmetrics_async.testing import no_host_sync

DTYPES = [torch.float32, torch.float64, torch.float16]


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_values_and_batch_values_match_torchmetrics(data: st.DataObject) -> None:
    ignore_index = data.draw(st.sampled_from([None, 0, 2, -100]))
    dtype = data.draw(st.sampled_from(DTYPES))
    vocab = data.draw(st.integers(1, 6))
    generator = torch.Generator().manual_seed(data.draw(st.integers(0, 2**16)))
    steps = []
    for kind in data.draw(st.lists(st.sampled_from(["update", "forward"]), min_size=1, max_size=4)):
        batch, seq = data.draw(st.integers(0, 3)), data.draw(st.integers(0, 4))
        preds = (torch.randn(batch, seq, vocab, generator=generator) * 3).to(dtype)
        target = torch.randint(0, vocab, (batch, seq), generator=generator)
        if ignore_index is not None and target.numel():
            target.view(-1)[0] = ignore_index
        if data.draw(st.booleans()) and preds.numel():
            preds.view(-1)[-1] = float("nan")
        steps.append(Step(kind, (preds, target)))
    run_side_by_side(tmt.Perplexity(ignore_index=ignore_index), tat.Perplexity(ignore_index=ignore_index), steps)


@pytest.mark.parametrize("ignore_index", [None, -1])
def test_forward_keeps_the_graph_like_torchmetrics(ignore_index: int | None) -> None:
    logits = torch.randn(2, 4, 5, generator=torch.Generator().manual_seed(0))
    target = torch.tensor([[0, 1, 2, -1], [4, -1, 3, 3]]).clamp(min=ignore_index if ignore_index else 0)
    grads = []
    for module in (tmt, tat):
        leaf = logits.clone().requires_grad_()
        module.Perplexity(ignore_index=ignore_index)(leaf, target).backward()
        grads.append(leaf.grad)
    torch.testing.assert_close(grads[1], grads[0])


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("ignore_index", [None, 1])
def test_update_and_forward_make_no_host_sync(device: str, ignore_index: int | None) -> None:
    preds, target = torch.randn(2, 3, 4, device=device), torch.zeros(2, 3, dtype=torch.long, device=device)
    metric = tat.Perplexity(ignore_index=ignore_index).to(device)
    with no_host_sync():
        metric.update(preds, target)
        metric(preds, target)


@pytest.mark.parametrize("kind", ["update", "forward"])
def test_a_target_outside_the_vocabulary_is_raised_by_compute(kind: str) -> None:
    preds, target = torch.randn(1, 2, 3), torch.tensor([[0, 3]])
    with pytest.raises(IndexError):  # torchmetrics fails in its update (CPU; a device assert on CUDA)
        tmt.Perplexity().update(preds, target)
    metric = tat.Perplexity(ignore_index=-100)
    metric.update(preds, torch.tensor([[0, -100]]))  # ignored: not out of the vocabulary
    with no_host_sync():
        value = metric(preds, target) if kind == "forward" else metric.update(preds, target)
    if kind == "forward":
        assert torch.isnan(value)
    with pytest.raises(RuntimeError, match=r"outside the vocabulary"):
        metric.compute()


def test_shape_and_dtype_errors_are_torchmetrics_own() -> None:
    for preds, target in [
        (torch.randn(2, 3), torch.zeros(2, dtype=torch.long)),
        (torch.randn(2, 3, 4), torch.zeros(2, 4, dtype=torch.long)),
        (torch.randn(2, 3, 4), torch.zeros(2, 3, dtype=torch.int32)),
        (torch.zeros(2, 3, 4, dtype=torch.long), torch.zeros(2, 3, dtype=torch.long)),
    ]:
        with pytest.raises((ValueError, TypeError)) as expected:
            tmt.Perplexity().update(preds, target)
        with pytest.raises(type(expected.value)) as got:
            tat.Perplexity().update(preds, target)
        assert str(got.value) == str(expected.value)


def test_in_a_metric_collection_with_reset() -> None:
    generator = torch.Generator().manual_seed(3)
    preds, target = torch.randn(2, 3, 4, generator=generator), torch.randint(0, 4, (2, 3), generator=generator)
    ours = torchmetrics.MetricCollection({"a": tat.Perplexity(), "b": tat.Perplexity(ignore_index=0)})
    theirs = torchmetrics.MetricCollection({"a": tmt.Perplexity(), "b": tmt.Perplexity(ignore_index=0)})
    for _ in range(2):
        torch.testing.assert_close(ours(preds, target), theirs(preds, target))
        ours.update(preds * 2, target)
        theirs.update(preds * 2, target)
        torch.testing.assert_close(ours.compute(), theirs.compute())
        ours.reset()
        theirs.reset()


@pytest.mark.parametrize("ignore_index", [None, -100])
def test_jit_script_works_as_for_torchmetrics(ignore_index: int | None) -> None:
    torch.jit.script(tmt.Perplexity(ignore_index=ignore_index))  # torchmetrics' own tests script every metric
    torch.jit.script(tat.Perplexity(ignore_index=ignore_index))


def test_batch_size_mismatches_are_rejected_at_once_as_torchmetrics_rejects_them() -> None:
    example = example_for(tmt.Perplexity)
    for bad in batch_mismatches(example.inputs):
        assert_rejected_alike(
            lambda: tmt.Perplexity(**example.init), lambda: tat.Perplexity(**example.init), example.inputs, bad
        )
